"""The version range of :class:`~.delta_load.DeltaIncrementalOperator` when no time range is
given: ``start_version``/``end_version``, the sensor's XCom, or the watermark store. Functions
over the operator (``op``): they read its parameters, store, probe and sink; the decisions are
:mod:`.load_range`'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_provider_delta import core
from airflow_provider_delta.job.sinks import make_sink
from airflow_provider_delta.operators import load_range, parameters
from airflow_provider_delta.watermarks import resolve_load_start

if TYPE_CHECKING:
    from airflow_provider_delta.compat import Context
    from airflow_provider_delta.core.model import LoadStart


def resolve(op: Any, context: Context) -> tuple[LoadStart, int] | None:
    """Where the load starts and its last version (None: nothing new), from the explicit
    versions, the sensor or the watermark."""
    start, end = explicit(op)
    if start is not None:
        latest = None if end is not None else core.latest_version(
            op.table_uri, storage_options=op.source_storage_options)
        return load_range.explicit_range(start, end, latest, task_id=op.task_id,
                                          table_uri=op.table_uri)
    found = _sensor_xcom(op, context)
    if found:
        return load_range.sensor_range(found, sink_held_through(op, 0))
    return from_watermark(op, context)


def explicit(op: Any) -> tuple[int | None, int | None]:
    """``start_version``/``end_version`` as numbers, checked (None: not given)."""
    where = {"task_id": op.task_id, "table_uri": op.table_uri}
    start = parameters.version_number(op.start_version, "start_version", **where)
    end = parameters.version_number(op.end_version, "end_version", **where)
    parameters.ordered_range(start, end, **where)
    return start, end


def _sensor_xcom(op: Any, context: Context) -> dict[str, Any] | None:
    """The range the sensor found in this run (of the same map index, for mapped tasks)."""
    if not op.sensor_task_id:
        return None
    ti = context["ti"]
    return ti.xcom_pull(task_ids=op.sensor_task_id, map_indexes=ti.map_index)


def from_watermark(op: Any, context: Context) -> tuple[LoadStart, int] | None:
    """The range after the stored watermark (``initial`` without one); a caught-up source
    whose watermark was not recorded yet gets it recorded."""
    stored = op.store.read_watermark(context)
    latest = op.probe.latest(since=None if stored is None else stored.version)
    start = resolve_load_start(
        stored, table_id=op.probe.table_id, latest=latest, initial=op.initial,
        table_uri=op.table_uri, reset_if_ahead=op.reset_if_ahead,
        sink_held_through=lambda first: sink_held_through(op, first),
    )
    found = load_range.watermark_range(start, latest)
    if found is None and op.moves_watermark and load_range.caught_up_unrecorded(
            start, latest, stored, op.probe.table_id):
        op.advance_watermark(context, latest)
    return found


def sink_held_through(op: Any, first: int | None) -> int | None:
    """The last source version the sink holds for this task without a hole from ``first``."""
    return make_sink(op.sink_spec()).held_through(first)
