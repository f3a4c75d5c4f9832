"""Loads by Airflow's time: each DAG run loads the versions committed in its data interval.

A source with commits spread over six hours (one exactly on an hour, one whose file is
older than its predecessor's, an hour without commits), timed by commit file times, or by
in-commit timestamps with file times that must not count. An hourly DAG with
``range_from="data_interval"`` runs through ``dag.test()`` once per interval (its data interval
is the hour before the logical date): a catch-up in order, a backfill of earlier hours after
later ones, re-runs. Every run loads exactly its interval's versions; the union of the
intervals is the table, each row once.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from airflow.sdk import DAG, DeltaDataIntervalTimetable
from deltalake import DeltaTable

from airflow_provider_delta.errors import IntervalNotOverError, InvalidParameterError, MergeOrderError
from airflow_provider_delta.operators import DeltaIncrementalOperator, time_range

from .conftest import append_rows, connect_connection, delta_rows

pytestmark = pytest.mark.slow

H0 = datetime(2024, 5, 1, tzinfo=timezone.utc)
# Scheduled runs and backfills of it have data intervals (on Airflow 3 a bare timedelta does
# not give them one).
HOURLY = DeltaDataIntervalTimetable(timedelta(hours=1))
MINUTE = timedelta(minutes=1)
# Commit times: v2 exactly on 01:00, v4 filed before v3 (so it counts 1 ms after v3), no commit
# from 02:00 to 03:59, v5 one ms before 04:00 and v6 on it.
COMMITS = [H0 + 10 * MINUTE, H0 + 40 * MINUTE, H0 + 60 * MINUTE, H0 + 90 * MINUTE,
           H0 + 80 * MINUTE, H0 + timedelta(hours=4, milliseconds=-1), H0 + 240 * MINUTE,
           H0 + 315 * MINUTE]
# The versions each hour [H0 + k h, H0 + (k+1) h) holds.
HOURS = [(0, 1), (2, 4), None, (5, 5), (6, 6), (7, 7)]
ICT_COMMITS = [*COMMITS[:4], COMMITS[3] + timedelta(milliseconds=1), *COMMITS[5:]]


def _millis(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def file_time_source(path: Path) -> str:
    for version in range(len(COMMITS)):
        append_rows(str(path), [10 * version, 10 * version + 1])
    for version, moment in enumerate(COMMITS):
        os.utime(path / "_delta_log" / f"{version:020d}.json", ns=(_millis(moment) * 10**6,) * 2)
    return str(path)


def ict_source(path: Path) -> str:
    """The same commits, timed by in-commit timestamps from version 0 (as a table created with
    ``delta.enableInCommitTimestamps``): ``commitInfo`` first with ``inCommitTimestamp``, the
    feature in the protocol. The file times are all "now", which lies in no interval."""
    for version in range(len(COMMITS)):
        append_rows(str(path), [10 * version, 10 * version + 1])
    for version, moment in enumerate(ICT_COMMITS):
        commit = path / "_delta_log" / f"{version:020d}.json"
        actions = [json.loads(line) for line in commit.read_text().splitlines() if line.strip()]
        others = [a for a in actions if "commitInfo" not in a]
        for action in others:
            if "protocol" in action:
                action["protocol"] = {"minReaderVersion": 1, "minWriterVersion": 7,
                                      "writerFeatures": ["inCommitTimestamp"]}
            if "metaData" in action:
                action["metaData"]["configuration"] = {"delta.enableInCommitTimestamps": "true"}
        info = {"commitInfo": {"inCommitTimestamp": _millis(moment), "operation": "WRITE"}}
        commit.write_text("\n".join(json.dumps(a) for a in [info, *others]) + "\n")
    return str(path)


@pytest.fixture
def connect_transport(connect_server, monkeypatch):
    """Spark Connect: one server for the many runs of these tests."""
    return {"conn_id": connect_connection(monkeypatch, connect_server.port)}


def hourly_dag(dag_id: str, source: str, target: str, transport: dict) -> DAG:
    with DAG(dag_id, schedule=HOURLY, start_date=H0, catchup=True) as dag:
        DeltaIncrementalOperator(task_id="load", table_uri=source, target=target,
                                 range_from="data_interval", **transport)
    return dag


@pytest.fixture
def run_hour(register_dag, xcom_value, task_states):
    """``run_hour(dag, k)``: run the DAG for the hour [H0 + k h, H0 + (k+1) h) with dag.test()
    (its data interval is the hour before the logical date); the load's XCom."""

    def run(dag: DAG, hour: int) -> dict:
        register_dag(dag)
        dag_run = dag.test(logical_date=H0 + timedelta(hours=hour + 1))
        assert (dag_run.data_interval_start, dag_run.data_interval_end) == (
            H0 + timedelta(hours=hour), H0 + timedelta(hours=hour + 1))
        assert task_states(dag_run) == {"load": "success"}
        return xcom_value(dag_run, "load")

    return run


