"""The poll worker's thread: tables spread over the interval, each polled once a turn of its
slot, batches to the loop, a table whose poll breaks does not stop the others, and a thread
that sleeps until a slot holds a table.

Time here is a :class:`HandClock` the test moves: a turn comes when the test says, and the
test waits until the worker sleeps again, so no outcome depends on the machine's speed.
"""

from __future__ import annotations

import asyncio

import pytest
from hand_clock import (
    EPSILON, SETTLE_SECONDS, HandClock, hand_clocked_registry, subscribed, turns,
)

from airflow_provider_delta.core.probe import VersionProbe
from airflow_provider_delta.triggers.poll_worker import PollWorker, Wheel
from airflow_provider_delta.triggers.pollers import PollKey, TablePoller



class Table:
    """A table's poller as the worker sees it: records when it is polled, news on the
    ``news_at``-th poll, raises on the ``broken_at``-th."""

    def __init__(self, interval: float, news_at: int = 0, broken_at: int = 0):
        self.poll_interval, self.slot, self.retry_at = interval, 0, 0.0
        self.polled_at: list[float] = []
        self.news_at, self.broken_at = news_at, broken_at

    def poll(self, now: float):
        self.polled_at.append(now)
        if len(self.polled_at) == self.broken_at:
            raise OSError("a bug in one table's poll")
        return "news" if len(self.polled_at) == self.news_at else None


def test_a_wheel_spreads_its_tables_evenly_over_the_interval():
    wheel = Wheel(1.0, now=0.0)
    for _ in range(400):
        wheel.add(Table(1.0))
    assert len(wheel.slots) == 20 and {len(slot) for slot in wheel.slots} == {20}
    per_turn = [len(wheel.due(0.05 * turn + EPSILON)) for turn in range(1, 21)]
    assert per_turn == [20] * 20  # one slot a turn: every table once an interval, 20 at a time


def test_a_table_added_later_is_polled_at_the_next_turn_in_the_least_filled_slot():
    wheel = Wheel(1.0, now=0.0)
    for _ in range(20):
        wheel.add(Table(1.0))
    assert wheel.due(0.3 + EPSILON) and wheel.next_at() == pytest.approx(0.35)
    alone = Table(1.0)
    assert wheel.add(alone) == pytest.approx(0.35)  # not up to an interval later
    assert alone in wheel.due(0.35 + EPSILON)
    assert wheel.add(Table(1.0)) == pytest.approx(0.4)  # that slot holds two now: the next one


def test_a_late_turn_polls_each_table_once_and_keeps_the_schedule():
    wheel = Wheel(1.0, now=0.0)
    tables = [Table(1.0) for _ in range(20)]
    for table in tables:
        wheel.add(table)
    assert len(wheel.due(0.5)) == 10  # ten turns late: ten slots at once
    assert len(wheel.due(10.0)) == 20  # a process suspended for seconds: one round, not nine
    assert wheel.next_at() == pytest.approx(10.05)  # the turns keep their fixed times


def run_worker(scenario):
    """``scenario(worker, clock, handed)`` in an event loop, with a worker on a hand clock;
    ``handed`` receives each hand-over (a list of news) as the loop runs it."""
    async def main():
        clock, handed = HandClock(), []
        worker = PollWorker(asyncio.get_running_loop(), handed.append, "test-poll", clock)
        try:
            return await scenario(worker, clock, handed)
        finally:
            clock.stop()

    return asyncio.run(main())


def test_a_table_is_polled_once_an_interval_and_the_thread_sleeps_until_its_slot():
    async def scenario(worker, clock, handed):
        table = Table(1.0)
        worker.add(table)
        clock.advance()
        await turns(clock, 3.0)
        worker.remove(table)
        return table, clock.threads[0]

    table, thread = run_worker(scenario)
    assert table.polled_at == pytest.approx([0.05, 1.05, 2.05])
    assert thread.sleeps == 4  # one sleep from each poll to the next: no wake-up per slot


def test_news_reach_the_loop_in_one_call_a_turn_and_a_broken_poll_is_retried():
    async def scenario(worker, clock, handed):
        tables = [Table(0.05, news_at=3) for _ in range(10)] + [Table(0.05, broken_at=1)]
        for table in tables:
            worker.add(table)
        clock.advance()
        await turns(clock, 0.15)
        for table in tables:
            worker.remove(table)
        return handed, tables

    handed, tables = run_worker(scenario)
    assert [len(news) for news in handed] == [10]  # the third turn's news, in one call
    assert {poller for poller, _ in handed[0]} == set(tables[:10])
    assert len(tables[-1].polled_at) == 3  # polled on after its first poll raised
    assert all(len(table.polled_at) == 3 for table in tables)


def test_a_table_added_to_a_sleeping_worker_is_polled_at_the_next_turn():
    async def scenario(worker, clock, handed):
        first, second = Table(60.0), Table(60.0)
        worker.add(first)
        clock.advance()
        await turns(clock, 1.0)  # the worker sleeps until the first table's next turn, 60 s on
        worker.add(second)
        await turns(clock, 0.05)
        worker.remove(first)
        worker.remove(second)
        return first, second

    first, second = run_worker(scenario)
    assert first.polled_at == pytest.approx([0.05])
    assert second.polled_at == pytest.approx([1.05])


def test_a_real_table_commit_reaches_its_subscriber_at_the_next_turn(growing_table):
    table = growing_table(1)

    async def main():
        probe = VersionProbe(table.uri)
        assert probe.latest(since=None) == 0

        async def open_probe():
            return probe

        with hand_clocked_registry() as (clock, registry):
            key = PollKey(table.uri, None, 1.0, 60.0)
            polls = registry.subscribe(key, open_probe)
            first = asyncio.ensure_future(anext(polls))  # nothing published yet: it waits
            await subscribed(registry, tables=1, subscribers=1)
            await turns(clock, 2.0)  # idle polls: the subscriber is not woken
            poller: TablePoller = registry.pollers[key]
            idle = (first.done(), poller.listings)
            await asyncio.to_thread(table.append)
            await turns(clock, 1.0)
            found = await asyncio.wait_for(first, SETTLE_SECONDS)
            await polls.aclose()
        return idle, found

    (woken, listings), found = asyncio.run(main())
    assert not woken and listings == 2  # one listing a turn of its slot, no news
    assert found.latest == 1 and found.error is None
