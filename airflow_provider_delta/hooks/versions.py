"""The one check that the sensor and the trigger share: are there new versions, and which?"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import TypedDict

from airflow_provider_delta.errors import VersionNotAvailableError

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
        latest_commit_timestamp=head_commit_timestamp(table_uri, latest, _plain(storage_options)),
    )


def head_commit_timestamp(
    table_uri: str, version: int, storage_options: dict[str, str] | None
) -> int:
    """Epoch ms of a commit, from that commit alone: its in-commit timestamp, else its file time.

    ``core.commit_timestamp`` replays the table's metadata and lists the whole log to apply
    Delta's "strictly increasing" adjustment to file times; a poke must cost what is new
    only. Where in-commit timestamps are on, Delta writes ``commitInfo`` (carrying
    ``inCommitTimestamp``) as the commit's first line, so one read settles it.
    """
    from airflow_provider_delta.core.storage import TableLocation, commit_name

    location = TableLocation(table_uri, storage_options)
    raw = location.read_log_file(commit_name(version))
    if raw is None:
        raise VersionNotAvailableError(table_uri, version, None, None,
                                       hint="The commit vanished while sensing; poke again.")
    first_action = json.loads(raw.split(b"\n", 1)[0] or b"{}")
    in_commit = (first_action.get("commitInfo") or {}).get("inCommitTimestamp")
    if in_commit is not None:
        return int(in_commit)
    return location.commit_mtime_ms(version)


def _plain(storage_options: Mapping[str, str] | None) -> dict[str, str] | None:
    return dict(storage_options) if storage_options else None
