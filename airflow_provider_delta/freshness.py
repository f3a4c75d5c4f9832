"""How far a consumer is behind its source table: metrics through Airflow's ``Stats``, and the
record of each load that the "Delta tables" page reads back from XCom.

Metrics go wherever the deployment sends Airflow's own (StatsD, OpenTelemetry), tagged
``table``, ``dag_id`` and ``task_id`` as Airflow tags its metrics. Emitting never fails a task:
a metric is an observation, the load is the product.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_provider_delta.core.probe import VersionProbe
    from airflow_provider_delta.job.spec import JobResult

log = logging.getLogger(__name__)

LAG_VERSIONS = "delta_provider.lag.versions"
LAG_SECONDS = "delta_provider.lag.seconds"
LOAD_ROWS = "delta_provider.load.rows"
LOAD_FILES = "delta_provider.load.files"
LOAD_BYTES = "delta_provider.load.bytes"
LOAD_BATCHES = "delta_provider.load.batches"
LOAD_DURATION = "delta_provider.load.duration"

# The XCom a load leaves for the page: where its watermark lives and what it loaded.
LOAD_RECORD_KEY = "delta_provider_load"


def table_tag(table_uri: str) -> str:
    """The table as a metric tag: Airflow's stat names allow only ``[A-Za-z0-9_.-/]``."""
    return re.sub(r"[^A-Za-z0-9_./-]", "_", table_uri.replace("://", "/"))


def _tags(table_uri: str, dag_id: str | None, task_id: str | None) -> dict[str, str]:
    tags = {"table": table_tag(table_uri)}
    if dag_id:
        tags.update(dag_id=dag_id, task_id=task_id or "")
    return tags


_STATS: Any = None


def _stats() -> Any:
    """Airflow's ``Stats``: where the compat provider finds it, else where Airflow 3 or 2 has it.
    Looked up once: a triggerer firing thousands of events a second pays no import each."""
    global _STATS
    if _STATS is None:
        try:
            from airflow.providers.common.compat.sdk import Stats
        except ImportError:  # a compat provider without ``Stats`` (or none, on Airflow 2)
            try:
                from airflow.sdk.observability.stats import Stats
            except ImportError:
                from airflow.stats import Stats
        _STATS = Stats
    return _STATS


def metrics_on() -> bool:
    """False when ``Stats`` sends nowhere (no metrics backend configured): the lag of an event
    is then not worth computing. True when the backend cannot be told (a gauge is then sent)."""
    stats = _stats()
    # Airflow 3.2+ keeps the backend in the Stats module; Airflow 2 and 3.0-3.1 on the class,
    # once it was first used.
    get_backend = getattr(sys.modules.get(stats.__module__), "_get_backend", None)
    try:
        backend = get_backend() if get_backend is not None else getattr(stats, "instance", None)
    except Exception:  # an observation must never fail the wait
        return True
    return type(backend).__name__ != "NoStatsLogger"


def lag_seconds(probe: VersionProbe, watermark: int | None, latest: int,
                latest_ms: int | None = None) -> float:
    """Age of the oldest commit not loaded yet (the one after ``watermark``); 0 when caught up.

    ``latest_ms``, the commit time of ``latest`` when known, spares reading that commit.
    """
    if watermark is not None and watermark >= latest:
        return 0.0
    oldest_pending = 0 if watermark is None else watermark + 1
    if oldest_pending != latest or latest_ms is None:
        latest_ms = probe.commit_timestamp(oldest_pending)
    return max(time.time() - latest_ms / 1000, 0.0)


def emit_lag(probe: VersionProbe, watermark: int | None, latest: int, ti: Any = None,
             latest_ms: int | None = None) -> None:
    """``lag.versions`` (latest - watermark) and ``lag.seconds`` of one observation by ``ti``;
    nothing without a metrics backend."""
    try:
        if not metrics_on():
            return
        tags = _tags(probe.table_uri, getattr(ti, "dag_id", None), getattr(ti, "task_id", None))
        versions = latest + 1 if watermark is None else max(latest - watermark, 0)
        _stats().gauge(LAG_VERSIONS, versions, tags=tags)
        _stats().gauge(LAG_SECONDS, lag_seconds(probe, watermark, latest, latest_ms), tags=tags)
    except Exception:  # an observation must never fail the wait
        log.debug("%s: lag metrics not emitted", probe.table_uri, exc_info=True)


def emit_range_lag(probe: VersionProbe, found: dict[str, Any], mode: str, ti: Any = None) -> None:
    """The lag of a range a trigger announces: everything from its start is pending (all of
    the table for a snapshot)."""
    watermark = None if mode == "snapshot" else found["start_version"] - 1
    emit_lag(probe, watermark, found["end_version"], ti, found["latest_commit_timestamp"])


def range_lag_reads(found: dict[str, Any], mode: str) -> bool:
    """Whether :func:`emit_range_lag` reads a commit: unless the range is the one version
    whose time it carries (the usual event), the oldest pending commit's time is read."""
    return mode == "snapshot" or found["start_version"] != found["end_version"]


def record_load(operator: Any, context: Any, result: JobResult) -> None:
    """After a load: its metrics, and its record in XCom for the "Delta tables" page."""
    ti = context["ti"]
    record = load_record(operator, result, started=getattr(ti, "start_date", None))
    try:
        tags = _tags(operator.table_uri, ti.dag_id, ti.task_id)
        stats = _stats()
        for name, field in ((LOAD_ROWS, "rows"), (LOAD_FILES, "files"), (LOAD_BYTES, "bytes"),
                            (LOAD_BATCHES, "batches")):
            stats.gauge(name, record[field], tags=tags)
        if record["duration"] is not None:
            stats.timing(LOAD_DURATION, record["duration"] * 1000, tags=tags)
    except Exception:
        log.debug("%s: load metrics not emitted", operator.table_uri, exc_info=True)
    ti.xcom_push(key=LOAD_RECORD_KEY, value=record)


def load_record(operator: Any, result: JobResult, started: datetime | None) -> dict[str, Any]:
    """What the page needs of one load; never storage options or connection fields."""
    loaded = result.to_dict()
    now = datetime.now(timezone.utc)
    if result.end_version is None:
        pending = 0
    else:  # versions behind when the load began: all of the table for a snapshot
        first = 0 if result.mode == "snapshot" else result.start_version
        pending = result.end_version - first + 1
    return {
        "table_uri": operator.table_uri,
        "watermark_store": getattr(operator, "watermark_store", None),
        "watermark_key": getattr(operator, "watermark_key", None),
        "delta_conn_id": operator.delta_conn_id,
        "target": operator.target if operator.sink else None,
        "mode": result.mode,
        "start_version": result.start_version,
        "end_version": result.end_version,
        "lag_versions_before": pending,
        "rows": loaded["rows"] or 0,
        "files": loaded["files"],
        "bytes": loaded["bytes"],
        "batches": len(result.batches),
        "target_version": result.sink_version,
        "end_date": now.isoformat(),
        "duration": (now - started).total_seconds() if started else None,
    }
