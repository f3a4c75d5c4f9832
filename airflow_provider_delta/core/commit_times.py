"""When each commit happened, by Delta's rules, and which versions a time interval holds.

A commit's time is its in-commit timestamp (ICT) from the version that enabled them
(``delta.inCommitTimestampEnablementVersion``; every version when a table was created with
them). Before that it is the commit file's modification time, raised where needed to one
millisecond past the previous commit's time, so times strictly increase with versions
(Delta's history does the same over the commits it lists). Time travel follows Delta's rule
(:meth:`CommitClock.last_at_or_before`); intervals cap the file times below the first ICT
(:attr:`CommitClock.file_times`), so there they may repeat but never decrease.

Cost: file times come from one listing of the commits before the ICT enablement (names
and modification times; no commit is read), always from the oldest commit file present, so a
version's time never depends on the question asked and consecutive intervals split the
versions exactly. ICTs increase by the protocol, so a time among them is found by binary
search, reading about log2(n) commit files whole (the ICT is parsed from the first line,
where ``commitInfo`` must be).
"""

from __future__ import annotations

import bisect
import datetime as dt
from collections.abc import Mapping
from functools import cached_property

from airflow_provider_delta.core.actions import parse_datetime
from airflow_provider_delta.core.delta_log import LogEntry, TableLocation, commit_name
from airflow_provider_delta.core.protocol import bool_property
from airflow_provider_delta.core.replay import commit_actions, earliest_recreatable, replay
from airflow_provider_delta.core.versions import newest_version
from airflow_provider_delta.errors import (
    InvalidLogError, InvalidParameterError, TableNotFoundError, VersionNotAvailableError,
)

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


Table = TableLocation | str


def commit_timestamp(table: Table, version: int, *,
                     storage_options: dict[str, str] | None = None) -> int:
    """Epoch milliseconds of commit ``version`` by Delta's rules."""
    return CommitClock(_location(table, storage_options)).millis(version)


def versions_between(table: Table, start_ms: int, end_ms: int, *,
                     storage_options: dict[str, str] | None = None) -> tuple[int, int] | None:
    """``(first, last)``: every version whose commit time t has start_ms <= t < end_ms, in
    epoch milliseconds; None when no commit lies in the interval."""
    return CommitClock(_location(table, storage_options)).versions_between(start_ms, end_ms)


def newest_commit_time(table: Table, *, storage_options: dict[str, str] | None = None
                       ) -> tuple[int, int]:
    """``(version, epoch ms)`` of the table's newest commit."""
    clock = CommitClock(_location(table, storage_options))
    return clock.newest, clock.millis(clock.newest)


