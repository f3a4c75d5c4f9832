"""One listing per table and interval for all the triggers of a process that watch that table.

A triggerer runs thousands of triggers in one event loop. Each :class:`TablePoller` lists one
table's ``_delta_log`` every ``poll_interval`` seconds and tells its subscribers what it found
only when that changes (a new latest version, an error, a recovery) or, as a heartbeat for
progress logs, once every :data:`HEARTBEAT_SECONDS`. Idle triggers therefore sleep; they do
not wake once a poll. The :class:`PollerRegistry` (one per event loop) polls the due local
tables in worker-thread hops of up to :data:`LOCAL_POLLS_PER_HOP` tables (a local poll is a few
``stat`` calls) and each remote table in its own hop (a listing waits on the network, so remote tables must not queue behind each
other). Polls run at a fixed rate: a table's next poll is due one interval after the previous
one was due, not after it ended, so a batch's duration does not stretch the interval.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace

from airflow_provider_delta.core.probe import VersionProbe
from airflow_provider_delta.errors import DeltaProviderError

log = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 60.0
LOCAL_POLLS_PER_HOP = 100  # small enough that results reach the loop in small bursts
# Polls due this soon are run now with the others, so that tables share thread hops.
COALESCE_SECONDS = 0.05


@dataclass(frozen=True)
class PollKey:
    """What makes two triggers' polls the same: the table, its storage identity, the cadence."""

    table_uri: str  # normalised (storage.to_uri)
    delta_conn_id: str | None
    poll_interval: float
    max_backoff: float
    storage_options: tuple[tuple[str, str], ...] = ()  # given instead of delta_conn_id's


@dataclass(frozen=True)
class Poll:
    """What one poll found: the latest version and its commit time, or the error."""

    latest: int | None = None
    latest_commit_timestamp: int | None = None  # epoch ms of ``latest``'s commit
    error: DeltaProviderError | None = None  # with the last version found before it
    failures: int = 0  # consecutive failed polls, this one included


class TablePoller:
    """Polls one table for its subscribers; publishes what changed."""

    def __init__(self, key: PollKey, probe: VersionProbe):
        self.key = key
        self.probe = probe
        self.subscribers = 0
        self.listings = 0
        self.last: Poll | None = None  # the last poll
        self.due_at = time.monotonic() + key.poll_interval
        self.in_flight = False
        self._published_at = time.monotonic()
        self._published = asyncio.Event()

    def poll(self) -> Poll:
        """One listing (blocking: runs in a worker thread)."""
        self.listings += 1
        known = self.last.latest if self.last is not None else None
        try:
            latest = self.probe.latest(since=known)
            if self.last is not None and latest == known:
                return Poll(latest, self.last.latest_commit_timestamp)
            return Poll(latest, self.probe.commit_timestamp(latest))
        except DeltaProviderError as err:
            if self.last is None:
                return Poll(error=err, failures=1)
            return replace(self.last, error=err, failures=self.last.failures + 1)

    def is_news(self, found: Poll) -> bool:
        """A first poll, a new version, an error or a recovery: worth waking the subscribers."""
        return self.last is None or found.error is not None or self.last != found

    def announce(self, found: Poll) -> None:
        """Keep ``found`` and wake the subscribers."""
        self.last = found
        self._published_at = time.monotonic()
        published, self._published = self._published, asyncio.Event()
        published.set()

    def record(self, found: Poll, now: float) -> None:
        """After a poll: schedule the next; announce ``found`` if news or a heartbeat is due."""
        log.debug("%s: polled, latest %s, error %s", self.key.table_uri, found.latest, found.error)
        self.due_at = self._next_due(found, now)
        if found is self.last:  # announced already, as soon as it was found
            return
        if self.is_news(found) or now - self._published_at >= HEARTBEAT_SECONDS:
            self.announce(found)

    async def updates(self) -> AsyncIterator[Poll]:
        """The last poll (if any), then each published one."""
        if self.last is not None:
            yield self.last
        while True:
            published = self._published
            await published.wait()
            yield self.last

    def _next_due(self, found: Poll, now: float) -> float:
        interval = self.key.poll_interval
        if found.error is not None and not found.error.permanent:
            return now + backoff_seconds(interval, self.key.max_backoff, found.failures)
        next_due = self.due_at + interval
        # A poll that ran late (a busy loop) moves the phase instead of polling again at once.
        return next_due if next_due > now + COALESCE_SECONDS else now + interval


