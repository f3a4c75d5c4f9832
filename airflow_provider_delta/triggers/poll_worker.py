"""The threads that poll tables for the triggers of one event loop.

A triggerer may hold tens of thousands of deferred sensors, each on its own table: at a 5 s
poll, 30,000 tables make 6,000 polls a second. If each poll cost the event loop a thread hop,
a timer or a wake-up, the loop would spend its time on tables where nothing happened. So a
:class:`PollWorker` owns a thread that polls its tables on :class:`Wheel`\\ s (one per poll
interval) that spread them evenly over the interval, and hands the loop only what changed, in
one call per batch. An idle table costs the loop nothing, and the thread sleeps until the next
slot that holds a table. A worker of remote tables has a window: its turn's polls wait on the
network together, up to that many at once (a bounded pool, not a thread per table).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any, Protocol

log = logging.getLogger(__name__)

TICK_SECONDS = 0.05  # a wheel's slot: a poll may come this much later than its interval
# A slow (remote) turn hands what it found so far to the loop at least this often.
FLUSH_SECONDS = 0.02
IDLE_EXIT_SECONDS = 1.0  # a worker without tables for this long ends its thread


class TablePoller(Protocol):
    """What a worker needs of a table's poller (:class:`.pollers.TablePoller`)."""

    poll_interval: float
    slot: int
    retry_at: float

    def poll(self, now: float) -> Any:
        """One poll; what to hand to the loop, None if nothing."""


class Clock:
    """The workers' time (monotonic seconds) and threads. A test gives a clock it moves itself,
    so that a turn comes when the test says and the test knows when a worker sleeps."""

    def now(self) -> float:
        return time.monotonic()

    def thread(self, name: str) -> WorkerThread:
        """The thread of one worker (started when the worker gets its first table)."""
        return WorkerThread(self, name)


class WorkerThread:
    """A worker's thread and its sleeps: until a time, or until woken (a table due sooner)."""

    def __init__(self, clock: Clock, name: str):
        self._clock = clock
        self._thread_name = name
        self._woken = threading.Event()

    def start(self, run: Callable[[], None]) -> None:
        threading.Thread(target=run, name=self._thread_name, daemon=True).start()

    def wake(self) -> None:
        self._woken.set()

    def sleep(self, until: float) -> None:
        timeout = None if until == float("inf") else max(0.0, until - self._clock.now())
        if self._woken.wait(timeout):
            self._woken.clear()  # before the worker looks at its wheels: no wake-up is lost


class Wheel:
    """The tables of one poll interval, spread over it in slots of about :data:`TICK_SECONDS`.

    Turn ``t`` comes at ``origin + t * tick`` and polls slot ``t % len(slots)``: a slot comes
    round once an interval, on a fixed schedule (a late turn does not push the later ones
    back). A table goes to the least filled slot that comes soonest, so tables added together
    spread evenly, and a table added alone is polled at the next turn, not up to an interval
    later.
    """

    def __init__(self, interval: float, now: float):
        count = max(1, round(interval / TICK_SECONDS))
        self.interval = interval
        self.tick = interval / count
        self.slots: list[list[TablePoller]] = [[] for _ in range(count)]
        self.tables = 0
        self._fill = [0] * count  # the slots' sizes, searched at C speed by list.index
        self._low = 0  # no slot holds fewer tables than this
        self._origin = now
        self._turn = 1  # the next turn to come

    def add(self, poller: TablePoller) -> float:
        """Place ``poller``; returns when its first turn comes."""
        start = self._turn % len(self.slots)
        slot = poller.slot = self._least_filled(start)
        self.slots[slot].append(poller)
        self._fill[slot] += 1
        self.tables += 1
        return self._at(self._turn + (slot - start) % len(self.slots))

    def remove(self, poller: TablePoller) -> None:
        self.slots[poller.slot].remove(poller)
        self._fill[poller.slot] -= 1
        self._low = min(self._low, self._fill[poller.slot])
        self.tables -= 1

    def due(self, now: float) -> list[TablePoller]:
        """The tables of every turn due by ``now`` (a copy: the loop may add or remove)."""
        count = len(self.slots)
        if now - self._at(self._turn) >= self.interval:  # far behind (a suspended process)
            self._turn = max(self._turn, int((now - self._origin) / self.tick) - count + 1)
        due: list[TablePoller] = []
        while self._at(self._turn) <= now:
            due.extend(self.slots[self._turn % count])
            self._turn += 1
        return due

    def next_at(self) -> float:
        """When the next turn that polls a table comes (turns of empty slots are skipped)."""
        count = len(self.slots)
        for turn in range(self._turn, self._turn + count):
            if self._fill[turn % count]:
                return self._at(turn)
        return float("inf")

    def _at(self, turn: int) -> float:
        return self._origin + turn * self.tick

    def _least_filled(self, start: int) -> int:
        """The first slot from ``start`` on (then from 0) that holds the fewest tables."""
        while True:
            for low, high in ((start, len(self._fill)), (0, start)):
                try:
                    return self._fill.index(self._low, low, high)
                except ValueError:
                    pass
            self._low += 1  # every slot holds more: the next level


