"""The one check that the sensor and the trigger share: are there new versions, and which?"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TypedDict

log = logging.getLogger(__name__)


class VersionRange(TypedDict):
    """What the sensor returns as its XCom and the trigger carries in its events."""

    table_uri: str
    start_version: int
    end_version: int
    latest_commit_timestamp: int  # epoch milliseconds of ``end_version``'s commit


def fetch_latest_version(
    table_uri: str, *, since: int | None, storage_options: Mapping[str, str] | None
) -> int:
    """The table's latest version, listing ``_delta_log`` only from ``since`` onward."""
    from airflow_provider_delta.core import latest_version

    return latest_version(table_uri, since=since, storage_options=_plain(storage_options))


def new_version_range(
    table_uri: str,
    start_version: int,
    latest: int,
    *,
    min_new_versions: int = 1,
    storage_options: Mapping[str, str] | None = None,
) -> VersionRange | None:
    """The range ``start_version..latest`` if it holds at least ``min_new_versions`` commits."""
    from airflow_provider_delta.core import commit_timestamp

    new_versions = latest - start_version + 1
    if new_versions < min_new_versions:
        log.info(
            "%s: %d new version(s) from %d (latest %d), waiting for %d",
            table_uri, max(new_versions, 0), start_version, latest, min_new_versions,
        )
        return None
    log.info("%s: new versions %d..%d", table_uri, start_version, latest)
    return VersionRange(
        table_uri=table_uri,
        start_version=start_version,
        end_version=latest,
        latest_commit_timestamp=commit_timestamp(
            table_uri, latest, storage_options=_plain(storage_options)
        ),
    )


def _plain(storage_options: Mapping[str, str] | None) -> dict[str, str] | None:
    return dict(storage_options) if storage_options else None
