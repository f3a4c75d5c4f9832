"""The poll worker's thread: tables spread over the interval, batches to the loop, and a
table whose poll breaks does not stop the others."""

from __future__ import annotations

import asyncio
import time

from airflow_provider_delta.triggers.poll_worker import PollWorker, Wheel


class Table:
    """A table's poller as the worker sees it: counts its polls, news on the ``news_at``-th."""

    def __init__(self, interval: float, news_at: int = 0, broken_at: int = 0):
        self.poll_interval, self.slot, self.retry_at = interval, 0, 0.0
        self.polls, self.news_at, self.broken_at = 0, news_at, broken_at

    def poll(self, now: float):
        self.polls += 1
        if self.polls == self.broken_at:
            raise OSError("a bug in one table's poll")
        return "news" if self.polls == self.news_at else None


def test_a_wheel_spreads_its_tables_evenly_over_the_interval():
    wheel = Wheel(1.0, now=0.0)
    for _ in range(400):
        wheel.add(Table(1.0))
    assert len(wheel.slots) == 20 and {len(slot) for slot in wheel.slots} == {20}
    per_turn = [len(wheel.due(0.05 * turn + 1e-6)) for turn in range(1, 21)]
    assert per_turn == [20] * 20  # one slot a turn: every table once an interval, 20 at a time


def test_news_reach_the_loop_in_one_call_and_a_broken_poll_is_retried():
    async def scenario():
        handed: list[list] = []
        worker = PollWorker(asyncio.get_running_loop(), handed.append, "test-poll")
        tables = [Table(0.05, news_at=3) for _ in range(10)] + [Table(0.05, broken_at=1)]
        for table in tables:
            worker.add(table)
        await asyncio.sleep(0.6)
        for table in tables:
            worker.remove(table)
        return handed, tables

    handed, tables = asyncio.run(scenario())
    assert sum(map(len, handed)) == 10 and len(handed) < 10  # batched, one call per turn
    assert tables[-1].polls >= 5  # polled on after its poll raised
    assert all(table.polls >= 5 for table in tables)
