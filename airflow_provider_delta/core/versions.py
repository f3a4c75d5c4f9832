"""Which versions exist, and when each was committed."""

from __future__ import annotations

import bisect
import datetime as dt
import logging

from airflow_provider_delta.core.actions import parse_datetime
from airflow_provider_delta.core.protocol import check_protocol
from airflow_provider_delta.core.replay import earliest_recreatable, read_commit, replay
from airflow_provider_delta.core.delta_log import LogEntry, TableLocation
from airflow_provider_delta.errors import (
    InvalidLogError, InvalidParameterError, LogGapError, TableNotFoundError,
    VersionNotAvailableError,
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


def commit_timestamp(table_uri: str, version: int, *,
                     storage_options: dict[str, str] | None = None) -> int:
    """Epoch milliseconds of commit ``version`` as Delta defines it.

    The in-commit timestamp when the table enables them at that version; else the commit
    file's modification time, raised where needed so that times strictly increase with
    versions (Delta's rule for file times, which object stores do not guarantee).
    """
    location = TableLocation(table_uri, storage_options)
    state = replay(location, version)
    if _ict_enabled_at(state.metadata.get("configuration") or {}, version):
        return _in_commit_timestamp(location, version)
    entries = commit_entries(location)
    versions = [e.version for e in entries]
    index = bisect.bisect_left(versions, version)
    if index == len(versions) or versions[index] != version:
        raise VersionNotAvailableError(table_uri, version, versions[0] if versions else None,
                                       versions[-1] if versions else None)
    return _monotonic_times(entries)[index]


def version_at(table_uri: str, timestamp: dt.datetime | str, *,
               storage_options: dict[str, str] | None = None) -> int:
    """The newest version committed at or before ``timestamp`` (Delta's time-travel rule).

    ``timestamp`` is a ``datetime`` (naive means UTC) or an ISO-8601 string. A timestamp
    before the earliest recreatable version or after the latest commit raises
    VersionNotAvailableError naming the window.
    """
    location = TableLocation(table_uri, storage_options)
    wanted_us = _epoch_micros(table_uri, timestamp)
    listing = location.list_log(with_mtime=True)
    entries = [e for e in listing if e.is_commit]
    if not entries:
        raise TableNotFoundError(table_uri)
    latest = entries[-1].version
    earliest = earliest_recreatable(listing) or 0
    config = replay(location, latest).metadata.get("configuration") or {}
    times = CommitTimes(location, entries, config)
    found = times.last_at_or_before(wanted_us, earliest)
    if found is None or wanted_us > times.micros(latest):
        raise VersionNotAvailableError(
            table_uri, f"timestamp {_show(wanted_us)}", earliest, latest,
            hint=f"Use a timestamp between {_show(times.micros(earliest))} and "
                 f"{_show(times.micros(latest))} (the commits' times).",
        )
    return found


class CommitTimes:
    """Commit times by version: file times below the in-commit-timestamp enablement, ICTs after."""

    def __init__(self, location: TableLocation, entries: list[LogEntry], config: dict[str, str]):
        self.location = location
        self.versions = [e.version for e in entries]
        self.file_times = _monotonic_times(entries)
        self.ict_from = _ict_enablement_version(config)
        self._ict_cache: dict[int, int] = {}

    def micros(self, version: int) -> int:
        if self.ict_from is not None and version >= self.ict_from:
            if version not in self._ict_cache:
                self._ict_cache[version] = _in_commit_timestamp(self.location, version)
            return self._ict_cache[version] * 1000
        return self.file_times[bisect.bisect_left(self.versions, version)] * 1000

    def last_at_or_before(self, wanted_us: int, earliest: int) -> int | None:
        """Binary search over the listed versions >= ``earliest`` (times increase with versions).

        With in-commit timestamps enabled at version e, a time at or after e's is searched
        among versions >= e only, an earlier one among versions < e only (Delta's rule): the
        file times before e may be later than e's ICT, e.g. after the table was copied.
        """
        candidates = [v for v in self.versions if v >= earliest]
        if self.ict_from is not None and self.ict_from > candidates[0]:
            in_ict_range = wanted_us >= self.micros(self.ict_from)
            candidates = [v for v in candidates if (v >= self.ict_from) == in_ict_range]
        low, high = 0, len(candidates)
        while low < high:
            middle = (low + high) // 2
            if self.micros(candidates[middle]) <= wanted_us:
                low = middle + 1
            else:
                high = middle
        return candidates[low - 1] if low else None


def commit_entries(location: TableLocation) -> list[LogEntry]:
    """The commits in the log, listed with their file times."""
    return [e for e in location.list_log(with_mtime=True) if e.is_commit]


def _monotonic_times(entries: list[LogEntry]) -> list[int]:
    """File times in ms, each raised to one past its predecessor when not later than it."""
    times: list[int] = []
    for entry in entries:
        value = entry.mtime_ms
        if times and value <= times[-1]:
            value = times[-1] + 1
        times.append(value)
    return times


def _ict_enablement_version(config: dict[str, str]) -> int | None:
    if config.get("delta.enableInCommitTimestamps", "false").lower() != "true":
        return None
    return int(config.get("delta.inCommitTimestampEnablementVersion", 0))


def _ict_enabled_at(config: dict[str, str], version: int) -> bool:
    enabled_from = _ict_enablement_version(config)
    return enabled_from is not None and version >= enabled_from


def in_commit_timestamp(actions: list[dict]) -> int | None:
    """A commit's in-commit timestamp (epoch ms) from its actions, None if it carries none."""
    for action in actions:
        info = action.get("commitInfo")
        if info and info.get("inCommitTimestamp") is not None:
            return int(info["inCommitTimestamp"])
    return None


def _in_commit_timestamp(location: TableLocation, version: int) -> int:
    found = in_commit_timestamp(read_commit(location, version) or [])
    if found is None:
        raise InvalidLogError(location.table_uri, version,
                              "in-commit timestamps are enabled but the commit has none")
    return found


def _epoch_micros(table_uri: str, timestamp: dt.datetime | str) -> int:
    if isinstance(timestamp, str):
        try:
            timestamp = parse_datetime(timestamp)
        except ValueError as exc:
            raise InvalidParameterError(
                None, "timestamp", timestamp, "is not ISO-8601",
                "give e.g. '2024-05-01T12:00:00Z' or '2024-05-01 12:00:00'", table_uri) from exc
    if not isinstance(timestamp, dt.datetime):
        raise TypeError(f"timestamp must be a datetime or an ISO-8601 string, not {timestamp!r}")
    if timestamp.tzinfo is None:
        timestamp = timestamp.replace(tzinfo=dt.timezone.utc)
    delta = timestamp - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    return delta // dt.timedelta(microseconds=1)


def _show(micros: int) -> str:
    moment = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=micros)
    return moment.isoformat()
