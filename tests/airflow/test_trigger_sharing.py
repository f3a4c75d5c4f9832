"""Many DeltaVersionTriggers in one event loop: shared polls, quiet idle logs, watchers that wait
for their table, and one trigger shared by several assets (real local tables)."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import threading
import time

import pytest
from airflow.sdk import Asset
from hand_clock import hand_clocked_registry, subscribed, turns
from airflow.sdk.execution_time.context import AssetStateStoreAccessors

from airflow_provider_delta.core import probe as probe_module
from airflow_provider_delta.triggers import DeltaVersionTrigger

POLL = 0.1


def trigger_log(capsys, text: str) -> list[str]:
    """The level names of the trigger's log lines (Airflow renders them on stdout) with ``text``."""
    lines = [line for line in capsys.readouterr().out.splitlines() if text in line]
    return [line.split("[", 1)[1].split("]", 1)[0].strip() for line in lines]


@pytest.fixture
def listings(monkeypatch) -> dict[str, int]:
    """Log listings made, by table (the real listing runs; it is only counted)."""
    counts: dict[str, int] = {}
    listing = probe_module.newest_version

    def counted(location, since=None):
        counts[location.table_uri] = counts.get(location.table_uri, 0) + 1
        return listing(location, since)

    monkeypatch.setattr(probe_module, "newest_version", counted)
    return counts


async def first_events(triggers: list[DeltaVersionTrigger], *, commit_later=None,
                       idle: float = 1.0) -> list[dict]:
    """Run the triggers side by side to their first events; commit after ``idle`` seconds."""
    waiting = [asyncio.ensure_future(anext(trigger.run())) for trigger in triggers]
    if commit_later is not None:
        await asyncio.sleep(idle)
        await asyncio.to_thread(commit_later)
    events = await asyncio.wait_for(asyncio.gather(*waiting), timeout=60)
    return [event.payload for event in events]


def test_triggers_on_one_table_share_one_listing_per_interval(growing_table, listings):
    table = growing_table(1)
    triggers = [DeltaVersionTrigger(table_uri=table.uri, start_version=1, poll_interval=POLL,
                                    fire_once=True) for _ in range(20)]

    async def scenario():
        with hand_clocked_registry() as (clock, registry):
            waiting = [asyncio.ensure_future(anext(trigger.run())) for trigger in triggers]
            await subscribed(registry, tables=1, subscribers=len(triggers))
            before = listings[table.uri]
            await turns(clock, 1.0)
            shared_polls = listings[table.uri] - before
            await asyncio.to_thread(table.append)
            await turns(clock, POLL)
            events = await asyncio.wait_for(asyncio.gather(*waiting), timeout=60)
        return shared_polls, [event.payload for event in events]

    shared_polls, payloads = asyncio.run(scenario())
    assert shared_polls == 10  # one a poll interval (1 s / POLL), not 20 triggers x 10
    assert {(p["status"], p["start_version"], p["end_version"]) for p in payloads} == {
        ("success", 1, 1)}


def test_watchers_of_one_table_declare_one_shared_stream(tmp_path):
    def key(**kwargs):
        return DeltaVersionTrigger(**{"table_uri": str(tmp_path / "t"), **kwargs}).shared_stream_key()

    assert key() == key(table_uri=f"file://{tmp_path}/t/", initial="latest", state_key="other")
    assert len({key(), key(delta_conn_id="lake"), key(poll_interval=5), key(max_backoff=9),
                key(table_uri=str(tmp_path / "u"))}) == 5
    assert key(fire_once=True) is None  # deferred sensors share through the registry only


def test_triggers_sharing_a_table_each_keep_their_own_start(growing_table):
    table = growing_table(2)  # versions 0..1
    early = DeltaVersionTrigger(table_uri=table.uri, start_version=1, poll_interval=POLL,
                                fire_once=True)
    waiting = DeltaVersionTrigger(table_uri=table.uri, start_version=2, poll_interval=POLL,
                                  fire_once=True)
    enough = DeltaVersionTrigger(table_uri=table.uri, start_version=1, min_new_versions=2,
                                 poll_interval=POLL, fire_once=True)
    payloads = asyncio.run(first_events([early, waiting, enough], commit_later=table.append))
    assert [(p["start_version"], p["end_version"]) for p in payloads] == [(1, 1), (2, 2), (1, 2)]


