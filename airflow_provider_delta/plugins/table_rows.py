"""The rows of the "Delta tables" page: one per (source table, consumer task, watermark store).

Built only from what the provider already keeps: each load's record in XCom
(:data:`~airflow_provider_delta.freshness.LOAD_RECORD_KEY`), the watermark stores, and one
cheap probe of each table's head (a listing from the watermark on, and one commit read when
behind). Probes run in threads with a deadline, so a slow store costs its own row an
``error``, never the page. Rows carry no storage options or connection fields: only the
connection id the task names.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor, TimeoutError as FutureTimeout
from typing import Any

from airflow_provider_delta.errors import WatermarkError
from airflow_provider_delta.freshness import LOAD_RECORD_KEY, lag_seconds
from airflow_provider_delta.watermarks import parse_watermark

log = logging.getLogger(__name__)

HISTORY_RUNS = 20  # points of the lag chart
PROBE_TIMEOUT_SECONDS = 10.0
RECORDS_SCANNED = 5000  # the newest load records read per request

# Shared, never waited for on shutdown: a probe stuck in a slow store keeps only its thread.
_probes = ThreadPoolExecutor(max_workers=8, thread_name_prefix="delta-tables-probe")


def table_rows(session: Any, dag_ids: Iterable[str], timeout: float = PROBE_TIMEOUT_SECONDS
               ) -> list[dict[str, Any]]:
    """The rows of the DAGs in ``dag_ids`` (those the user may read), most behind first."""
    consumers = _consumers(_load_records(session, set(dag_ids)))
    rows = [_row_of(records) for records in consumers.values()]
    for row in rows:
        try:
            row["watermark"] = _watermark(session, row)
        except Exception as err:
            row["error"] = _message(err)
    futures = {id(row): _probes.submit(_probe, row) for row in rows if "error" not in row}
    deadline = time.monotonic() + timeout
    for row in rows:
        if id(row) in futures:
            _settle(row, futures[id(row)], deadline, timeout)
    return sorted(rows, key=lambda r: (r["lag_versions"] is None, -(r["lag_versions"] or 0)))


def _load_records(session: Any, dag_ids: set[str]) -> list[tuple[Any, dict[str, Any]]]:
    """(XCom row, record) of the newest loads, newest first."""
    from airflow.models.xcom import XComModel
    from sqlalchemy import select

    if not dag_ids:
        return []
    query = (select(XComModel)
             .where(XComModel.key == LOAD_RECORD_KEY, XComModel.dag_id.in_(dag_ids))
             .order_by(XComModel.timestamp.desc()).limit(RECORDS_SCANNED))
    found = []
    for xcom in session.scalars(query):
        record = XComModel.deserialize_value(xcom)
        if isinstance(record, str):
            record = json.loads(record)
        if isinstance(record, dict) and record.get("table_uri"):
            found.append((xcom, record))
    return found


def _consumers(records: list[tuple[Any, dict[str, Any]]]) -> dict[tuple, list]:
    """Records grouped by (table, dag, task, map index, watermark store), newest first."""
    grouped: dict[tuple, list] = {}
    for xcom, record in records:
        key = (record["table_uri"], xcom.dag_id, xcom.task_id, xcom.map_index,
               record.get("watermark_store"), record.get("watermark_key"))
        grouped.setdefault(key, []).append((xcom, record))
    return grouped


def _row_of(records: list[tuple[Any, dict[str, Any]]]) -> dict[str, Any]:
    xcom, newest = records[0]
    loads = [(x, r) for x, r in records if r.get("end_version") is not None]
    last = loads[0][1] if loads else None
    return {
        "table_uri": newest["table_uri"],
        "dag_id": xcom.dag_id,
        "task_id": xcom.task_id,
        "map_index": xcom.map_index,
        "watermark_store": newest.get("watermark_store"),
        "watermark_key": newest.get("watermark_key"),
        "watermark": None,
        "latest_version": None,
        "lag_versions": None,
        "lag_seconds": None,
        "last_load": None if last is None else {
            "end_date": last["end_date"], "rows": last["rows"], "batches": last["batches"],
            "target": last.get("target"), "target_version": last.get("target_version"),
            "run_id": loads[0][0].run_id,
        },
        "last_run_id": xcom.run_id,
        # Versions behind when each recent run began loading, oldest first.
        "lag_history": [{"run_id": x.run_id, "end_date": r["end_date"],
                         "lag_versions": r.get("lag_versions_before", 0)}
                        for x, r in reversed(records[:HISTORY_RUNS])],
        "_probe_connection": newest.get("delta_conn_id"),  # used to probe, removed before answering
        "_recorded_watermark": last and last["end_version"],
    }


def _watermark(session: Any, row: dict[str, Any]) -> int | None:
    """The consumer's watermark, read from its store as the tasks read it."""
    kind, key, uri = row["watermark_store"], row["watermark_key"], row["table_uri"]
    if kind == "variable":
        raw = _variable(session, f"{key}:{uri}")
        if raw is None:  # the older layout: {table_uri: watermark} in the Variable `key`
            raw = (_variable(session, key) or {}).get(uri)
        where = f"Airflow Variable {key}:{uri}"
    elif kind == "xcom":
        raw, where = _xcom_watermark(session, row), f"XCom {key!r}"
    else:  # asset state: read by the triggerer's store; the last load's end is what it holds
        return row["_recorded_watermark"]
    stored = parse_watermark(raw, table_uri=uri, where=where)
    return None if stored is None else stored.version


