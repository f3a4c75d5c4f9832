"""The time range of :class:`~.delta_load.DeltaIncrementalOperator`: its parameters, the
interval's versions by Delta's commit times (after the grace wait), and the asset partition.

``start_timestamp``/``end_timestamp`` (or ``range_from="data_interval"``: the run's data
interval) choose the versions committed in ``[start, end)`` by Delta's commit times (in-commit
timestamps where the table has them, else commit file times made increasing; see
:mod:`~airflow_provider_delta.core.commit_times`). Not with ``start_version``/``end_version``,
``sensor_task_id``, ``move_watermark=True`` or a watermark store: the watermark is neither read
nor moved. Consecutive intervals split the versions exactly; a re-run finds its versions in the
sink and adds nothing; an interval without a commit loads nothing. An interval that is not over
(its end in the future, no commit at or after it) is refused with
:class:`~airflow_provider_delta.errors.IntervalNotOverError`; one that just ended is waited out
for ``interval_grace`` (a commit's in-commit timestamp is taken before its file is written).

Functions over the operator (``op``): it keeps the parameters as attributes, these read them.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from airflow_provider_delta.compat import ASSET_PARTITIONS, require_airflow
from airflow_provider_delta.core.commit_times import (
    CommitClock, epoch_ms, ms_to_datetime, settles_in,
)
from airflow_provider_delta.core.delta_log import TableLocation
from airflow_provider_delta.core.model import LoadStart
from airflow_provider_delta.errors import (
    IntervalNotOverError, InvalidParameterError, MergeOrderError,
)
from airflow_provider_delta.job.sinks import make_sink
from airflow_provider_delta.job.spec import JobResult
from airflow_provider_delta.operators import parameters

if TYPE_CHECKING:
    from airflow_provider_delta.compat import Context
    from airflow_provider_delta.job.spec import LoadResult

# The format of Airflow's time partition keys (its temporal partition mappers read it).
PARTITION_KEY_FORMAT = "%Y-%m-%dT%H:%M:%S"
DEFAULT_GRACE = timedelta(minutes=1)


def setup(op: Any, start: datetime | str | None,
          end: datetime | str | None, range_from: str | None, grace: timedelta | None,
          asset_partition: str | None) -> None:
    """Set the time-range parameters on ``op``, checked where they are not templated."""
    where = {"task_id": op.task_id, "table_uri": op.table_uri}
    op.start_timestamp, op.end_timestamp = parameters.range_source(
        range_from, start, end, **where)
    op.range_from = range_from
    has_time_range = op.start_timestamp is not None or op.end_timestamp is not None
    if grace is not None and not has_time_range:
        raise InvalidParameterError(
            op.task_id, "interval_grace", grace, "is given without a time range",
            "give start_timestamp/end_timestamp or range_from, or drop interval_grace",
            op.table_uri)
    op.interval_grace = parameters.interval_grace(
        DEFAULT_GRACE if grace is None else grace, **where)
    if has_time_range:
        parameters.alone_with_time_range({
            "start_version": op.start_version, "end_version": op.end_version,
            "sensor_task_id": op.sensor_task_id, "move_watermark": op.move_watermark,
            "watermark_store": None if op.watermark_store == "xcom" else
            op.watermark_store, "watermark_asset": op.watermark_asset,
            "watermark_key": None if op.watermark_key == "delta_watermark" else
            op.watermark_key, "initial": None if op.initial == "snapshot" else op.initial,
            "reset_if_ahead": op.reset_if_ahead}, **where)
        if op.sink is None:
            raise InvalidParameterError(
                op.task_id, "sink", None, "is given with a time range: nothing records the "
                "versions loaded, so a re-run would load them again",
                "give a sink (e.g. sink='delta'), or load by version range", op.table_uri)
    if not (parameters.is_templated(op.start_timestamp)
            or parameters.is_templated(op.end_timestamp)):
        interval(op)
    op.asset_partition = parameters.asset_partition(
        asset_partition, target=op.target, has_time_range=has_time_range, **where)
    if asset_partition is not None:
        require_airflow(ASSET_PARTITIONS, "leave asset_partition unset", table_uri=op.table_uri)


def interval(op: Any) -> tuple[datetime, datetime] | None:
    """``start_timestamp``/``end_timestamp`` as aware datetimes, checked (None: not given)."""
    return parameters.time_range(op.start_timestamp, op.end_timestamp, task_id=op.task_id,
                                 table_uri=op.table_uri, range_from=op.range_from)


def load_interval(op: Any, context: Context, start: datetime,
                  end: datetime) -> LoadResult:
    """Load the versions committed in [start, end): a re-run finds them in the sink and
    adds nothing; an interval without a commit loads nothing."""
    found = interval_versions(op, start, end)
    if found is None:
        return op.finish(context, JobResult(op.table_uri, "changes", None, None))
    if op.sink == "delta-merge":
        refuse_merge_out_of_order(op, *found, f"[{start}, {end})")
    result = op.run_request(context, LoadStart("changes", found[0]), found[1])
    return op.finish(context, result)


def refuse_merge_out_of_order(op: Any, first: int, last: int,
                              interval_text: str) -> None:
    """A merge applies changes in version order: an interval before the versions the
    target holds (and not held itself: a re-run adds nothing) would undo newer changes."""
    sink = make_sink(op.sink_spec())
    held = sink.committed_version()
    if held is not None and held > last and sink.first_unwritten(first, last) <= last:
        raise MergeOrderError(op.table_uri, op.target, first, last, held, interval_text)


def interval_versions(op: Any, start: datetime, end: datetime
                      ) -> tuple[int, int] | None:
    """The versions committed in [start, end), once no commit can still come in it:
    waits out the grace after an end just passed; refuses an end still to come."""
    location = TableLocation(op.table_uri, op.source_storage_options)
    clock = CommitClock(location)
    end_ms, grace_ms = epoch_ms(end), op.interval_grace // timedelta(milliseconds=1)
    now = datetime.now(timezone.utc)
    wait_ms = settles_in(clock, end_ms, epoch_ms(now), grace_ms)
    if wait_ms > grace_ms:
        raise IntervalNotOverError(
            op.table_uri, start.isoformat(), end.isoformat(), clock.newest,
            ms_to_datetime(clock.millis(clock.newest)).isoformat(), now.isoformat())
    if wait_ms:
        op.log.info("%s: waiting %.1f s (interval_grace) for commits timed before %s "
                    "that may not be visible yet", op.table_uri, wait_ms / 1000, end)
        time.sleep(wait_ms / 1000)
        clock = CommitClock(location)
    found = clock.versions_between(epoch_ms(start), end_ms)
    _log_found(op, clock, start, end, found)
    return found


def _log_found(op: Any, clock: CommitClock, start: datetime,
               end: datetime, found: tuple[int, int] | None) -> None:
    newest = f"version {clock.newest} at {ms_to_datetime(clock.millis(clock.newest))}"
    if found is None:
        op.log.info("%s: no commit in [%s, %s) (the newest is %s): nothing to load",
                    op.table_uri, start, end, newest)
    else:
        op.log.info("%s: [%s, %s) holds versions %d..%d (the newest is %s)",
                    op.table_uri, start, end, found[0], found[1], newest)


def partition_key(op: Any, result: JobResult) -> str | None:
    """The partition key of the target's asset event: the interval's start, or the
    versions loaded (None: no partition, or no version)."""
    if op.asset_partition == "interval":
        return interval(op)[0].astimezone(timezone.utc).strftime(PARTITION_KEY_FORMAT)
    if op.asset_partition == "versions" and result.start_version is not None:
        return f"v{result.start_version}-v{result.end_version}"
    return None

