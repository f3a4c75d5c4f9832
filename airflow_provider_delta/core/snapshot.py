"""Planning a full read of one version (time travel)."""

from __future__ import annotations

import datetime as dt
import logging

import pyarrow as pa

from airflow_provider_delta.core.actions import table_metadata
from airflow_provider_delta.core.arrow import full
from airflow_provider_delta.core.file_table import file_table
from airflow_provider_delta.core.model import Plan
from airflow_provider_delta.core.protocol import check_protocol
from airflow_provider_delta.core.replay import replay
from airflow_provider_delta.core.delta_log import TableLocation
from airflow_provider_delta.core.commit_times import version_at
from airflow_provider_delta.core.versions import check_version_number, newest_version
from airflow_provider_delta.errors import InvalidParameterError

log = logging.getLogger(__name__)


def plan_snapshot(table_uri: str, *, version: int | None = None,
                  timestamp: dt.datetime | str | None = None,
                  storage_options: dict[str, str] | None = None) -> Plan:
    """The live files of the table at ``version`` (or at ``timestamp``, or the latest).

    Replays the newest checkpoint at or below the version (classic, multi-part, or v2 with
    sidecars) and the commits after it. Files carry the snapshot's version and metadata and
    their deletion vectors; ``start_version == end_version`` is the snapshot's version.
    """
    if version is not None and timestamp is not None:
        raise InvalidParameterError(None, "timestamp", timestamp,
                                    f"is given with version={version}",
                                    "give version or timestamp, not both", table_uri)
    if version is not None:
        check_version_number(table_uri, "version", version)
    location = TableLocation(table_uri, storage_options)
    if timestamp is not None:
        version = version_at(table_uri, timestamp, storage_options=storage_options)
    elif version is None:
        version = newest_version(location)
    state = replay(location, version, with_files=True)
    check_protocol(table_uri, state.protocol, version)
    metadata = table_metadata(state.metadata, state.protocol)
    # chunk by chunk: a big snapshot's files are held in one form at a time, raw or planned
    files = pa.concat_tables([
        file_table(_at_version(live, version), location, {version: metadata}, metadata)
        for live in state.live_files()])
    log.info("%s: snapshot at version %d has %d files", table_uri, version, len(files))
    return Plan(table_uri=table_uri, start_version=version, end_version=version,
                file_table=files, metadata=metadata, metadata_changes={version: metadata})


def _at_version(raw: pa.Table, version: int) -> pa.Table:
    """Raw actions with the snapshot's version as every file's."""
    return raw.set_column(raw.schema.get_field_index("version"), "version",
                          full(len(raw), version))
