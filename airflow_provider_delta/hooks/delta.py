"""DeltaHook: an Airflow ``delta`` connection turned into object-store ``storage_options``.

The options are the ``object_store`` configuration keys that both ``obstore`` (the log
listing) and ``deltalake`` accept. Connection fields:

* ``login`` / ``password``: access key id and secret (S3), account name and key (Azure),
  or -- for GCS -- the service account key JSON in ``password``;
* ``host``: the endpoint URL of an S3-compatible store (``http://127.0.0.1:9000``) or of Azure;
* ``extra`` (JSON): ``provider`` (``"s3"``, the default, ``"azure"`` or ``"gcs"``), ``region``,
  ``session_token``, ``allow_http``, and ``storage_options``: any further object_store keys,
  passed through unchanged (they win over the fields above).

Secrets are registered with Airflow's secrets masker, so they never show in task logs; the
options are built at run time from the connection and are never a template field, so they
are never rendered or serialized with a DAG.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

from airflow_provider_delta.errors import DeltaProviderError
from airflow_provider_delta.get_provider_info import CONNECTION_FORM

if TYPE_CHECKING:
    from airflow.sdk import Connection

# Keys whose values must never appear in logs.
SECRET_OPTION_KEYS = frozenset(
    {
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AZURE_STORAGE_ACCOUNT_KEY",
        "AZURE_STORAGE_SAS_KEY",
        "AZURE_STORAGE_TOKEN",
        "AZURE_STORAGE_CLIENT_SECRET",
        "GOOGLE_SERVICE_ACCOUNT_KEY",
    }
)


class DeltaHook(BaseHook):
    """Storage options for Delta tables on object stores, from an Airflow connection.

    :param delta_conn_id: id of a connection of type ``delta``.
    """

    conn_name_attr = "delta_conn_id"
    default_conn_name = "delta_default"
    conn_type = "delta"
    hook_name = "Delta Lake"

    def __init__(self, delta_conn_id: str = default_conn_name, **kwargs: Any):
        super().__init__(**kwargs)
        self.delta_conn_id = delta_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Labels of the connection form, as listed in ``get_provider_info``."""
        return CONNECTION_FORM

    def get_conn(self) -> dict[str, str]:
        """Same as :meth:`get_storage_options`."""
        return self.get_storage_options()

    def get_storage_options(self) -> dict[str, str]:
        """The connection as object_store ``storage_options`` (secrets masked in logs)."""
        from airflow.sdk.log import mask_secret

        options = storage_options_from_connection(self.get_connection(self.delta_conn_id))
        for key, secret in secret_options(options):
            mask_secret(secret, name=key)
        return options

    async def aget_storage_options(self) -> dict[str, str]:
        """Async twin of :meth:`get_storage_options`, for triggers (never blocks the loop)."""
        from airflow.sdk.log import amask_secret

        options = storage_options_from_connection(await self.aget_connection(self.delta_conn_id))
        for key, secret in secret_options(options):
            await amask_secret(secret, name=key)
        return options


def storage_options_from_connection(conn: Connection) -> dict[str, str]:
    """Translate a ``delta`` connection into object_store configuration keys (unmasked)."""
    extra = conn.extra_dejson
    provider = str(extra.get("provider", "s3")).lower()
    build = _BUILDERS.get(provider)
    if build is None:
        raise DeltaProviderError(
            f"Connection {conn.conn_id!r}: provider {provider!r} is not supported; set extra "
            f'"provider" to one of {", ".join(sorted(_BUILDERS))}.'
        )
    options = {key: value for key, value in build(conn, extra).items() if value not in (None, "")}
    options.update({str(k).upper(): str(v) for k, v in extra.get("storage_options", {}).items()})
    return options


def secret_options(options: dict[str, str]) -> list[tuple[str, str]]:
    """The (key, value) pairs of ``options`` that must never show in logs."""
    return [(key, value) for key, value in options.items() if key in SECRET_OPTION_KEYS]


def _s3_options(conn: Connection, extra: dict[str, Any]) -> dict[str, Any]:
    endpoint = _endpoint_url(conn.host or extra.get("endpoint_url"), conn.port, extra)
    allow_http = endpoint is not None and endpoint.startswith("http://")
    return {
        "AWS_ACCESS_KEY_ID": conn.login,
        "AWS_SECRET_ACCESS_KEY": conn.password,
        "AWS_SESSION_TOKEN": extra.get("session_token"),
        "AWS_REGION": extra.get("region") or extra.get("region_name"),
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ALLOW_HTTP": "true" if allow_http else None,
    }


def _azure_options(conn: Connection, extra: dict[str, Any]) -> dict[str, Any]:
    return {
        "AZURE_STORAGE_ACCOUNT_NAME": conn.login,
        "AZURE_STORAGE_ACCOUNT_KEY": conn.password,
        "AZURE_STORAGE_SAS_KEY": extra.get("sas_token"),
        "AZURE_STORAGE_ENDPOINT": _endpoint_url(conn.host, conn.port, extra),
        "AZURE_ALLOW_HTTP": "true" if _truthy(extra.get("allow_http")) else None,
    }


def _gcs_options(conn: Connection, extra: dict[str, Any]) -> dict[str, Any]:
    return {
        "GOOGLE_SERVICE_ACCOUNT_KEY": conn.password,
        "GOOGLE_SERVICE_ACCOUNT": extra.get("key_path"),
    }


_BUILDERS: dict[str, Callable[[Connection, dict[str, Any]], dict[str, Any]]] = {
    "s3": _s3_options,
    "azure": _azure_options,
    "gcs": _gcs_options,
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


def _truthy(value: Any) -> bool:
    return str(value).lower() in ("1", "true", "yes", "on")
