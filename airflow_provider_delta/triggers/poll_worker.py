"""The threads that poll tables for the triggers of one event loop.

A triggerer may hold tens of thousands of deferred sensors, each on its own table: at a 5 s
poll, 30,000 tables make 6,000 polls a second. If each poll cost the event loop a thread hop,
a timer or a wake-up, the loop would spend its time on tables where nothing happened. So a
:class:`PollWorker` owns a thread that polls its tables on :class:`Wheel`\\ s (one per poll
interval) that spread them evenly over the interval, and hands the loop only what changed, in
one call per batch. An idle table costs the loop nothing.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
import weakref
from collections.abc import Callable
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


class Wheel:
    """The tables of one poll interval, spread over it in slots of about :data:`TICK_SECONDS`.

    Each turn polls one slot; a slot comes round once an interval, on a fixed schedule (a late
    turn does not push the later ones back).
    """

    def __init__(self, interval: float, now: float):
        self.interval = interval
        self.slots: list[list[TablePoller]] = [
            [] for _ in range(max(1, round(interval / TICK_SECONDS)))]
        self.tick = interval / len(self.slots)
        self.next_at = now + self.tick
        self.tables = 0
        self._turn = 0
        self._placing = itertools.cycle(range(len(self.slots)))  # round robin: even slots

    def add(self, poller: TablePoller) -> None:
        poller.slot = next(self._placing)
        self.slots[poller.slot].append(poller)
        self.tables += 1

    def remove(self, poller: TablePoller) -> None:
        self.slots[poller.slot].remove(poller)
        self.tables -= 1

    def due(self, now: float) -> list[TablePoller]:
        """The tables of every turn due by ``now`` (a copy: the loop may add or remove)."""
        if now - self.next_at > self.interval:  # far behind (a suspended process): one round
            self.next_at = now - self.interval + self.tick
        due: list[TablePoller] = []
        while self.next_at <= now:
            due.extend(self.slots[self._turn])
            self._turn = (self._turn + 1) % len(self.slots)
            self.next_at += self.tick
        return due


class PollWorker:
    """One thread polling its tables; what changed reaches the loop through ``deliver``."""

    def __init__(self, loop: asyncio.AbstractEventLoop,
                 deliver: Callable[[list[tuple[TablePoller, Any]]], None], name: str):
        self._loop = weakref.ref(loop)  # the registry lives as long as its loop, not longer
        self._deliver = deliver
        self._thread_name = name
        self._wheels: dict[float, Wheel] = {}
        self._lock = threading.Lock()  # guards the wheels (the loop adds, the thread turns)
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.tables = 0

    def add(self, poller: TablePoller) -> None:
        interval = poller.poll_interval
        with self._lock:
            wheel = self._wheels.get(interval)
            if wheel is None:
                wheel = self._wheels[interval] = Wheel(interval, time.monotonic())
            wheel.add(poller)
            self.tables += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._thread_name,
                                                daemon=True)
                self._thread.start()
        self._wake.set()  # the new wheel may turn before the thread's next wake-up

    def remove(self, poller: TablePoller) -> None:
        with self._lock:
            wheel = self._wheels[poller.poll_interval]
            wheel.remove(poller)
            self.tables -= 1
            if not wheel.tables:
                del self._wheels[poller.poll_interval]

    def _run(self) -> None:
        idle_since = None
        while True:
            now = time.monotonic()
            with self._lock:
                due = [p for wheel in self._wheels.values() for p in wheel.due(now)]
                next_at = min((w.next_at for w in self._wheels.values()), default=None)
                if next_at is None:
                    idle_since = idle_since or now
                    if now - idle_since >= IDLE_EXIT_SECONDS:
                        self._thread = None
                        return
                else:
                    idle_since = None
            if due and not self._poll(due):
                return
            wait = IDLE_EXIT_SECONDS if next_at is None else next_at - time.monotonic()
            if wait > 0 and self._wake.wait(wait):
                self._wake.clear()

    def _poll(self, due: list[TablePoller]) -> bool:
        """Poll ``due`` (skipping tables in backoff); False once the loop is gone."""
        news: list[tuple[TablePoller, Any]] = []
        flushed_at = time.monotonic()
        for poller in due:
            now = time.monotonic()
            if poller.retry_at <= now:
                found = _poll_one(poller, now)
                if found is not None:
                    news.append((poller, found))
            if news and (now - flushed_at >= FLUSH_SECONDS or poller is due[-1]):
                if not self._hand_over(news):
                    return False
                news, flushed_at = [], now
        return True

    def _hand_over(self, news: list[tuple[TablePoller, Any]]) -> bool:
        loop = self._loop()
        try:
            if loop is None:
                raise RuntimeError("the event loop is gone")
            loop.call_soon_threadsafe(self._deliver, news)
        except RuntimeError:  # the loop is closed: nobody is left to tell
            with self._lock:
                self._thread = None
            return False
        return True


def _poll_one(poller: TablePoller, now: float) -> Any:
    """``poller.poll(now)``; an unexpected failure is logged and the table polled next turn,
    never the end of the thread that polls every other table."""
    try:
        return poller.poll(now)
    except Exception:  # noqa: BLE001 -- one table's bug must not stop the others' polls
        log.exception("poll of %s failed; polling it again next interval",
                      getattr(poller, "key", poller))
        return None
