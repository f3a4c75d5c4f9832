"""One poll per table and interval for all the triggers of a process that watch that table.

A triggerer runs thousands of triggers in one event loop. Each :class:`TablePoller` polls one
table's ``_delta_log`` every ``poll_interval`` seconds and tells its subscribers what it found
only when that changes (a new latest version, an error, a recovery) or, as a heartbeat for
progress logs and timeouts, once every :data:`HEARTBEAT_SECONDS`. Idle triggers therefore
sleep; they do not wake once a poll. The polls themselves run in worker threads
(:mod:`.poll_worker`), never in the loop: one thread for all local tables (a local poll is a
few ``stat`` calls) and a few for remote ones, each with a window of listings in flight at
once (a listing waits on the network: one after another, a thread would make 1 / a LIST's
latency polls a second). A poll's news reach the loop in batches.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, replace

from airflow_provider_delta.core.probe import VersionProbe
from airflow_provider_delta.errors import DeltaProviderError
from airflow_provider_delta.triggers.poll_worker import Clock, PollWorker

log = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 60.0
REMOTE_WORKERS = 8  # threads with wheels of remote tables
# Listings in flight at once per remote thread: 8 x 16 / a LIST's latency polls a second.
REMOTE_WINDOW = 16


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
    """Polls one table for its subscribers (in a worker thread); publishes what changed.

    The worker thread owns ``polled``, ``retry_at`` and the heartbeat's clock; the loop owns
    ``last`` (what was published) and the subscribers.
    """

    def __init__(self, key: PollKey, probe: VersionProbe):
        self.key = key
        self.poll_interval = key.poll_interval
        self.probe = probe
        self.subscribers = 0
        self.listings = 0
        self.last: Poll | None = None  # the last poll published
        # The last poll made; a probe that found the head already (a trigger's first check)
        # spares its subscribers a wake-up to tell them what they know.
        self.polled = None if probe.last_latest is None else Poll(probe.last_latest)
        self.retry_at = 0.0  # monotonic time before which a backoff skips the polls
        self.slot = 0  # its place on its worker's wheel
        self.closed = False
        self._heard_at: float | None = None  # when the worker last handed over a poll
        self._waiters: list[asyncio.Future[Poll]] = []  # one a subscriber waiting for news

    def poll(self, now: float) -> Poll | None:
        """One listing (blocking: runs in a worker thread); the poll if worth publishing."""
        found = self._list()
        log.debug("%s: polled, latest %s, error %s", self.key.table_uri, found.latest, found.error)
        news = self.polled is None or found.error is not None or found != self.polled
        self.polled = found
        self.retry_at = _retry_at(self.key, found, now)
        if self._heard_at is None:  # the first poll: the heartbeat's clock starts
            self._heard_at = now
        if news or now - self._heard_at >= HEARTBEAT_SECONDS:
            self._heard_at = now
            return found
        return None

    def _list(self) -> Poll:
        self.listings += 1
        known = self.polled.latest if self.polled is not None else None
        try:
            latest = self.probe.latest(since=known)
            if self.polled is not None and latest == known:
                return Poll(latest, self.polled.latest_commit_timestamp)
            return Poll(latest, self.probe.commit_timestamp(latest))
        except DeltaProviderError as err:
            if self.polled is None:
                return Poll(error=err, failures=1)
            return replace(self.polled, error=err, failures=self.polled.failures + 1)

    def announce(self, found: Poll) -> None:
        """Keep ``found`` and wake the subscribers (in the loop)."""
        self.last = found
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():  # else its subscriber was cancelled
                waiter.set_result(found)

    def next_published(self) -> asyncio.Future[Poll]:
        """The next poll published: a future of the caller's own, so that cancelling one
        subscriber cancels no other. A waiting subscriber keeps this future alone, not the
        event, queue and coroutines of an ``asyncio.Event`` wait."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        return waiter


def _retry_at(key: PollKey, found: Poll, now: float) -> float:
    """After a transient error the table's polls pause for the backoff; else none is skipped."""
    if found.error is None or found.error.permanent:
        return 0.0
    # The wheel's turns come once an interval: the first at or after this is the backoff's end.
    interval = key.poll_interval
    return now + backoff_seconds(interval, key.max_backoff, found.failures) - interval / 2


def backoff_seconds(interval: float, max_backoff: float, failures: int) -> float:
    """The wait after ``failures`` failed polls in a row: doubling, up to ``max_backoff``."""
    return min(interval * 2**failures, max(max_backoff, interval))


