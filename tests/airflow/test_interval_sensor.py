"""DeltaIntervalSensor and DeltaIntervalTrigger: wait until a time interval is complete.

Tables are written with deltalake, their commit file times set with ``os.utime``; the table
with in-commit timestamps carries them as Delta writes them (see tests/core/test_commit_times).
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta, timezone

import pytest
from airflow.sdk import (
    DAG, DeltaDataIntervalTimetable, PokeReturnValue, get_current_context, task,
)

from airflow_provider_delta.errors import InvalidParameterError
from airflow_provider_delta.sensors import DeltaIntervalSensor
from airflow_provider_delta.triggers import DeltaIntervalTrigger
from tests.core.test_commit_times import HOUR_MS, T0_MS, file_time_table, ict_table

T0 = datetime.fromtimestamp(T0_MS / 1000, timezone.utc)  # 2026-01-01T00:00:00Z
NEVER = timedelta(days=100_000)  # a grace that does not pass during the tests


def poke(table_uri: str, end: datetime | str, grace: timedelta = NEVER) -> dict | None:
    sensor = DeltaIntervalSensor(task_id="complete", table_uri=table_uri, interval_end=end,
                                 interval_grace=grace)
    result = sensor.poke({})
    return result.xcom_value if isinstance(result, PokeReturnValue) else None


def test_a_commit_at_or_after_the_end_completes_the_interval(tmp_path):
    uri = file_time_table(tmp_path, [T0_MS, T0_MS + HOUR_MS, T0_MS + 2 * HOUR_MS])
    found = poke(uri, T0 + timedelta(hours=1, minutes=30))
    assert found == {"table_uri": uri, "interval_end": "2026-01-01T01:30:00+00:00",
                     "complete_by": "commit", "newest_version": 2,
                     "newest_commit_timestamp": T0_MS + 2 * HOUR_MS}
    assert poke(uri, (T0 + timedelta(hours=2)).isoformat())["complete_by"] == "commit"  # on it
    assert poke(uri, T0 + timedelta(hours=2, milliseconds=1)) is None  # just after the newest


def test_a_quiet_table_completes_once_the_grace_passed(tmp_path):
    uri = file_time_table(tmp_path, [T0_MS, T0_MS + HOUR_MS])
    end = datetime.now(timezone.utc) - timedelta(seconds=30)
    assert poke(uri, end, grace=timedelta(hours=1)) is None
    found = poke(uri, end, grace=timedelta(seconds=10))
    assert (found["complete_by"], found["newest_version"]) == ("grace", 1)


def test_in_commit_timestamps_decide_not_file_times(tmp_path):
    """The ICT commits' files are dated far later than their ICTs: those dates must not count."""
    uri = ict_table(tmp_path, [T0_MS], [T0_MS + HOUR_MS, T0_MS + 2 * HOUR_MS])
    assert poke(uri, T0 + timedelta(hours=3)) is None
    found = poke(uri, T0 + timedelta(hours=2))
    assert (found["complete_by"], found["newest_commit_timestamp"]) == ("commit",
                                                                       T0_MS + 2 * HOUR_MS)


def test_a_new_commit_completes_an_interval_that_just_ended(growing_table):
    table = growing_table(2)
    end = datetime.now(timezone.utc)
    time.sleep(0.01)
    assert poke(table.uri, end) is None
    table.append()
    found = poke(table.uri, end)
    assert (found["complete_by"], found["newest_version"]) == ("commit", 2)


def test_one_sensor_keeps_its_commit_clock_while_the_table_is_idle(growing_table, monkeypatch):
    """Pokes of one sensor build the table's commit clock (a replay, and the commits' file
    times listed) once, then again only when a new version comes."""
    from airflow_provider_delta.core import interval_end

    built: list[int] = []
    clock_class = interval_end.CommitClock

    def counted(*args, **kwargs):
        clock = clock_class(*args, **kwargs)
        built.append(clock.newest)
        return clock

    monkeypatch.setattr(interval_end, "CommitClock", counted)
    table = growing_table(2)
    end = datetime.now(timezone.utc)
    time.sleep(0.01)
    sensor = DeltaIntervalSensor(task_id="complete", table_uri=table.uri, interval_end=end,
                                 interval_grace=NEVER)
    assert [sensor.poke({}) for _ in range(3)] == [False] * 3
    assert built == [1]
    table.append()
    found = sensor.poke({}).xcom_value
    assert (found["complete_by"], found["newest_version"]) == ("commit", 2)
    assert built == [1, 2]