def backoff_seconds(interval: float, max_backoff: float, failures: int) -> float:
    """The wait after ``failures`` failed polls in a row: doubling, up to ``max_backoff``."""
    return min(interval * 2**failures, max(max_backoff, interval))


class PollerRegistry:
    """The pollers of one event loop, driven by one scheduling task."""

    def __init__(self):
        self.pollers: dict[PollKey, TablePoller] = {}
        self._wakeup = asyncio.Event()
        self._driver: asyncio.Task | None = None
        self._hops: set[asyncio.Task] = set()

    async def subscribe(self, key: PollKey, open_probe: Callable[[], Awaitable[VersionProbe]]
                        ) -> AsyncIterator[Poll]:
        """The polls of ``key``'s table as they are published, for as long as it is iterated."""
        poller = self.pollers.get(key)
        if poller is None:
            probe = await open_probe()
            poller = self.pollers.setdefault(key, TablePoller(key, probe))
            self._wakeup.set()  # it may be due before the poll the driver waits for
        poller.subscribers += 1
        if self._driver is None or self._driver.done():
            self._driver = asyncio.ensure_future(self._drive())
        try:
            async for found in poller.updates():
                yield found
        finally:
            poller.subscribers -= 1
            if poller.subscribers == 0 and self.pollers.get(key) is poller:
                del self.pollers[key]

    async def _drive(self) -> None:
        while self.pollers:
            now = time.monotonic()
            waiting = [p for p in self.pollers.values() if not p.in_flight]
            due = [p for p in waiting if p.due_at <= now + COALESCE_SECONDS]
            if due:
                self._start_hops(due)
                continue
            next_due = min((p.due_at for p in waiting), default=now + COALESCE_SECONDS)
            self._wakeup.clear()
            try:
                await asyncio.wait_for(self._wakeup.wait(), max(next_due - now, COALESCE_SECONDS))
            except asyncio.TimeoutError:  # TimeoutError's alias from Python 3.11 on
                pass

    def _start_hops(self, due: list[TablePoller]) -> None:
        local = [p for p in due if p.probe.location.is_local]
        batches = [local[i:i + LOCAL_POLLS_PER_HOP]
                   for i in range(0, len(local), LOCAL_POLLS_PER_HOP)]
        batches += [[p] for p in due if not p.probe.location.is_local]
        for batch in batches:
            for poller in batch:
                poller.in_flight = True
            hop = asyncio.ensure_future(self._poll_batch(batch))
            self._hops.add(hop)
            hop.add_done_callback(self._hops.discard)

    async def _poll_batch(self, batch: list[TablePoller]) -> None:
        loop = asyncio.get_running_loop()

        def poll_all() -> list[Poll]:
            found = []
            for poller in batch:
                found.append(poller.poll())
                if poller.is_news(found[-1]):  # wake its triggers now, not after the batch
                    loop.call_soon_threadsafe(poller.announce, found[-1])
            return found

        try:
            found = await asyncio.to_thread(poll_all)
        finally:
            for poller in batch:
                poller.in_flight = False
        now = time.monotonic()
        for poller, poll in zip(batch, found):
            poller.record(poll, now)
        self._wakeup.set()


_REGISTRIES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, PollerRegistry] = (
    weakref.WeakKeyDictionary()
)


def registry() -> PollerRegistry:
    """The registry of the running event loop (the triggerer's: one per process)."""
    loop = asyncio.get_running_loop()
    found = _REGISTRIES.get(loop)
    if found is None:
        found = _REGISTRIES[loop] = PollerRegistry()
    return found