def settles_in(clock: CommitClock, end_ms: int, now_ms: int, grace_ms: int) -> int:
    """Milliseconds until no commit can still arrive before ``end_ms``; 0 once one at or after
    it exists (versions and times increase together) or the end lies ``grace_ms`` in the past.

    The grace covers a commit timed just before the end whose file shows up after it (an
    in-commit timestamp is taken before the commit is written)."""
    if clock.millis(clock.newest) >= end_ms:
        return 0
    return max(0, end_ms + grace_ms - now_ms)


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
    clock = CommitClock(location, listing=listing)
    found = clock.last_at_or_before(wanted_us // 1000)
    earliest = earliest_recreatable(listing) or 0
    if found is None or found < earliest or wanted_us > clock.millis(clock.newest) * 1000:
        raise VersionNotAvailableError(
            table_uri, f"timestamp {_show(wanted_us)}", earliest, clock.newest,
            hint=f"Use a timestamp between {_show(clock.millis(earliest) * 1000)} and "
                 f"{_show(clock.millis(clock.newest) * 1000)} (the commits' times).",
        )
    return found


def epoch_ms(moment: dt.datetime) -> int:
    """An aware datetime as epoch milliseconds, rounded down (naive ones are refused: their
    zone is a guess)."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{moment!r} has no time zone")
    return (moment - _EPOCH) // dt.timedelta(milliseconds=1)


def ms_to_datetime(millis: int) -> dt.datetime:
    return _us_to_datetime(millis * 1000)


class CommitClock:
    """Commit times of one table, as its metadata at ``newest`` defines them.

    Times are read when first asked and kept: the file times in one listing, ICTs one commit
    at a time. ``config`` (the table's configuration at ``newest``) spares a replay;
    ``listing`` (the whole log, with file times) spares the probe and the listing.
    """

    def __init__(self, location: TableLocation, newest: int | None = None,
                 config: dict[str, str] | None = None, listing: list[LogEntry] | None = None):
        self.location = location
        self._listing = listing
        if newest is None and listing is not None:
            newest = max((e.version for e in listing if e.is_commit), default=None)
            if newest is None:
                raise TableNotFoundError(location.table_uri)
        self.newest = _newest(location) if newest is None else newest
        if config is None:
            config = replay(location, self.newest).metadata.get("configuration") or {}
        self.ict_from = ict_enablement_version(config)
        if self.ict_from is not None and self.ict_from > self.newest:
            self.ict_from = None
        self._ict: dict[int, int] = {}
        self._file_times: dict[int, int] | None = None
        self._listed_times: dict[int, int] | None = None

    # -- single versions ---------------------------------------------------------------

    def millis(self, version: int) -> int:
        """Epoch ms of ``version``; VersionNotAvailableError when its commit is not in the log."""
        if self.first_ict is not None and version >= self.first_ict:
            if version > self.newest:
                raise self._not_available(version)
            return self._in_commit(version)
        if version not in self.file_times:
            raise self._not_available(version)
        return self.file_times[version]

    @cached_property
    def first_ict(self) -> int | None:
        """The first version timed by its ICT whose commit is in the log; None without ICTs.

        Log cleanup deletes the oldest commits first, so past a deleted enablement commit
        the oldest one left is found by binary search (a stat or HEAD a step).
        """
        if self.ict_from is None or self.location.commit_exists(self.ict_from):
            return self.ict_from
        return bisect.bisect_left(range(self.ict_from, self.newest), True,
                                  key=self.location.commit_exists) + self.ict_from

    @cached_property
    def oldest(self) -> int:
        """The oldest version whose commit is still in the log."""
        if self.first_ict is not None and (self.first_ict == 0 or self.first_ict > self.ict_from):
            return self.first_ict  # no commit before the ICTs is left
        return min(self.file_times, default=self.first_ict or 0)

    @property
    def listed_times(self) -> dict[int, int]:
        """Version -> file time made strictly increasing from the oldest commit present, for
        the commits before ICTs began (Delta's time-travel times for them)."""
        if self._listed_times is None:
            last = self.newest if self.ict_from is None else self.ict_from - 1
            if self._listing is not None:
                entries = [e for e in self._listing if e.is_commit and e.version <= last]
            else:
                entries = self.location.list_log(
                    with_mtime=True, until_version=last, commits_only=True) if last >= 0 else []
            times = monotonic_times([e.mtime_ms for e in entries])
            self._listed_times = dict(zip((e.version for e in entries), times))
        return self._listed_times

    @property
    def file_times(self) -> dict[int, int]:
        """:attr:`listed_times` capped below the first ICT, the times intervals use.

        Delta looks for times at or after the first ICT among ICT versions only, so a version
        before it whose file time is later (a copied table) is never a time-travel answer;
        capped, it still falls in exactly one interval: the one holding the ICT's time less
        one millisecond, which Delta's change feed starts at it (capped times can repeat).
        """
        if self._file_times is None:
            times = self.listed_times
            if self.first_ict is not None and times:
                cap = self._in_commit(self.first_ict) - 1
                times = {version: min(t, cap) for version, t in times.items()}
            self._file_times = times
        return self._file_times

    # -- intervals ---------------------------------------------------------------------

    def first_at_or_after(self, millis: int, low: int | None = None) -> int | None:
        """The first version committed at or after ``millis`` (and at or above ``low``),
        None if all are earlier.

        A time after the first ICT is looked for among ICT commits only, so the file times
        before them are not listed.
        """
        ict = self.first_ict
        if ict is not None and (low is not None and low > ict or self.millis(ict) < millis):
            start, stop = max(ict + 1, low or 0), self.newest + 1
        else:
            start = self.oldest if low is None else max(low, self.oldest)
            stop = self.newest + 1 if ict is None else ict
            if ict is not None and start > stop:
                start = stop
        found = bisect.bisect_left(range(start, stop), millis, key=self.millis) + start
        if ict is not None and stop == ict:
            return found  # ict itself when no earlier version is at or after millis
        return found if found <= self.newest else None

    def last_at_or_before(self, millis: int) -> int | None:
        """The last version committed at or before ``millis``, None if all are later.

        Delta's time-travel rule: a time at or after the first ICT is looked for among ICT
        commits, an earlier one among the commits before them by their uncapped file times
        (so on a copied table, whose file times are all later, there is none).
        """
        ict = self.first_ict
        if ict is not None and millis >= self.millis(ict):
            return bisect.bisect_right(range(ict, self.newest + 1), millis,
                                       key=self.millis) + ict - 1
        before = [v for v, t in self.listed_times.items() if t <= millis]
        return before[-1] if before else None

    def versions_between(self, start_ms: int, end_ms: int) -> tuple[int, int] | None:
        """``(first, last)`` of the versions committed in [start_ms, end_ms), None if none.

        VersionNotAvailableError when log cleanup removed commits that may lie in it (the
        interval starts before the oldest commit left, which is not version 0).
        """
        ict = self.first_ict
        after_first_ict = ict is not None and start_ms >= self.millis(ict)  # lists nothing
        if not after_first_ict and self.oldest > 0 and start_ms < self.millis(self.oldest):
            raise VersionNotAvailableError(
                self.location.table_uri,
                f"the interval from {ms_to_datetime(start_ms).isoformat()}", self.oldest,
                self.newest,
                hint=f"Commits before version {self.oldest} (committed "
                     f"{ms_to_datetime(self.millis(self.oldest)).isoformat()}) were removed by "
                     "log cleanup; load intervals starting at or after that time, or load by "
                     "version.")
        first = self.first_at_or_after(start_ms)
        if first is None or end_ms <= start_ms:
            return None
        stop = self.first_at_or_after(end_ms, low=first)
        stop = self.newest + 1 if stop is None else stop
        return (first, stop - 1) if stop > first else None

    # -- reading -----------------------------------------------------------------------

    def _in_commit(self, version: int) -> int:
        if version not in self._ict:
            raw = self.location.read_log_file(commit_name(version))
            if raw is None:
                raise self._not_available(version)
            found = in_commit_timestamp_of(self.location, version, raw)
            if found is None:
                raise InvalidLogError(self.location.table_uri, version,
                                      "in-commit timestamps are enabled but the commit has none")
            self._ict[version] = found
        return self._ict[version]

    def _not_available(self, version: int) -> VersionNotAvailableError:
        return VersionNotAvailableError(self.location.table_uri, version, self.oldest,
                                        self.newest)


def in_commit_timestamp_of(location: TableLocation, version: int, raw: bytes) -> int | None:
    """The ICT in a commit's bytes, from its first line alone (``commitInfo`` must be first
    where ICTs are on); None if it carries none."""
    first_line = raw.lstrip().split(b"\n", 1)[0]
    return in_commit_timestamp(commit_actions(location, version, first_line)[:1])


def in_commit_timestamp(actions: list[dict]) -> int | None:
    """A commit's in-commit timestamp (epoch ms) from its actions, None if it carries none."""
    for action in actions:
        info = action.get("commitInfo")
        if info and info.get("inCommitTimestamp") is not None:
            return int(info["inCommitTimestamp"])
    return None


def in_commit_timestamps_enabled(config: Mapping[str, str]) -> bool:
    """The table property that turns in-commit timestamps on is set to true."""
    return bool_property(config, "delta.enableInCommitTimestamps")


def ict_enablement_version(config: dict[str, str]) -> int | None:
    """The first version with ICTs (0 when the table was created with them), None if off."""
    if not in_commit_timestamps_enabled(config):
        return None
    return int(config.get("delta.inCommitTimestampEnablementVersion", 0))


def monotonic_times(file_times: list[int]) -> list[int]:
    """File times in ms, each raised to one past its predecessor when not later than it."""
    times: list[int] = []
    for value in file_times:
        if times and value <= times[-1]:
            value = times[-1] + 1
        times.append(value)
    return times


def _newest(location: TableLocation) -> int:
    """The newest version, searched from ``_last_checkpoint`` on when it names a commit that
    exists (a local log is then probed, not listed whole)."""
    hint = location.last_checkpoint_hint()
    since = int(hint["version"]) if hint else None
    return newest_version(location, since if since and location.commit_exists(since) else None)


def _location(table: Table, storage_options: dict[str, str] | None) -> TableLocation:
    return table if isinstance(table, TableLocation) else TableLocation(table, storage_options)


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
    return (timestamp - _EPOCH) // dt.timedelta(microseconds=1)


def _us_to_datetime(micros: int) -> dt.datetime:
    return _EPOCH + dt.timedelta(microseconds=micros)


def _show(micros: int) -> str:
    return _us_to_datetime(micros).isoformat()
