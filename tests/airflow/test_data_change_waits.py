"""Waits for data changes only: OPTIMIZE, VACUUM and property changes start no run.

Tables are written by deltalake: an OPTIMIZE through ``optimize.compact()`` (files with
dataChange=false), a VACUUM (commitInfo-only commits), a property change (metaData only).
"""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import datetime

import pytest
from airflow.sdk import DAG, get_current_context, task

from airflow_provider_delta.sensors import DeltaVersionSensor
from airflow_provider_delta.triggers import DeltaVersionTrigger
from tests.airflow.test_sensor_poke import sensor_on


def test_maintenance_commits_keep_the_sensor_waiting(growing_table):
    table = growing_table(3)  # versions 0..2, loaded: the watermark is 2
    sensor = sensor_on(table.uri, watermark=2, data_changes_only=True)
    latest = table.maintain()
    assert latest == 6  # OPTIMIZE, VACUUM START, VACUUM END, SET TBLPROPERTIES
    assert sensor.poke({}) is False
    assert sensor_on(table.uri, watermark=2).poke({}).xcom_value["end_version"] == latest
    table.append()
    found = sensor.poke({}).xcom_value
    # The range starts after the watermark: the load passes over the maintenance commits.
    assert (found["mode"], found["start_version"], found["end_version"]) == ("changes", 3, 7)


def test_an_optimize_alone_keeps_the_sensor_waiting_in_reschedule_mode(growing_table):
    """A fresh sensor per poke (reschedule mode) reads the commits after the watermark again."""
    table = growing_table(3)
    table.optimize()
    assert sensor_on(table.uri, watermark=2, data_changes_only=True,
                     mode="reschedule").poke({}) is False
    table.append()
    found = sensor_on(table.uri, watermark=2, data_changes_only=True,
                      mode="reschedule").poke({}).xcom_value
    assert (found["start_version"], found["end_version"]) == (3, 4)


def test_min_new_versions_counts_data_changes(growing_table):
    table = growing_table(3)
    sensor = sensor_on(table.uri, watermark=2, data_changes_only=True, min_new_versions=2)
    table.append()
    table.maintain()
    assert sensor.poke({}) is False  # five new versions, one data change
    table.append()
    found = sensor.poke({}).xcom_value
    assert (found["start_version"], found["end_version"]) == (3, 8)


def test_without_a_watermark_the_snapshot_is_found_at_once(growing_table):
    """initial="snapshot" loads what exists: no data change needs waiting for."""
    table = growing_table(3)
    table.maintain()
    found = sensor_on(table.uri, data_changes_only=True).poke({}).xcom_value
    assert (found["mode"], found["start_version"], found["end_version"]) == ("snapshot", 6, 6)


def test_the_deferred_sensor_hands_the_option_to_its_trigger(growing_table):
    from airflow.sdk.exceptions import TaskDeferred

    table = growing_table(3)
    table.optimize()
    sensor = sensor_on(table.uri, watermark=2, data_changes_only=True, deferrable=True)
    try:
        sensor.execute({})
    except TaskDeferred as deferred:
        _, kwargs = deferred.trigger.serialize()
    else:
        raise AssertionError("the sensor did not defer: the OPTIMIZE woke it")
    assert kwargs["data_changes_only"] is True and kwargs["start_version"] == 3
    assert DeltaVersionTrigger(**kwargs).serialize()[1] == kwargs


def first_event_after(trigger: DeltaVersionTrigger, *steps):
    """Run the trigger; do each step (in a thread) with a pause before it, checking that no
    event came before the last one; return the first event's payload."""

    async def scenario():
        waiting = asyncio.ensure_future(anext(trigger.run()))
        for step in steps:
            await asyncio.sleep(0.5)
            assert not waiting.done(), f"fired before {step.__name__}: {waiting.result().payload}"
            await asyncio.to_thread(step)
        return (await asyncio.wait_for(waiting, timeout=30)).payload

    return asyncio.run(scenario())


def test_trigger_sleeps_through_maintenance_and_fires_on_data(growing_table):
    table = growing_table(3)
    trigger = DeltaVersionTrigger(table_uri=table.uri, start_version=3, poll_interval=0.05,
                                  fire_once=True, data_changes_only=True)
    payload = first_event_after(trigger, table.maintain, table.append)
    assert (payload["status"], payload["start_version"], payload["end_version"]) == (
        "success", 3, 7)


def test_trigger_without_the_option_fires_on_an_optimize(growing_table):
    table = growing_table(3)
    trigger = DeltaVersionTrigger(table_uri=table.uri, start_version=3, poll_interval=0.05,
                                  fire_once=True)
    payload = first_event_after(trigger, table.optimize)
    assert (payload["start_version"], payload["end_version"]) == (3, 3)


