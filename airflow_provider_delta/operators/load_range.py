"""The range an incremental load reads: where it starts (a :class:`LoadStart`) and its last
version, from an explicit range, the sensor's XCom or the watermark policy
(:func:`~airflow_provider_delta.watermarks.resolve_load_start`).

Pure functions: the operator reads the stores, the XCom and the log, and these decide. A
snapshot's last version is its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_delta.core.model import LoadStart
from airflow_provider_delta.errors import InvalidParameterError
from airflow_provider_delta.watermarks import Watermark, continue_after_sink


def explicit_range(start: int, end: int | None, latest: int, *, task_id: str,
                   table_uri: str) -> tuple[LoadStart, int]:
    """``start_version``..``end_version`` (default: ``latest``), refused when empty."""
    last = latest if end is None else end
    if start > last:
        bound = "the latest version" if end is None else "end_version"
        raise InvalidParameterError(task_id, "start_version", start, f"is after {bound} ({last})",
                                    "give a range with start_version <= end_version <= latest",
                                    table_uri)
    return LoadStart("changes", start), last


def sensor_range(found: Mapping[str, Any], held: int | None) -> tuple[LoadStart, int]:
    """The sensor's range; its snapshot goes on after what the sink holds from version 0
    (``held``: a retry after the snapshot's commit)."""
    start = LoadStart(found.get("mode", "changes"), int(found["start_version"]))
    return through(continue_after_sink(start, held), int(found["end_version"]))


def watermark_range(start: LoadStart, latest: int) -> tuple[LoadStart, int] | None:
    """The range from the policy's ``start`` to ``latest`` (None: nothing new)."""
    if start.mode == "snapshot" or start.version <= latest:
        return through(start, latest)
    return None


def caught_up_unrecorded(start: LoadStart, latest: int, stored: Watermark | None,
                         table_id: str | None) -> bool:
    """Nothing new, and no watermark says so (``initial="latest"``, or the sink's commits):
    it must be recorded, or every later run would start after *its* latest version."""
    return start.version == latest + 1 and stored != Watermark(latest, table_id)


def through(start: LoadStart, end_version: int) -> tuple[LoadStart, int]:
    """A load from ``start`` up to ``end_version``; a snapshot ends at its own version."""
    return start, start.version if start.mode == "snapshot" else end_version