def test_an_idle_trigger_logs_its_polls_at_debug(growing_table, caplog):
    table = growing_table(1)
    trigger = DeltaVersionTrigger(table_uri=table.uri, start_version=1, poll_interval=0.05,
                                  fire_once=True)
    with caplog.at_level(logging.DEBUG):
        payloads = asyncio.run(first_events([trigger], commit_later=table.append))
    assert payloads[0]["end_version"] == 1
    waiting_lines = [r for r in caplog.records if "waiting for" in r.getMessage()
                     or "polled" in r.getMessage()]
    assert len(waiting_lines) >= 10, "the idle polls are logged"
    assert [r.levelno for r in waiting_lines].count(logging.INFO) <= 1  # at most once a minute


def watch(trigger: DeltaVersionTrigger, *steps) -> list[dict]:
    """Run a watcher to one event per step: wait 0.5 s (nothing may fire), run ``step()`` in a
    thread, then take the next event."""

    async def scenario():
        events = trigger.run()
        payloads = []
        for step in steps:
            pending = asyncio.ensure_future(anext(events))
            await asyncio.sleep(0.5)
            assert not pending.done(), pending.exception() or pending.result().payload
            await asyncio.to_thread(step)
            payloads.append((await asyncio.wait_for(pending, 30)).payload)
        await events.aclose()
        return payloads

    return asyncio.run(scenario())


def ranges(payloads: list[dict]) -> list[tuple[str, int, int]]:
    return [(p["mode"], p["start_version"], p["end_version"]) for p in payloads]


def test_a_watcher_waits_for_a_table_that_does_not_exist_yet(growing_table, tmp_path, capsys):
    """An AssetWatcher set up before its table: it waits, then announces the first snapshot."""
    uri = str(tmp_path / "later")
    trigger = DeltaVersionTrigger(table_uri=uri, poll_interval=POLL)
    create_or_append = lambda: growing_table(1, uri=uri)  # noqa: E731
    payloads = watch(trigger, create_or_append, create_or_append)
    assert ranges(payloads) == [("snapshot", 0, 0), ("changes", 1, 1)]
    assert trigger_log(capsys, f"{uri} is not a Delta table") == ["info"]  # once a minute


def test_a_watcher_waits_when_its_table_is_gone_between_polls(growing_table):
    """A table dropped (folder deleted) while watched, then recreated: the watcher carries on."""
    table = growing_table(2, name="dropped")
    trigger = DeltaVersionTrigger(table_uri=table.uri, initial="latest", poll_interval=POLL)

    def drop_and_recreate():
        shutil.rmtree(table.uri)
        time.sleep(0.5)  # polls that find no table
        growing_table(3, "dropped")

    assert ranges(watch(trigger, drop_and_recreate)) == [("changes", 2, 2)]


def test_one_trigger_watching_for_several_assets_announces_without_a_stored_watermark(
        growing_table, capsys):
    """Two assets with the same watcher trigger share one trigger, whose state store then has
    two assets: the watermark is kept in memory (with a warning) instead of failing."""
    table = growing_table(2)
    trigger = DeltaVersionTrigger(table_uri=table.uri, initial="latest", poll_interval=POLL)
    trigger.asset_state_store = AssetStateStoreAccessors(
        inlets=[Asset(name="orders_for_sales", uri="file:///orders"),
                Asset(name="orders_for_finance", uri="file:///orders")])
    payloads = watch(trigger, table.append, table.append)
    assert ranges(payloads) == [("changes", 2, 2), ("changes", 3, 3)]
    assert trigger_log(capsys, "several assets are watched through this one trigger") == [
        "warning"]


