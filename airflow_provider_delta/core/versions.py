"""Which versions exist (their commit times: :mod:`.commit_times`)."""

from __future__ import annotations

import logging

from airflow_provider_delta.core.protocol import check_protocol
from airflow_provider_delta.core.replay import replay
from airflow_provider_delta.core.delta_log import LogEntry, TableLocation
from airflow_provider_delta.errors import (
    InvalidParameterError, LogGapError, TableNotFoundError,
)

log = logging.getLogger(__name__)


def check_version_number(table_uri: str, parameter: str, version: object) -> None:
    """Refuse a ``version`` argument that is no table version number."""
    if not isinstance(version, int) or version < 0:
        raise InvalidParameterError(None, parameter, version, "is not a version number >= 0",
                                    "give a version of the table (0 is its first)", table_uri)


def latest_version(table_uri: str, *, since: int | None = None,
                   storage_options: dict[str, str] | None = None) -> int:
    """The newest committed version of the table.

    ``since`` is a version known to exist (e.g. the last one seen); the search starts there so
    that its cost grows with the commits made after it, not with the table's history. Without
    it the search starts at ``_last_checkpoint`` (ignored when corrupt), else at the start.

    On object stores this is one start-after listing. A local folder has no such listing, so
    with ``since`` the next commit names are probed one ``stat`` each, and the folder's
    newest entry (listed again only when the folder changed) tells a hole from the head.
    A commit missing after ``since`` raises LogGapError naming it.

    Tables this provider cannot read (catalog-managed ones above all: their newest commits
    are not in ``_delta_log``, so the answer would be stale) raise UnsupportedFeatureError;
    that costs one replay of the head's protocol (its checkpoint and the commits after it).
    """
    location = TableLocation(table_uri, storage_options)
    version = newest_version(location, since)
    check_protocol(table_uri, replay(location, version).protocol, version)
    return version


def newest_version(location: TableLocation, since: int | None = None) -> int:
    """:func:`latest_version` on an open location."""
    if since is not None and location.is_local and location.commit_exists(since):
        version = probe_local_commits(location, since)
        newest_listed = location.newest_listed_version()
        if newest_listed is None or newest_listed <= version:
            return version
        # Something lies beyond the first missing name: a hole, or commits made meanwhile.
    hint = since
    if hint is None and not location.is_local:
        checkpoint = location.last_checkpoint_hint()
        hint = int(checkpoint["version"]) if checkpoint else None
    entries = location.list_log(hint or 0)
    if not entries and hint:
        entries = location.list_log(0)  # the hint was ahead of the log: look at everything
    if not entries:
        raise TableNotFoundError(location.table_uri)
    _check_contiguous(location, entries, since)
    return max(e.version for e in entries)


def probe_local_commits(location: TableLocation, since: int) -> int:
    """The last version of the unbroken run of commit files from ``since`` (one stat each)."""
    version = since
    while location.commit_exists(version + 1):
        version += 1
    return version


def _check_contiguous(location: TableLocation, entries: list[LogEntry], since: int | None) -> None:
    """No commit may be missing after ``since`` (a gap there loses data, even behind a
    checkpoint); without it, after the newest checkpoint (or the first commit)."""
    checkpoints = [e.version for e in entries if not e.is_commit]
    commits = sorted(e.version for e in entries if e.is_commit)
    if not commits:
        return
    base = commits[0] if since is not None or not checkpoints else max(checkpoints)
    expected = set(range(base + 1, commits[-1] + 1))
    missing = expected.difference(commits)
    if missing:
        raise LogGapError(location.table_uri, missing)