def _loaded(result: dict) -> tuple[int, int] | None:
    if result["start_version"] is None:
        return None
    return result["start_version"], result["end_version"]


@pytest.mark.parametrize("make_source", [file_time_source, ict_source], ids=["file-times", "ict"])
def test_catch_up_loads_each_hour_exactly(make_source, connect_transport, run_hour, tmp_path):
    """Six missed hourly runs caught up in order: each loads its hour's versions."""
    source = make_source(tmp_path / "source")
    target = str(tmp_path / "target")
    dag = hourly_dag("hourly_catch_up", source, target, connect_transport)
    loaded = [_loaded(run_hour(dag, hour)) for hour in range(6)]
    assert loaded == HOURS
    assert delta_rows(target) == delta_rows(source)  # each row once
    assert not [row for row, count in delta_rows(target).items() if count > 1]


def test_backfill_out_of_order_and_re_runs(connect_transport, run_hour, tmp_path):
    """The later hours first, then a backfill of the first three, then re-runs of a loaded
    hour and of the empty one: each version is loaded once."""
    source = file_time_source(tmp_path / "source")
    target = str(tmp_path / "target")
    dag = hourly_dag("hourly_backfill", source, target, connect_transport)
    later = [_loaded(run_hour(dag, hour)) for hour in (3, 4, 5)]
    backfill = [_loaded(run_hour(dag, hour)) for hour in (0, 1, 2)]
    assert later + backfill == HOURS[3:] + HOURS[:3]
    assert delta_rows(target) == delta_rows(source)
    rerun = run_hour(dag, 1)
    assert (rerun["start_version"], rerun["end_version"], rerun["rows"]) == (2, 4, None)
    assert _loaded(run_hour(dag, 2)) is None
    assert delta_rows(target) == delta_rows(source)
    assert sum(Counter(delta_rows(target)).values()) == 2 * len(COMMITS)


def test_interval_not_over_is_refused(tmp_path):
    source = file_time_source(tmp_path / "source")
    now = datetime.now(timezone.utc)
    load = DeltaIncrementalOperator(
        task_id="load", table_uri=source, target=str(tmp_path / "target"),
        start_timestamp=now - timedelta(hours=1), end_timestamp=now + timedelta(hours=1))
    with pytest.raises(IntervalNotOverError, match=r"newest commit, version 7, is at "
                                                   r"2024-05-01T05:15:00\+00:00"):
        time_range.interval_versions(load, *time_range.interval(load))


def test_time_range_parameters_are_checked():
    common = {"task_id": "load", "table_uri": "/tmp/source", "target": "/tmp/target"}
    cases = [
        ({"start_timestamp": "2024-05-01T00:00:00", "end_timestamp": "2024-05-01T01:00:00Z"},
         "load: /tmp/source: start_timestamp='2024-05-01T00:00:00' has no time zone (naive); "),
        ({"start_timestamp": H0, "end_timestamp": H0},
         "start_timestamp=datetime.datetime(2024, 5, 1, 0, 0, tzinfo=datetime.timezone.utc) "
         "is not before end_timestamp"),
        ({"start_timestamp": H0, "end_timestamp": "2024-05-01T01:00:00Z", "start_version": 3},
         "start_version=3 is given with a time range"),
        ({"range_from": "data_interval", "sensor_task_id": "wait"},
         "sensor_task_id='wait' is given with a time range"),
        ({"range_from": "data_interval", "move_watermark": True},
         "move_watermark=True is given with a time range"),
        ({"range_from": "logical_date"}, "range_from='logical_date' is not a range source"),
        ({"range_from": "data_interval", "end_timestamp": H0}, "is given with start_timestamp"),
        ({"end_timestamp": H0}, "end_timestamp=datetime.datetime(2024, 5, 1, 0, 0, "
                                "tzinfo=datetime.timezone.utc) needs start_timestamp too"),
        ({"asset_partition": "interval"}, "asset_partition='interval' needs a time range"),
        ({"range_from": "data_interval", "interval_grace": 60},
         "load: /tmp/source: interval_grace=60 is not a duration >= 0; give a timedelta"),
        ({"range_from": "data_interval", "interval_grace": timedelta(minutes=-5)},
         "is not a duration >= 0"),
        ({"range_from": "data_interval", "initial": "latest"},
         "initial='latest' is given with a time range"),
        ({"range_from": "data_interval", "watermark_key": "wm"},
         "watermark_key='wm' is given with a time range"),
        ({"range_from": "data_interval", "reset_if_ahead": True},
         "reset_if_ahead=True is given with a time range"),
        ({"range_from": "data_interval", "sink": None, "target": None, "sql": "SELECT 1"},
         "sink=None is given with a time range"),
        ({"interval_grace": timedelta(minutes=5)},
         "interval_grace=datetime.timedelta(seconds=300) is given without a time range"),
    ]
    for keywords, message in cases:
        with pytest.raises(InvalidParameterError) as caught:
            DeltaIncrementalOperator(**{**common, **keywords})
        assert message in str(caught.value), keywords


