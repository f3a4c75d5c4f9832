"""The one place that knows which Airflow runs the provider (2.11 up to 3.3).

Names that ``apache-airflow-providers-common-compat`` covers come from it, as in the official
providers: Airflow 3's Task SDK where it exists, Airflow 2's modules before (``Asset`` is
``Dataset`` there). What it does not cover is decided here, once, and everything else in the
package imports Airflow through this module. Nothing here fails to import on an older Airflow:
a newer-only feature fails when it is used, with :class:`AirflowVersionError`.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow import __version__ as AIRFLOW_VERSION
from airflow.providers.common.compat.sdk import (
    AirflowException,
    AirflowNotFoundException,
    AirflowSensorTimeout,
    Asset,
    BaseHook,
    BaseOperatorLink,
    BaseSensorOperator,
    PokeReturnValue,
    Variable,
    conf,
    mask_secret,
)
from airflow.providers.common.compat.sdk import get_current_context as _get_current_context
from airflow.providers.common.compat.triggers import BaseEventTrigger  # BaseTrigger on 2.x
from airflow.triggers.base import BaseTrigger, TriggerEvent
from packaging.version import Version

from airflow_provider_delta.errors import AirflowVersionError

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Connection, Context

__all__ = [
    "AIRFLOW_VERSION", "AirflowNotFoundException", "AirflowSensorTimeout", "Asset", "BaseEventTrigger",
    "BaseHook", "BaseOperatorLink", "BaseSensorOperator", "BaseTrigger", "PokeReturnValue",
    "TriggerEvent", "Variable", "aget_connection", "amask_secret", "asset", "conf", "first_reschedule_date",
    "get_current_context", "mask_secret", "require_airflow", "trigger_asset_state", "variable_key",
    "variable_key_of_airflow_3_0",
]

_INSTALLED = Version(Version(AIRFLOW_VERSION).base_version)

# Newer-only features: (what a DAG author reads, the first Airflow that has it).
ASSET_WATCHER = ("DeltaVersionTrigger as an AssetWatcher event trigger", "3.0.0")
# 3.3.2: Task SDK 1.3.2's async aget/aset of the asset state store, which the watcher awaits.
ASSET_STATE = ("watermark_store='asset_state' (the asset state store)", "3.3.2")
# Partition keys added at run time to an outlet's asset event (OutletEventAccessor.add_partitions).
ASSET_PARTITIONS = ("asset_partition= (asset events with a partition key)", "3.3.0")


def airflow_at_least(version: str) -> bool:
    return _INSTALLED >= Version(version)


def require_airflow(feature: tuple[str, str], instead: str, *, table_uri: str | None = None
                    ) -> None:
    """Raise :class:`AirflowVersionError` if the installed Airflow lacks ``feature``."""
    name, needs = feature
    if not airflow_at_least(needs):
        raise AirflowVersionError(name, needs, AIRFLOW_VERSION, instead, table_uri=table_uri)


def get_current_context() -> Context:
    """The running task's context; RuntimeError outside a task run, on Airflow 2 as on 3."""
    try:
        return _get_current_context()
    except AirflowException as err:  # Airflow 2's "no context was found"
        raise RuntimeError(str(err)) from err


def asset(uri: str) -> Any:
    """The asset a load writes, named by its URI (a ``Dataset`` on Airflow 2, which has no name)."""
    if airflow_at_least("3.0.0"):
        return Asset(uri=uri, name=uri)
    return Asset(uri=uri)


def variable_key(key: str) -> str:
    """The name a task can read and write the Variable ``key`` under. Airflow 3.0's execution
    API routes a Variable key only up to its first "/" (a 404 for ``name:/path``; 3.1 takes the
    whole path), so there each "/" is stored as "|"."""
    if airflow_at_least("3.0.0") and not airflow_at_least("3.1.0"):
        return variable_key_of_airflow_3_0(key)
    return key


def variable_key_of_airflow_3_0(key: str) -> str:
    """The name Airflow 3.0 kept the Variable ``key`` under (see :func:`variable_key`): still
    read after an upgrade."""
    return key.replace("/", "|")


async def aget_connection(conn_id: str) -> Connection:
    """A connection, from a trigger's event loop (the async lookup arrived in Airflow 3.1)."""
    if hasattr(BaseHook, "aget_connection"):
        return await BaseHook.aget_connection(conn_id)
    return await asyncio.to_thread(BaseHook.get_connection, conn_id)


async def amask_secret(secret: str, name: str | None = None) -> None:
    """Register a secret with the masker from async code (async masking: Airflow 3.3)."""
    try:
        from airflow.sdk.log import amask_secret as masker
    except ImportError:
        mask_secret(secret, name=name)
    else:
        await masker(secret, name=name)


def trigger_asset_state(trigger: Any) -> Any:
    """A watcher trigger's asset state accessor; None before Airflow 3.3.2 or without one
    (the watermark then lives in memory, as the module of the trigger says)."""
    if not airflow_at_least(ASSET_STATE[1]):
        return None
    return getattr(trigger, "asset_state_store", None)


def first_reschedule_date(context: Context) -> datetime | None:
    """When a rescheduled sensor first poked (None if it was not rescheduled yet)."""
    ti = context["ti"]
    if hasattr(ti, "get_first_reschedule_date"):  # the Task SDK's task instance (Airflow 3)
        return ti.get_first_reschedule_date(context)
    from airflow.sensors.base import _orig_start_date  # Airflow 2: the sensor's own lookup

    first_try = (ti.max_tries or 0) - (ti.task.retries or 0) + 1
    return _orig_start_date(dag_id=ti.dag_id, task_id=ti.task_id, run_id=ti.run_id,
                            map_index=ti.map_index, try_number=first_try)


def connection_form_widgets(fields: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The form fields of provider-info ``conn-fields``, as the Flask form of Airflow 2 (and
    the Airflow 3 versions that do not read ``conn-fields``) wants them: text, password or
    checkbox. Imported only by the web server that draws the form."""
    from flask_appbuilder.fieldwidgets import BS3PasswordFieldWidget, BS3TextFieldWidget
    from flask_babel import lazy_gettext
    from wtforms import BooleanField, PasswordField, StringField

    widgets = {}
    for name, field in fields.items():
        schema = field["schema"]
        label, description = lazy_gettext(field["label"]), field.get("description", "")
        if "boolean" in schema["type"]:
            widgets[name] = BooleanField(label, description=description,
                                         default=schema.get("default", False))
        elif schema.get("format") == "password":
            widgets[name] = PasswordField(label, description=description,
                                          widget=BS3PasswordFieldWidget())
        else:
            widgets[name] = StringField(label, description=description,
                                        default=schema.get("default"), widget=BS3TextFieldWidget())
    return widgets