def test_idle_tables_cost_the_loop_no_call_and_no_thread_each(growing_table, monkeypatch):
    """Many separate tables: polled by one worker thread, off the loop; an idle poll hands the
    loop nothing, and the news of several tables reach it in one call."""
    from airflow_provider_delta.triggers import pollers

    handed: list[int] = []
    deliver = pollers._deliver
    monkeypatch.setattr(pollers, "_deliver", lambda news: (handed.append(len(news)), deliver(news)))
    tables = [growing_table(1, name=f"t{i}") for i in range(40)]
    triggers = [DeltaVersionTrigger(table_uri=t.uri, start_version=1, poll_interval=POLL,
                                    fire_once=True) for t in tables]

    async def scenario():
        with hand_clocked_registry() as (clock, registry):
            waiting = [asyncio.ensure_future(anext(trigger.run())) for trigger in triggers]
            await subscribed(registry, tables=len(tables), subscribers=len(tables))
            await turns(clock, 1.0)  # ten idle polls of each table
            idle_calls = len(handed)
            threads = [thread.name for thread in clock.threads if thread.running]
            await asyncio.to_thread(lambda: [table.append() for table in tables])
            await turns(clock, POLL)  # each table's next poll: the two slots' turns
            events = await asyncio.wait_for(asyncio.gather(*waiting), timeout=60)
        return idle_calls, threads, [event.payload for event in events]

    idle_calls, threads, payloads = asyncio.run(scenario())
    assert idle_calls == 0
    assert threads == ["delta-poll-local"]  # one thread polls every local table
    assert {(p["start_version"], p["end_version"]) for p in payloads} == {(1, 1)}
    assert handed == [20, 20]  # a call a turn, each with the news of its slot's tables


def test_a_waiting_deferred_trigger_keeps_few_objects_for_the_collector(growing_table, caplog):
    """The garbage collector walks every waiting trigger's objects, 30,000 of them on a large
    triggerer, and a full collection stops the loop for as long as that takes. A deferred
    trigger waiting on its own table's polls keeps one async generator of this package (its
    events) and, with its table's poller and probe, a bounded handful of tracked objects (the
    driving task included: 19 here, against 40 before they were trimmed)."""
    import gc

    caplog.set_level(logging.WARNING, logger="airflow_provider_delta")  # no records kept
    warm, count = 5, 20  # the first ones also import what a trigger imports on its first run
    tables = [growing_table(1, name=f"t{i}") for i in range(warm + count)]

    def tracked() -> int:
        gc.collect()
        return len(gc.get_objects())

    def ours() -> int:
        return sum(1 for found in gc.get_objects() if type(found).__name__ == "async_generator"
                   and "airflow_provider_delta" in found.ag_code.co_filename)

    def started(batch):
        triggers = [DeltaVersionTrigger(table_uri=t.uri, start_version=1, poll_interval=POLL,
                                        fire_once=True) for t in batch]
        return [asyncio.ensure_future(anext(trigger.run())) for trigger in triggers]

    async def scenario():
        with hand_clocked_registry() as (clock, registry):
            waiting = started(tables[:warm])
            await subscribed(registry, tables=warm, subscribers=warm)
            before = tracked()
            waiting += started(tables[warm:])
            await subscribed(registry, tables=len(tables), subscribers=len(tables))
            kept = (tracked() - before) / count, ours()
            await asyncio.to_thread(lambda: [table.append() for table in tables])
            await turns(clock, POLL)
            events = await asyncio.wait_for(asyncio.gather(*waiting), timeout=60)
        return kept, [event.payload for event in events]

    (per_trigger, generators), payloads = asyncio.run(scenario())
    assert per_trigger <= 24, per_trigger
    assert generators == len(tables)
    assert {(p["status"], p["end_version"]) for p in payloads} == {("success", 1)}


def test_triggers_starting_together_look_their_connection_up_once(growing_table, monkeypatch):
    """A triggerer starting thousands of triggers makes one lookup of their connection, not one
    each; a trigger that starts later looks it up again (a changed connection is seen)."""
    from airflow_provider_delta.hooks import delta as delta_hook

    monkeypatch.setenv("AIRFLOW_CONN_LAKE", json.dumps({"conn_type": "delta"}))
    lookups: list[str] = []
    lookup = delta_hook.aconnection_storage_options

    async def counted(conn_id):
        lookups.append(conn_id)
        return await lookup(conn_id)

    monkeypatch.setattr(delta_hook, "aconnection_storage_options", counted)
    tables = [growing_table(2, name=f"t{i}") for i in range(10)]

    def trigger(table):
        return DeltaVersionTrigger(table_uri=table.uri, start_version=1, poll_interval=POLL,
                                   delta_conn_id="lake", fire_once=True)

    async def scenario():
        together = await first_events([trigger(table) for table in tables])
        later = await first_events([trigger(tables[0])])
        return together + later

    payloads = asyncio.run(scenario())
    assert {(p["status"], p["start_version"], p["end_version"]) for p in payloads} == {
        ("success", 1, 1)}
    assert lookups == ["lake", "lake"]