def test_asset_events_carry_the_partition_key(connect_transport, register_dag, task_states,
                                              tmp_path):
    """Airflow >= 3.3: the target's asset event has the interval's start, or the versions
    loaded, as its partition key."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    source = file_time_source(tmp_path / "source")
    targets = {kind: str(tmp_path / kind) for kind in ("interval", "versions")}
    with DAG("hourly_partitions", schedule=HOURLY, start_date=H0) as dag:
        for kind, target in targets.items():
            DeltaIncrementalOperator(task_id=kind, table_uri=source, target=target,
                                     range_from="data_interval", asset_partition=kind,
                                     **connect_transport)
    register_dag(dag)
    dag_run = dag.test(logical_date=H0 + timedelta(hours=2))  # the hour from 01:00
    assert task_states(dag_run) == {"interval": "success", "versions": "success"}
    with create_session() as session:
        keys = dict(session.execute(
            select(AssetModel.uri, AssetEvent.partition_key)
            .join(AssetModel, AssetModel.id == AssetEvent.asset_id)
            .where(AssetEvent.source_run_id == dag_run.run_id)).all())
    assert keys == {f"file://{targets['interval']}": "2024-05-01T01:00:00",
                    f"file://{targets['versions']}": "v2-v4"}


def test_change_feed_merged_by_hour(connect_transport, run_hour, tmp_path):
    """Updates, deletes and a merge spread over four hours, merged by key hour after hour:
    the target equals the source; a re-run merges nothing; an hour before what a merge target
    holds is refused (its older values would overwrite newer rows)."""
    from tests.spark.test_change_feed import CDF_ON, write_changes

    source = str(tmp_path / "source")
    write_changes(source, CDF_ON)  # v0 create .. v5 update
    for version, minutes in enumerate([10, 50, 60, 80, 150, 180]):
        moment = H0 + minutes * MINUTE
        os.utime(Path(source) / "_delta_log" / f"{version:020d}.json",
                 ns=(_millis(moment) * 10**6,) * 2)

    def merge_dag(dag_id: str, target: str) -> DAG:
        with DAG(dag_id, schedule=HOURLY, start_date=H0) as dag:
            DeltaIncrementalOperator(
                task_id="load", table_uri=source, target=target, range_from="data_interval",
                change_feed=True, sink="delta-merge", merge_keys=["id"], **connect_transport)
        return dag

    target = str(tmp_path / "target")
    dag = merge_dag("hourly_merge", target)
    assert [_loaded(run_hour(dag, hour)) for hour in range(4)] == [(0, 1), (2, 3), (4, 4),
                                                                    (5, 5)]
    assert delta_rows(target) == delta_rows(source)
    version = DeltaTable(target).version()
    assert _loaded(run_hour(dag, 1)) == (2, 3)  # a re-run: held already, nothing merged
    assert DeltaTable(target).version() == version

    late = merge_dag("hourly_merge_late", str(tmp_path / "late"))
    run_hour(late, 2)
    with pytest.raises(MergeOrderError, match=r"holds versions 0\.\.1, but the delta-merge "
                                              r"target .* holds the changes up to version 4"):
        time_range.refuse_merge_out_of_order(late.get_task("load"), 0, 1, "[00:00, 01:00)")