class PollerRegistry:
    """The pollers of one event loop and the worker threads that poll them."""

    def __init__(self, loop: asyncio.AbstractEventLoop, clock: Clock | None = None):
        self.pollers: dict[PollKey, TablePoller] = {}
        self._local = PollWorker(loop, _deliver, "delta-poll-local", clock)
        self._remote = [PollWorker(loop, _deliver, f"delta-poll-remote-{i}", clock, REMOTE_WINDOW)
                        for i in range(REMOTE_WORKERS)]

    def subscribe(self, key: PollKey, open_probe: Callable[[], Awaitable[VersionProbe]]
                  ) -> Subscription:
        """The polls of ``key``'s table as they are published, until ``aclose()``."""
        return Subscription(key, open_probe, self)

    async def join(self, key: PollKey, open_probe: Callable[[], Awaitable[VersionProbe]]
                   ) -> TablePoller:
        """``key``'s poller, with one more subscriber (made, and polled, for the first)."""
        poller = self.pollers.get(key)
        if poller is None:
            probe = await open_probe()
            poller = self.pollers.get(key)
            if poller is None:
                poller = self.pollers[key] = TablePoller(key, probe)
                self._worker(poller).add(poller)
        poller.subscribers += 1
        return poller

    def leave(self, poller: TablePoller) -> None:
        """One subscriber fewer; the last one's going ends the table's polls."""
        poller.subscribers -= 1
        if poller.subscribers == 0 and self.pollers.get(poller.key) is poller:
            del self.pollers[poller.key]
            poller.closed = True
            self._worker(poller).remove(poller)

    def _worker(self, poller: TablePoller) -> PollWorker:
        """Local tables share one thread; a remote one goes to a pool thread by its key."""
        if poller.probe.location.is_local:
            return self._local
        return self._remote[hash(poller.key) % len(self._remote)]


class Subscription:
    """One subscriber's polls of a table: the last one published (if any), then each one
    published, until :meth:`aclose`.

    A plain async iterator, not an async generator: 30,000 deferred sensors would otherwise
    keep 30,000 more generators (and their frames, and the loop's weak references to them) for
    the garbage collector to walk, and each event would pass one more generator level. Once
    joined, its ``__anext__`` hands out the poller's future itself, with no coroutine around it.
    """

    def __init__(self, key: PollKey, open_probe: Callable[[], Awaitable[VersionProbe]],
                 registry: PollerRegistry | None = None):
        self._registry = registry  # None: the running loop's, once iterated
        self._key = key
        self._open_probe: Callable[[], Awaitable[VersionProbe]] | None = open_probe
        self._poller: TablePoller | None = None
        self._closed = False

    def __aiter__(self) -> Subscription:
        return self

    def __anext__(self) -> Awaitable[Poll]:
        if self._poller is None or self._closed:
            return self._join()
        return self._poller.next_published()

    async def _join(self) -> Poll:
        """The first poll: from joining the table's poller (made and polled for the first)."""
        if self._closed or self._open_probe is None:
            raise StopAsyncIteration
        joined = self._registry = self._registry or registry()
        poller = self._poller = await joined.join(self._key, self._open_probe)
        # The poller's key serves every subscriber: this one's key and probe opener go.
        self._key, self._open_probe = poller.key, None
        if self._closed:  # closed while the probe opened
            joined.leave(poller)
            raise StopAsyncIteration
        if poller.last is not None:
            return poller.last
        return await poller.next_published()

    async def aclose(self) -> None:
        if not self._closed and self._poller is not None and self._registry is not None:
            self._registry.leave(self._poller)
        self._closed = True


async def closing_polls(polls: Subscription) -> AsyncIterator[Poll]:
    """``polls`` for a consumer that may drop them without closing them (Airflow's shared
    streams): a dropped generator is finalised, and its subscription with it."""
    async with aclosing(polls):
        async for found in polls:
            yield found


def _deliver(news: list[tuple[TablePoller, Poll]]) -> None:
    """In the loop: publish a worker's batch of news (one call for many tables)."""
    for poller, found in news:
        if not poller.closed:
            poller.announce(found)


_REGISTRIES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, PollerRegistry] = (
    weakref.WeakKeyDictionary()
)


def registry() -> PollerRegistry:
    """The registry of the running event loop (the triggerer's: one per process)."""
    loop = asyncio.get_running_loop()
    found = _REGISTRIES.get(loop)
    if found is None:
        found = _REGISTRIES[loop] = PollerRegistry(loop)
    return found