def test_bad_parameters_are_refused(growing_table):
    table = growing_table(1)
    with pytest.raises(InvalidParameterError, match="complete: .*: interval_grace=.*days=-1.* is not a "
                                                    "duration >= 0"):
        DeltaIntervalSensor(task_id="complete", table_uri=table.uri,
                            interval_grace=timedelta(days=-1))
    with pytest.raises(InvalidParameterError, match="interval_end='None' is not a date and time; "
                                                    "run it in a DAG run with a data interval"):
        poke(table.uri, "None")
    with pytest.raises(InvalidParameterError, match="has no time zone"):
        poke(table.uri, "2026-01-01T00:00:00")


def test_trigger_fires_when_the_grace_ends(tmp_path):
    """A quiet table: the trigger wakes at the grace's end, not a poll interval later."""
    uri = file_time_table(tmp_path, [T0_MS])
    end = datetime.now(timezone.utc)
    trigger = DeltaIntervalTrigger(table_uri=uri, interval_end=end.isoformat(), grace_seconds=1.0,
                                   poll_interval=60)
    started = time.monotonic()
    payload = asyncio.run(asyncio.wait_for(anext(trigger.run()), 30)).payload
    assert (payload["status"], payload["complete_by"]) == ("success", "grace")
    assert time.monotonic() - started < 10


def test_trigger_timeout_and_serialization(tmp_path):
    uri = file_time_table(tmp_path, [T0_MS])
    trigger = DeltaIntervalTrigger(table_uri=uri, interval_end=(T0 + timedelta(hours=1)).isoformat(),
                                   grace_seconds=NEVER.total_seconds(), poll_interval=0.05,
                                   timeout_at=time.time() + 0.3)
    classpath, kwargs = trigger.serialize()
    assert DeltaIntervalTrigger(**kwargs).serialize() == (classpath, kwargs)
    payload = asyncio.run(asyncio.wait_for(anext(trigger.run()), 30)).payload
    assert payload["status"] == "timeout" and "2026-01-01T01:00:00+00:00" in payload["message"]


def interval_dag(dag_id: str, table_uri: str, **sensor_kwargs) -> DAG:
    """An hourly DAG: ``complete`` (its interval_end is the default template) >> ``load``,
    which stands in for the time-range load and returns the sensor's XCom."""
    with DAG(dag_id, schedule=DeltaDataIntervalTimetable(timedelta(hours=1)),
             start_date=datetime(2024, 1, 1), catchup=False) as dag:
        complete = DeltaIntervalSensor(task_id="complete", table_uri=table_uri,
                                       **{"poke_interval": 0.1, "timeout": 60, **sensor_kwargs})

        @task
        def load() -> dict:
            return get_current_context()["ti"].xcom_pull(task_ids="complete")

        complete >> load()
    return dag


def run_interval(register_dag, dag: DAG, end: datetime):
    """One run of ``dag`` whose data interval ends at ``end``."""
    register_dag(dag)
    dag_run = dag.test(logical_date=end)
    assert dag_run.data_interval_end == end
    return dag_run


def test_dag_run_completes_on_a_later_commit_and_on_the_grace(register_dag, xcom_value, tmp_path):
    uri = file_time_table(tmp_path, [T0_MS, T0_MS + HOUR_MS, T0_MS + 2 * HOUR_MS])
    dag = interval_dag("delta_interval_commit", uri, interval_grace=timedelta(hours=1))
    dag_run = run_interval(register_dag, dag, T0 + timedelta(hours=2))
    found = xcom_value(dag_run, "load")
    assert (found["interval_end"], found["complete_by"]) == ("2026-01-01T02:00:00+00:00", "commit")
    dag_run = run_interval(register_dag, dag, T0 + timedelta(hours=4))
    assert xcom_value(dag_run, "load")["complete_by"] == "grace"  # three hours after it


def test_deferred_dag_run_waits_for_a_commit(register_dag, xcom_value, growing_table,
                                             commit_once_deferred):
    table = growing_table(2)
    dag = interval_dag("delta_interval_deferred", table.uri, deferrable=True,
                       interval_grace=timedelta(hours=1))
    time.sleep(1)
    end = datetime.now(timezone.utc).replace(microsecond=0)  # after the table's commits
    with commit_once_deferred(table):
        dag_run = run_interval(register_dag, dag, end)
    found = xcom_value(dag_run, "load")
    assert (found["complete_by"], found["newest_version"]) == ("commit", 2)