def _variable(session: Any, name: str) -> Any:
    """A Variable from the metadata DB, where the store writes (it refuses to write a
    watermark that a secrets backend would shadow)."""
    from airflow.models.variable import Variable
    from sqlalchemy import select

    variable = session.scalars(select(Variable).where(Variable.key == name)).first()
    text = None if variable is None else variable.get_val()
    if text is None and variable is not None and variable.is_encrypted:
        raise WatermarkError(
            f"Airflow Variable {name!r} cannot be decrypted by the api-server: give it the "
            "[core] fernet_key the workers use.", table_uri=name.partition(":")[2] or None)
    return None if text in (None, "") else json.loads(text)


def _xcom_watermark(session: Any, row: dict[str, Any]) -> Any:
    from airflow.models.xcom import XComModel
    from sqlalchemy import select

    query = (select(XComModel)
             .where(XComModel.key == row["watermark_key"], XComModel.dag_id == row["dag_id"],
                    XComModel.task_id == row["task_id"], XComModel.map_index == row["map_index"])
             .order_by(XComModel.timestamp.desc()).limit(1))
    xcom = session.scalars(query).first()
    return None if xcom is None else XComModel.deserialize_value(xcom)


def _probe(row: dict[str, Any]) -> tuple[int, float]:
    """The table's latest version (listing from the watermark on) and the lag's age."""
    from airflow_provider_delta.core.probe import VersionProbe
    from airflow_provider_delta.core.versions import newest_version

    from airflow_provider_delta.hooks.delta import connection_storage_options

    probe = VersionProbe(row["table_uri"], connection_storage_options(row["_probe_connection"]))
    latest = newest_version(probe.location, row["watermark"])
    return latest, lag_seconds(probe, row["watermark"], latest)


def _settle(row: dict[str, Any], future: Any, deadline: float, timeout: float) -> None:
    try:
        latest, seconds = future.result(timeout=max(deadline - time.monotonic(), 0.0))
    except FutureTimeout:
        row["error"] = f"the table did not answer within {timeout:g} s"
        return
    except Exception as err:
        row["error"] = _message(err)
        return
    watermark = row["watermark"]
    row["latest_version"] = latest
    row["lag_versions"] = latest + 1 if watermark is None else max(latest - watermark, 0)
    row["lag_seconds"] = round(seconds, 3)


def _message(err: BaseException) -> str:
    """An error for the page: the provider's own messages name the table and the fix; others
    only their kind, as a storage library's text may quote a request (and its signature)."""
    from airflow_provider_delta.errors import DeltaProviderError

    if isinstance(err, DeltaProviderError):
        return str(err)[:500]
    log.warning("Delta tables page: reading a table failed", exc_info=err)
    return f"{type(err).__name__} while reading the table (see the api-server log)"


def public(row: dict[str, Any]) -> dict[str, Any]:
    """The row as answered: without the fields kept for probing."""
    return {k: v for k, v in row.items() if not k.startswith("_")}
