"""Airflow connections as object_store ``storage_options``: our ``delta`` type, and the cloud
connections DAG authors already have (``aws``, ``wasb``, ``adls``, ``google_cloud_platform``).

The cloud connections are read by their documented fields (login, password, host, extras),
so the Amazon, Azure and Google providers need not be installed. The option names are the
``object_store`` keys that both ``obstore`` and ``deltalake`` accept. A field that would
change *whose* credentials are used, but that object_store cannot honour (assuming an AWS
role, a profile, a Google secret or impersonation), is refused, never silently dropped.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from airflow_provider_delta.errors import DeltaProviderError
from airflow_provider_delta.storage import ConnectionStorageOptions

if TYPE_CHECKING:
    from airflow_provider_delta.compat import Connection

# Extras of the cloud connections that object_store has no equivalent for.
_UNSUPPORTED_EXTRAS = {
    "aws": ("role_arn", "profile_name"),
    "google_cloud_platform": ("key_secret_name", "credential_config_file",
                              "impersonation_chain"),
}


def storage_options_from_connection(conn: Connection) -> ConnectionStorageOptions:
    """Translate a connection into object_store configuration keys (unmasked)."""
    build = _BY_CONN_TYPE.get(conn.conn_type)
    if build is None:
        raise DeltaProviderError(
            f"Connection {conn.conn_id!r} is of type {conn.conn_type!r}, which holds no storage "
            f"credentials this provider reads; give delta_conn_id a connection of type "
            f"{', '.join(sorted(_BY_CONN_TYPE))}."
        )
    extra = conn.extra_dejson
    _refuse_unsupported_extras(conn, extra)
    options = {key: str(value) for key, value in build(conn, extra).items()
               if value not in (None, "")}
    return ConnectionStorageOptions(options, conn.conn_id, conn.conn_type)


# -- delta: our own connection type ------------------------------------------------------


def _delta_options(conn: Connection, extra: dict[str, Any]) -> dict[str, Any]:
    provider = str(extra.get("provider") or "s3").lower()  # a form may save it empty
    build = _DELTA_PROVIDERS.get(provider)
    if build is None:
        raise DeltaProviderError(
            f"Connection {conn.conn_id!r}: provider {provider!r} is not supported; set extra "
            f'"provider" to one of {", ".join(sorted(_DELTA_PROVIDERS))}.'
        )
    options = build(conn, extra)
    # Passed through unchanged; they win over the fields above.
    options.update({str(k).upper(): v for k, v in _passed_through(conn, extra).items()})
    return options


def _passed_through(conn: Connection, extra: dict[str, Any]) -> dict[str, Any]:
    """Extra ``storage_options``: an object, or its JSON text (Airflow 2's form has text fields)."""
    given = extra.get("storage_options") or {}
    if isinstance(given, str):
        try:
            given = json.loads(given)
        except ValueError as err:
            raise DeltaProviderError(
                f"Connection {conn.conn_id!r}: extra storage_options is not JSON ({err}); give "
                'an object of object_store keys, e.g. {"AWS_REGION": "us-east-1"}.') from None
    if not isinstance(given, dict):
        raise DeltaProviderError(
            f"Connection {conn.conn_id!r}: extra storage_options must be an object of "
            f"object_store keys, not {type(given).__name__}.")
    return given


def _delta_s3_options(conn: Connection, extra: dict[str, Any]) -> dict[str, Any]:
    endpoint = _endpoint_url(conn.host or extra.get("endpoint_url"), conn.port, extra)
    return {
        "AWS_ACCESS_KEY_ID": conn.login,
        "AWS_SECRET_ACCESS_KEY": conn.password,
        "AWS_SESSION_TOKEN": extra.get("session_token"),
        "AWS_REGION": extra.get("region") or extra.get("region_name"),
        **_s3_endpoint_options(endpoint),
    }


def _delta_azure_options(conn: Connection, extra: dict[str, Any]) -> dict[str, Any]:
    return {
        "AZURE_STORAGE_ACCOUNT_NAME": conn.login,
        "AZURE_STORAGE_ACCOUNT_KEY": conn.password,
        "AZURE_STORAGE_SAS_KEY": extra.get("sas_token"),
        "AZURE_STORAGE_ENDPOINT": _endpoint_url(conn.host, conn.port, extra),
        "AZURE_ALLOW_HTTP": "true" if _truthy(extra.get("allow_http")) else None,
    }


def _delta_gcs_options(conn: Connection, extra: dict[str, Any]) -> dict[str, Any]:
    return {
        "GOOGLE_SERVICE_ACCOUNT_KEY": conn.password,
        "GOOGLE_SERVICE_ACCOUNT": extra.get("key_path"),
    }


_DELTA_PROVIDERS: dict[str, Callable[[Connection, dict[str, Any]], dict[str, Any]]] = {
    "s3": _delta_s3_options,
    "azure": _delta_azure_options,
    "gcs": _delta_gcs_options,
}


def _endpoint_url(host: str | None, port: int | None, extra: dict[str, Any]) -> str | None:
    """A full endpoint URL from the host field, which connection URIs leave without a scheme."""
    if not host:
        return None
    if "://" not in host:
        host = f"{'http' if _truthy(extra.get('allow_http')) else 'https'}://{host}"
    if port and ":" not in host.split("://", 1)[1]:
        host = f"{host.rstrip('/')}:{port}"
    return host


# -- aws (Amazon provider) -----------------------------------------------------------------


def _aws_options(conn: Connection, extra: dict[str, Any]) -> dict[str, Any]:
    """Keys from login/password (or the ``aws_access_key_id``/``aws_secret_access_key``
    extras), ``aws_session_token``, ``region_name``, and the endpoint: the S3 one of
    ``service_config`` before the global ``endpoint_url``."""
    s3_config = (extra.get("service_config") or {}).get("s3") or {}
    return {
        "AWS_ACCESS_KEY_ID": conn.login or extra.get("aws_access_key_id"),
        "AWS_SECRET_ACCESS_KEY": conn.password or extra.get("aws_secret_access_key"),
        "AWS_SESSION_TOKEN": extra.get("aws_session_token"),
        "AWS_REGION": extra.get("region_name"),
        **_s3_endpoint_options(s3_config.get("endpoint_url") or extra.get("endpoint_url")),
    }


def _s3_endpoint_options(endpoint: str | None) -> dict[str, Any]:
    """The endpoint, and plain HTTP allowed exactly when it is an http:// one."""
    allow_http = endpoint is not None and endpoint.startswith("http://")
    return {"AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true" if allow_http else None}


# -- wasb and adls (Azure provider) --------------------------------------------------------


def _azure_storage_options(conn: Connection, extra: dict[str, Any]) -> dict[str, Any]:
    """A service principal (``tenant_id`` given: login/password are client id and secret),
    else the account key (password, ``shared_access_key`` or ``account_key``) or a
    ``sas_token``; a ``connection_string`` is read too. The account is the one of the host
    (account URL, or a bare account name for adls), else -- without a tenant -- the login."""
    field = _extra_field(conn, extra)
    tenant = field("tenant_id")
    options = _connection_string_options(field("connection_string"))
    options.setdefault("AZURE_STORAGE_ACCOUNT_NAME",
                       _azure_account(conn.host) or (None if tenant else conn.login))
    if tenant:
        options.update({"AZURE_STORAGE_TENANT_ID": tenant, "AZURE_STORAGE_CLIENT_ID": conn.login,
                        "AZURE_STORAGE_CLIENT_SECRET": conn.password})
    else:
        options.setdefault("AZURE_STORAGE_ACCOUNT_KEY", field("shared_access_key")
                           or conn.password or field("account_key"))
    sas = field("sas_token")
    if sas:
        options["AZURE_STORAGE_SAS_KEY"] = sas.partition("?")[2] if "://" in sas else sas
    if field("managed_identity_client_id") and not tenant:
        options["AZURE_STORAGE_CLIENT_ID"] = field("managed_identity_client_id")
    return options


def _azure_account(host: str | None) -> str | None:
    """``https://acct.blob.core.windows.net/`` or ``acct`` -> ``acct``."""
    if not host:
        return None
    name = urlsplit(host).hostname if "://" in host else host
    return (name or "").split(".", 1)[0] or None


_CONNECTION_STRING_KEYS = {
    "AccountName": "AZURE_STORAGE_ACCOUNT_NAME",
    "AccountKey": "AZURE_STORAGE_ACCOUNT_KEY",
    "SharedAccessSignature": "AZURE_STORAGE_SAS_KEY",
    "BlobEndpoint": "AZURE_STORAGE_ENDPOINT",
}


def _connection_string_options(connection_string: str | None) -> dict[str, Any]:
    """``AccountName=a;AccountKey=k;...`` as options (parts object_store has no key for are
    left out)."""
    parts = (part.partition("=") for part in (connection_string or "").split(";") if part)
    return {_CONNECTION_STRING_KEYS[name]: value for name, _, value in parts
            if name in _CONNECTION_STRING_KEYS}


# -- google_cloud_platform (Google provider) -----------------------------------------------


def _gcp_options(conn: Connection, extra: dict[str, Any]) -> dict[str, Any]:
    """The service account key: ``key_path`` (a file) or ``keyfile_dict`` (its JSON); with
    neither, Application Default Credentials."""
    field = _extra_field(conn, extra)
    keyfile = field("keyfile_dict")
    return {
        "GOOGLE_SERVICE_ACCOUNT": field("key_path"),
        "GOOGLE_SERVICE_ACCOUNT_KEY": json.dumps(keyfile) if isinstance(keyfile, dict) else keyfile,
    }


_BY_CONN_TYPE: dict[str, Callable[[Connection, dict[str, Any]], dict[str, Any]]] = {
    "delta": _delta_options,
    "aws": _aws_options,
    "wasb": _azure_storage_options,
    "adls": _azure_storage_options,
    "google_cloud_platform": _gcp_options,
}


def _refuse_unsupported_extras(conn: Connection, extra: dict[str, Any]) -> None:
    field = _extra_field(conn, extra)
    given = [name for name in _UNSUPPORTED_EXTRAS.get(conn.conn_type, ()) if field(name)]
    if given:
        raise DeltaProviderError(
            f"Connection {conn.conn_id!r} (type {conn.conn_type}) sets {', '.join(given)}, which "
            "the object-store client this provider lists and reads tables with cannot use; give "
            "delta_conn_id a connection holding the keys themselves (login/password, a key "
            "file), or one with none, so that the environment's credentials are used."
        )


def _extra_field(conn: Connection, extra: dict[str, Any]) -> Callable[[str], Any]:
    """An extra by name; connections saved by older UIs prefix it ``extra__<type>__``."""
    return lambda name: extra.get(name) or extra.get(f"extra__{conn.conn_type}__{name}") or None


def _truthy(value: Any) -> bool:
    return str(value).lower() in ("1", "true", "yes", "on")
