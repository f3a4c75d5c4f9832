"""The rule between a load and the sensor its ``sensor_task_id`` names.

The sensor must be a :class:`~airflow_provider_delta.sensors.DeltaVersionSensor` upstream of
the load, watching the load's table and reading the watermark the load moves: the same store
and key, and for ``"xcom"`` the load's own XCom. Otherwise the load finds no range in the
sensor's XCom and quietly falls back to the watermark, or the sensor reads a watermark nobody
moves and wakes forever on versions already loaded.

Checked when the load starts, before the watermark is read or Spark starts: only then is the
DAG complete (a DAG file adds and links its tasks in any order). A mapped sensor is checked
on what its ``partial()`` arguments fix.
"""

from __future__ import annotations

import difflib
import inspect
from typing import TYPE_CHECKING, Any

from airflow_provider_delta.errors import InvalidParameterError
from airflow_provider_delta.storage import location_problem, normalised_location

if TYPE_CHECKING:
    from airflow_provider_delta.compat import Context

_UNKNOWN = object()  # a mapped sensor's value known only per map index


def check_upstream_sensor(load: Any, context: Context) -> None:
    """Refuse a ``sensor_task_id`` of ``load`` that names no fitting upstream sensor."""
    from airflow_provider_delta.sensors.delta_version import DeltaVersionSensor

    sensor_id = load.sensor_task_id
    if not sensor_id or not load.has_dag():
        return
    dag = load.dag
    sensor = dag.task_dict.get(sensor_id)
    if sensor is None:
        _refuse(load, f"names no task of DAG {dag.dag_id!r}", _fix_missing(load, dag))
    kind = getattr(sensor, "operator_class", type(sensor))
    if not (isinstance(kind, type) and issubclass(kind, DeltaVersionSensor)):
        name = kind.__name__ if isinstance(kind, type) else type(sensor).__name__
        _refuse(load, f"names a {name}, not a DeltaVersionSensor",
                f"name the DeltaVersionSensor that waits for {load.table_uri}, or drop "
                "sensor_task_id to load from the watermark")
    if sensor_id not in load.get_flat_relative_ids(upstream=True):
        _refuse(load, f"is not upstream of {load.task_id}: the load may run before it",
                f"add {sensor_id} >> {load.task_id}")
    for name, sensor_value, load_value in _compared_settings(load, sensor, context):
        if sensor_value is not _UNKNOWN and _comparable(name, sensor_value) != _comparable(
                name, load_value):
            _refuse(load, f"names a sensor with {name}={sensor_value!r}, but {load.task_id} "
                    f"has {name}={load_value!r}",
                    f"give {sensor_id} and {load.task_id} the same {name}: the sensor waits "
                    "for the versions after the watermark this load moves")


def _compared_settings(load: Any, sensor: Any, context: Context
                       ) -> list[tuple[str, object, object]]:
    """(setting, the sensor's value, the value it must have), for each setting that must
    match; the sensor's templates are rendered with the load's context (the same run)."""
    def setting(name: str) -> object:
        value = _sensor_value(sensor, name)
        return load.render_template(value, context) if isinstance(value, str) else value

    store = load.watermark_store
    pairs = [("table_uri", setting("table_uri"), load.table_uri),
             ("watermark_store", setting("watermark_store"), store),
             ("watermark_key", setting("watermark_key"), load.watermark_key)]
    if store == "xcom":  # the load keeps the watermark as its own XCom
        pairs.append(("watermark_task_id", setting("watermark_task_id"), load.task_id))
    if store == "asset_state" and load.watermark_asset is not None:
        asset = setting("watermark_asset")
        if asset is not None:
            pairs.append(("watermark_asset", asset, load.watermark_asset))
    return pairs


def _sensor_value(sensor: Any, name: str) -> object:
    """A setting of the sensor; of a mapped one, what ``partial()`` or the default fixes."""
    if not hasattr(sensor, "partial_kwargs"):
        return getattr(sensor, name)
    if name in sensor.partial_kwargs:
        return sensor.partial_kwargs[name]
    expanded = getattr(getattr(sensor, "expand_input", None), "value", None)
    if not isinstance(expanded, dict) or name in expanded:
        return _UNKNOWN
    default = inspect.signature(sensor.operator_class.__init__).parameters[name].default
    return _UNKNOWN if default is inspect.Parameter.empty else default


def _comparable(name: str, value: object) -> object:
    """A table by one spelling of its location, an asset by its name, others as given."""
    if name == "table_uri" and location_problem(value) is None:
        return normalised_location(value)
    if name == "watermark_asset":
        return getattr(value, "name", value)
    return value


def _fix_missing(load: Any, dag: Any) -> str:
    """Name the DAG's Delta sensors, the closest first."""
    from airflow_provider_delta.sensors.delta_version import DeltaVersionSensor

    sensors = [task_id for task_id, task in dag.task_dict.items()
               if isinstance(getattr(task, "operator_class", type(task)), type)
               and issubclass(getattr(task, "operator_class", type(task)), DeltaVersionSensor)]
    close = difflib.get_close_matches(load.sensor_task_id, sensors, n=3, cutoff=0.0)
    known = f" (its Delta sensors: {', '.join(close)})" if close else " (it has no Delta sensor)"
    return (f"give the task id of the DeltaVersionSensor upstream{known}, or drop "
            "sensor_task_id to load from the watermark")


def _refuse(load: Any, problem: str, fix: str) -> None:
    raise InvalidParameterError(load.task_id, "sensor_task_id", load.sensor_task_id, problem,
                                fix, load.table_uri)
