"""A clock for the poll workers that moves only when a test says (tests of triggers' polls).

:meth:`HandClock.advance` moves the time, then returns once every worker's thread sleeps
again: what a turn polls and hands to the loop is then done, whatever the machine's speed.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from airflow_provider_delta.triggers import pollers
from airflow_provider_delta.triggers.poll_worker import Clock
from airflow_provider_delta.triggers.pollers import PollerRegistry

SETTLE_SECONDS = 30.0  # a worker that is not asleep by then is stuck: the test fails
EPSILON = 1e-9


class Stopped(BaseException):
    """Ends a worker's thread when its test is over."""


class HandClock(Clock):
    """Time that moves only in :meth:`advance`, which returns once every worker sleeps again."""

    def __init__(self):
        self.time = 0.0
        self.stopped = False
        self.changed = threading.Condition()
        self.threads: list[HandThread] = []

    def now(self) -> float:
        with self.changed:
            return self.time

    def thread(self, name: str) -> HandThread:
        thread = HandThread(self, name)
        self.threads.append(thread)
        return thread

    def stop(self) -> None:
        """End the workers' threads (at the end of a test: nothing moves the clock again)."""
        with self.changed:
            self.stopped = True
            self.changed.notify_all()

    def advance(self, seconds: float = 0.0) -> None:
        with self.changed:
            # Just past the sum: a turn due at 0.05 * 3 comes at 0.15 whatever the rounding.
            self.time = round(self.time + seconds, 6) + EPSILON
            self.changed.notify_all()
            settled = self.changed.wait_for(
                lambda: all(thread.asleep() for thread in self.threads), SETTLE_SECONDS)
        assert settled, "a poll worker did not go back to sleep"


class HandThread:
    """A worker's thread on a :class:`HandClock`; counts the worker's sleeps."""

    def __init__(self, clock: HandClock, name: str):
        self.clock, self.name = clock, name
        self.running = self.woken = False
        self.until: float | None = None  # None while the thread works
        self.sleeps = 0

    def start(self, run) -> None:
        def running():
            try:
                run()
            except Stopped:
                pass
            finally:
                with self.clock.changed:
                    self.running = False
                    self.clock.changed.notify_all()

        with self.clock.changed:
            self.running = True
        threading.Thread(target=running, name=self.name, daemon=True).start()

    def wake(self) -> None:
        with self.clock.changed:
            self.woken = True
            self.clock.changed.notify_all()

    def sleep(self, until: float) -> None:
        with self.clock.changed:
            self.until, self.sleeps = until, self.sleeps + 1
            self.clock.changed.notify_all()
            self.clock.changed.wait_for(
                lambda: self.woken or self.clock.time >= until or self.clock.stopped)
            self.until, self.woken = None, False
            if self.clock.stopped:
                raise Stopped

    def asleep(self) -> bool:
        """Nothing to do until the clock moves (or no thread at all)."""
        return not self.running or (
            self.until is not None and not self.woken and self.clock.time < self.until)


async def turns(clock: HandClock, seconds: float, step: float = 0.05) -> None:
    """Move the clock by ``seconds`` in ``step``\\ s, letting the loop run each hand-over."""
    for _ in range(round(seconds / step)):
        clock.advance(step)
        await asyncio.sleep(0)


@contextmanager
def hand_clocked_registry() -> Iterator[tuple[HandClock, PollerRegistry]]:
    """The running loop's poller registry (the one every trigger of the loop uses), on a
    :class:`HandClock`; its threads end with the block."""
    loop = asyncio.get_running_loop()
    clock = HandClock()
    registry = pollers._REGISTRIES[loop] = pollers.PollerRegistry(loop, clock)
    try:
        yield clock, registry
    finally:
        clock.stop()


async def subscribed(registry: PollerRegistry, tables: int, subscribers: int) -> None:
    """Wait until ``tables`` pollers have ``subscribers`` triggers in all: every trigger made
    its own first check and follows its table's polls."""
    async def settled() -> None:
        while len(registry.pollers) < tables or sum(
                poller.subscribers for poller in registry.pollers.values()) < subscribers:
            await asyncio.sleep(0.01)

    await asyncio.wait_for(settled(), SETTLE_SECONDS)
