"""DeltaHook: an Airflow connection turned into object-store ``storage_options``.

The options are the ``object_store`` configuration keys that both ``obstore`` (the log
listing) and ``deltalake`` accept. The connection is one of our ``delta`` type, or a cloud
connection the DAG author already has (``aws``, ``wasb``, ``adls``,
``google_cloud_platform``): see :mod:`airflow_provider_delta.hooks.storage_options` for the
fields each is read by. ``delta`` connection fields:

* ``login`` / ``password``: access key id and secret (S3), account name and key (Azure),
  or -- for GCS -- the service account key JSON in ``password``;
* ``host``: the endpoint URL of an S3-compatible store (``http://127.0.0.1:9000``) or of Azure;
* ``extra`` (JSON): ``provider`` (``"s3"``, the default, ``"azure"`` or ``"gcs"``), ``region``,
  ``session_token``, ``allow_http``, ``storage_options``: any further object_store keys,
  passed through unchanged (they win over the fields above), and ``location``: the bucket,
  folder or table URI that the UI's Test button lists.

Secrets are registered with Airflow's secrets masker by value (:func:`mask_credentials`: the
values of every key :func:`~airflow_provider_delta.credential_keys.is_credential_key` calls a
credential, whatever Airflow's own name heuristic says), so they never show in task logs; the
options are built at run time from the connection and are never a template field, so they
are never rendered or serialized with a DAG. A store that refuses them (HTTP 401/403) fails
with a :class:`~airflow_provider_delta.errors.StorageAccessError` naming the connection.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from airflow_provider_delta.compat import (
    AirflowNotFoundException,
    BaseHook,
    aget_connection,
    amask_secret,
    connection_form_widgets,
    mask_secret,
)
from airflow_provider_delta.credential_keys import secret_forms
from airflow_provider_delta.errors import DeltaProviderError, TransientStorageError
from airflow_provider_delta.get_provider_info import CONN_FIELDS, CONNECTION_FORM
from airflow_provider_delta.hooks.storage_options import storage_options_from_connection
from airflow_provider_delta.storage import ConnectionStorageOptions, holds_delta_log

__all__ = ["DEFAULT_CONN_ID", "DeltaHook", "connection_storage_options", "mask_credentials",
           "storage_options_from_connection"]

log = logging.getLogger(__name__)

# The default of every delta_conn_id (hook, sensor, trigger, operators). Used when defined;
# when not, the table is read without a connection, as the Amazon provider treats aws_default.
DEFAULT_CONN_ID = "delta_default"


def mask_credentials(*options: Mapping[str, Any] | None) -> None:
    """Register every credential of ``options`` with Airflow's secrets masker, by value (a
    name-based registration skips keys Airflow does not know, such as ``account_key``)."""
    for option_map in options:
        for secret in secret_forms(option_map):
            mask_secret(secret)


async def amask_credentials(options: Mapping[str, Any]) -> None:
    """:func:`mask_credentials` from a trigger's event loop (never blocks it)."""
    for secret in secret_forms(options):
        await amask_secret(secret)


class DeltaHook(BaseHook):
    """Storage options for Delta tables on object stores, from an Airflow connection.

    :param delta_conn_id: id of a connection of type ``delta``, ``aws``, ``wasb``, ``adls`` or
        ``google_cloud_platform`` (default ``delta_default``, as for the sensor, the trigger
        and the operators).
    """

    conn_name_attr = "delta_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = "delta"
    hook_name = "Delta Lake"

    def __init__(self, delta_conn_id: str = default_conn_name, **kwargs: Any):
        super().__init__(**kwargs)
        self.delta_conn_id = delta_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Labels of the connection form, as listed in ``get_provider_info`` (the hook API
        spells ``hidden-fields`` as ``hidden_fields``; Airflow 2 to 3.1 read it from here)."""
        return {key.replace("-", "_"): value for key, value in CONNECTION_FORM.items()}

    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        """The form's extra fields where Airflow does not draw them from the provider info."""
        return connection_form_widgets(CONN_FIELDS)

    def get_conn(self) -> dict[str, str]:
        """Same as :meth:`get_storage_options`."""
        return self.get_storage_options()

    def get_storage_options(self) -> ConnectionStorageOptions:
        """The connection as object_store ``storage_options`` (secrets masked in logs)."""
        options = storage_options_from_connection(self.get_connection(self.delta_conn_id))
        mask_credentials(options)
        return options

    async def aget_storage_options(self) -> ConnectionStorageOptions:
        """Async twin of :meth:`get_storage_options`, for triggers (never blocks the loop)."""
        options = storage_options_from_connection(await aget_connection(self.delta_conn_id))
        await amask_credentials(options)
        return options

    def test_connection(self, location: str | None = None) -> tuple[bool, str]:
        """The UI's Test button: list ``location`` (default: the connection's extra
        ``location``) with the connection's storage options. ``(True, what was found)`` when
        the store answers, else ``(False, the reason)``; never raises."""
        try:
            location = location or self.get_connection(self.delta_conn_id).extra_dejson.get(
                "location")
            if not location:
                return False, (f"Connection {self.delta_conn_id!r} names no location to list: "
                               'set extra "location" to a bucket, folder or table URI.')
            return True, self._describe(location, self.get_storage_options())
        except TransientStorageError as err:
            return False, (f"{location}: the store did not answer ({err.detail}). Check the "
                           f"endpoint of connection {self.delta_conn_id!r}, or try again.")
        except DeltaProviderError as err:
            return False, str(err)
        except Exception as err:  # the Test button shows every failure; it must not raise
            return False, f"{type(err).__name__}: {err}"

    def _describe(self, location: str, options: ConnectionStorageOptions) -> str:
        found = ("a Delta table (it has a _delta_log)" if holds_delta_log(location, options)
                 else "no Delta table there (no _delta_log)")
        return (f"{location}: listed with connection {self.delta_conn_id!r} "
                f"(type {options.conn_type}): {found}.")


def connection_storage_options(conn_id: str | None) -> ConnectionStorageOptions | None:
    """The storage options of connection ``conn_id``; None for no connection (``None``), or
    for :data:`DEFAULT_CONN_ID` when it is not defined (local tables, or credentials the store
    finds in the environment). Another connection that is not defined raises."""
    if not conn_id:
        return None
    try:
        return DeltaHook(conn_id).get_storage_options()
    except AirflowNotFoundException:
        return _without_default_connection(conn_id)


async def aconnection_storage_options(conn_id: str | None) -> ConnectionStorageOptions | None:
    """:func:`connection_storage_options` from a trigger's event loop."""
    if not conn_id:
        return None
    try:
        return await DeltaHook(conn_id).aget_storage_options()
    except AirflowNotFoundException:
        return _without_default_connection(conn_id)


def _without_default_connection(conn_id: str) -> None:
    """A connection that is not defined: fine for the default one, else re-raised."""
    if conn_id != DEFAULT_CONN_ID:
        raise
    # Once a process at INFO: a triggerer opening thousands of tables would repeat it for each.
    level = logging.DEBUG if conn_id in _LOGGED_MISSING else logging.INFO
    _LOGGED_MISSING.add(conn_id)
    log.log(level, "Connection %r is not defined: the table is read without one", conn_id)


_LOGGED_MISSING: set[str] = set()  # missing connections logged at INFO already