def test_trigger_counts_maintenance_found_at_its_start_as_nothing(growing_table):
    """Its own first check reads the commits already there."""
    table = growing_table(3)
    table.maintain()
    trigger = DeltaVersionTrigger(table_uri=table.uri, start_version=3, poll_interval=0.05,
                                  fire_once=True, data_changes_only=True)
    payload = first_event_after(trigger, table.append)
    assert (payload["start_version"], payload["end_version"]) == (3, 7)


def test_watcher_announces_only_data_changes(growing_table):
    table = growing_table(3)
    trigger = DeltaVersionTrigger(table_uri=table.uri, initial="latest", poll_interval=0.05,
                                  data_changes_only=True)

    async def scenario():
        events = trigger.run()
        pending = asyncio.ensure_future(anext(events))
        await asyncio.sleep(0.3)
        await asyncio.to_thread(table.maintain)
        await asyncio.sleep(0.5)
        assert not pending.done(), "an OPTIMIZE, VACUUM or property change made an event"
        await asyncio.to_thread(table.append)
        first = (await asyncio.wait_for(pending, 30)).payload
        pending = asyncio.ensure_future(anext(events))
        await asyncio.to_thread(table.optimize)
        await asyncio.sleep(0.5)
        assert not pending.done(), "the second OPTIMIZE made an event"
        await asyncio.to_thread(table.append)
        second = (await asyncio.wait_for(pending, 30)).payload
        await events.aclose()
        return first, second

    first, second = asyncio.run(scenario())
    assert (first["start_version"], first["end_version"]) == (3, 7)
    assert (second["start_version"], second["end_version"]) == (8, 9)


def waiting_dag(dag_id: str, table_uri: str, **sensor_kwargs) -> DAG:
    """sense >> load; ``load`` writes the range's end as the Variable watermark."""
    from airflow_provider_delta.watermarks import make_watermark_store

    with DAG(dag_id, schedule=None, start_date=datetime(2024, 1, 1), catchup=False) as dag:
        sense = DeltaVersionSensor(
            task_id="sense", table_uri=table_uri, watermark_store="variable",
            watermark_key="data_wm", data_changes_only=True,
            **{"poke_interval": 0.1, "timeout": 3, "soft_fail": True, **sensor_kwargs})

        @task
        def load() -> dict:
            context = get_current_context()
            found = context["ti"].xcom_pull(task_ids="sense")
            make_watermark_store("variable", key="data_wm", table_uri=table_uri).write(
                context, found["end_version"])
            return found

        sense >> load()
    return dag


def test_dag_runs_skip_maintenance_and_load_after_a_data_change(
        run_dag, growing_table, task_states, ranges_of):
    table = growing_table(3)
    dag = waiting_dag("delta_data_changes_poke", table.uri)
    assert ranges_of(run_dag(dag)) == (2, 2)  # no watermark: the snapshot
    table.maintain()
    assert task_states(run_dag(dag)) == {"sense": "skipped", "load": "skipped"}
    table.append()
    assert ranges_of(run_dag(dag)) == (3, 7)


def test_deferred_dag_run_sleeps_through_an_optimize(
        run_dag, growing_table, ranges_of, commit_once_deferred):
    """dag.test() runs the trigger in line: an OPTIMIZE lands while it waits, then data."""
    table = growing_table(3)
    dag = waiting_dag("delta_data_changes_deferred", table.uri, deferrable=True, timeout=60)
    assert ranges_of(run_dag(dag)) == (2, 2)

    def optimize_then_append() -> None:
        table.optimize()
        time.sleep(2)  # twenty polls see the OPTIMIZE
        table.append()

    with commit_once_deferred(table, optimize_then_append):
        dag_run = run_dag(dag)
    assert ranges_of(dag_run) == (3, 4)


def test_the_option_is_a_switch():
    from airflow_provider_delta.errors import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="s: /t: data_changes_only='yes' is not True "
                                                    "or False"):
        DeltaVersionSensor(task_id="s", table_uri="/t", watermark_store="variable",
                           data_changes_only="yes")


def test_trigger_reads_new_commits_off_the_loop_and_idle_polls_on_it(growing_table):
    """A thread for a poll only when there are new commits to read (the shared polls come
    when the latest version moves)."""
    table = growing_table(3)
    trigger = DeltaVersionTrigger(table_uri=table.uri, start_version=3, poll_interval=0.05,
                                  fire_once=True, data_changes_only=True)
    on_loop = []
    range_of = trigger._range_of

    def spy(found, probe, start_version):
        on_loop.append((threading.current_thread() is threading.main_thread(), found.latest))
        return range_of(found, probe, start_version)

    trigger._range_of = spy
    payload = first_event_after(trigger, table.maintain, table.append)
    assert (payload["start_version"], payload["end_version"]) == (3, 7)
    threads = [loop for loop, latest in on_loop if latest is not None and latest >= 3]
    assert not threads[0] and not threads[-1]  # the maintenance's and the append's commits
    # Nothing new to read: no thread. Idle polls do not even wake it: its table's poller
    # starts from what the trigger's first check found.
    assert all(loop for loop, latest in on_loop if latest == 2) and on_loop[0][1] != 2
