"""Whether a table's time interval is complete: the check the interval sensor and its trigger
share.

An interval ``[start, end)`` is complete once no commit can still get a time before ``end``:
a commit timed at or after ``end`` exists (commit times increase with versions, by Delta's
rules: :mod:`~airflow_provider_delta.core.commit_times`), or ``end`` lies ``grace`` in the
past (the table is quiet; the grace covers a commit timed before ``end`` whose file shows up
after it).
"""

from __future__ import annotations

import datetime as dt
from typing import TypedDict

from airflow_provider_delta.core.commit_times import CommitClock, epoch_ms, settles_in
from airflow_provider_delta.core.delta_log import TableLocation
from airflow_provider_delta.core.versions import newest_version


class IntervalEnd(TypedDict):
    """What the interval sensor returns as its XCom and its trigger carries in its event."""

    table_uri: str
    interval_end: str  # ISO-8601, UTC
    complete_by: str  # "commit": one is timed at or after the end; "grace": the grace passed
    newest_version: int
    newest_commit_timestamp: int  # epoch ms of ``newest_version``'s commit, by Delta's rules


class IntervalCheck:
    """The repeated checks of one sensor or trigger. The :class:`CommitClock` is kept while
    the newest version stays the same: an idle check finds the newest version from the last
    one (a few ``stat`` calls, or one listing) and replays and lists nothing more. Commits do
    not change once written, so the times the clock read stay right; a new version gets a new
    clock."""

    def __init__(self, location: TableLocation):
        self.location = location
        self._clock: CommitClock | None = None

    def reached(self, end: dt.datetime, grace: dt.timedelta, now: dt.datetime
                ) -> IntervalEnd | None:
        """How the interval ending at ``end`` (aware) is complete at ``now``; None: not yet.

        A first check builds the clock: it finds the newest version (from
        ``_last_checkpoint`` on), replays the table's configuration at it (checkpoint and the
        commits after it), then reads the newest commit's in-commit timestamp, or, without
        them, lists the file times of every commit in the log (a cost that grows with the log).
        """
        self._clock = clock = self._current_clock()
        end_ms = epoch_ms(end)
        if settles_in(clock, end_ms, epoch_ms(now), grace // dt.timedelta(milliseconds=1)):
            return None
        newest_ms = clock.millis(clock.newest)
        return IntervalEnd(
            table_uri=self.location.table_uri,
            interval_end=end.astimezone(dt.timezone.utc).isoformat(),
            complete_by="commit" if newest_ms >= end_ms else "grace",
            newest_version=clock.newest,
            newest_commit_timestamp=newest_ms,
        )

    def _current_clock(self) -> CommitClock:
        if self._clock is None:
            return CommitClock(self.location)
        newest = newest_version(self.location, self._clock.newest)
        return self._clock if newest == self._clock.newest else CommitClock(self.location, newest)