class PollWorker:
    """One thread polling its tables, ``window`` polls at a time; what changed reaches the loop
    through ``deliver``."""

    def __init__(self, loop: asyncio.AbstractEventLoop,
                 deliver: Callable[[list[tuple[TablePoller, Any]]], None], name: str,
                 clock: Clock | None = None, window: int = 1):
        self._loop = weakref.ref(loop)  # the registry lives as long as its loop, not longer
        self._deliver = deliver
        self._clock = clock or Clock()
        self._thread = self._clock.thread(name)
        self._window = window
        self._window_prefix = f"{name}-window"  # its pool threads' names
        self._running = False
        self._wheels: dict[float, Wheel] = {}
        self._lock = threading.Lock()  # guards the wheels (the loop adds, the thread turns)
        self._wakes_at = float("inf")  # when the thread's sleep ends, unless woken sooner
        self.tables = 0

    def add(self, poller: TablePoller) -> None:
        interval = poller.poll_interval
        with self._lock:
            wheel = self._wheels.get(interval)
            if wheel is None:
                wheel = self._wheels[interval] = Wheel(interval, self._clock.now())
            first_turn = wheel.add(poller)
            self.tables += 1
            if not self._running:
                self._running = True
                self._thread.start(self._run)
            elif first_turn < self._wakes_at:  # due before the thread's next wake-up
                self._thread.wake()

    def remove(self, poller: TablePoller) -> None:
        with self._lock:
            wheel = self._wheels[poller.poll_interval]
            wheel.remove(poller)
            self.tables -= 1
            if not wheel.tables:
                del self._wheels[poller.poll_interval]

    def _run(self) -> None:
        # Made with the thread, ended with it: an idle worker keeps no pool threads.
        pool = (ThreadPoolExecutor(self._window, self._window_prefix)
                if self._window > 1 else None)
        try:
            self._turns(pool)
        finally:
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)

    def _turns(self, pool: ThreadPoolExecutor | None) -> None:
        idle_since = None
        while True:
            now = self._clock.now()
            with self._lock:
                due = [p for wheel in self._wheels.values() for p in wheel.due(now)]
                self._wakes_at = min((w.next_at() for w in self._wheels.values()),
                                     default=float("inf"))
                if self._wheels:
                    idle_since = None
                else:
                    idle_since = now if idle_since is None else idle_since
                    if now - idle_since >= IDLE_EXIT_SECONDS:
                        self._running = False
                        return
                    self._wakes_at = idle_since + IDLE_EXIT_SECONDS
                wakes_at = self._wakes_at
            if due and not self._poll(due, pool):
                return
            self._thread.sleep(wakes_at)

    def _poll(self, due: list[TablePoller], pool: ThreadPoolExecutor | None) -> bool:
        """Poll ``due`` (skipping tables in backoff); False once the loop is gone."""
        news: list[tuple[TablePoller, Any]] = []
        flushed_at = self._clock.now()
        for poller, found in _polled(due, self._clock, pool):
            if found is not None:
                news.append((poller, found))
            now = self._clock.now()
            if news and now - flushed_at >= FLUSH_SECONDS:
                if not self._hand_over(news):
                    return False
                news, flushed_at = [], now
        return not news or self._hand_over(news)

    def _hand_over(self, news: list[tuple[TablePoller, Any]]) -> bool:
        loop = self._loop()
        try:
            if loop is None:
                raise RuntimeError("the event loop is gone")
            loop.call_soon_threadsafe(self._deliver, news)
        except RuntimeError:  # the loop is closed: nobody is left to tell
            with self._lock:
                self._running = False
            return False
        return True


def _polled(due: list[TablePoller], clock: Clock, pool: ThreadPoolExecutor | None
            ) -> Iterator[tuple[TablePoller, Any]]:
    """Each table of ``due`` with its poll's news, as its poll ends: one poll after another
    without a pool, else up to the pool's size at once (the turn ends with its last poll, so
    no table is polled twice at a time)."""
    if pool is None:
        return ((poller, _poll_due(poller, clock)) for poller in due)
    polls = {pool.submit(_poll_due, poller, clock): poller for poller in due}
    return ((polls[done], done.result()) for done in as_completed(polls))


def _poll_due(poller: TablePoller, clock: Clock) -> Any:
    """The poll's news, or None for a table in backoff."""
    now = clock.now()
    return _poll_one(poller, now) if poller.retry_at <= now else None


def _poll_one(poller: TablePoller, now: float) -> Any:
    """``poller.poll(now)``; an unexpected failure is logged and the table polled next turn,
    never the end of the thread that polls every other table."""
    try:
        return poller.poll(now)
    except Exception:  # noqa: BLE001 -- one table's bug must not stop the others' polls
        log.exception("poll of %s failed; polling it again next interval",
                      getattr(poller, "key", poller))
        return None
