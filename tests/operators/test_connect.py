"""Spark Connect transport: a session per task, kill, a server that is down, secrets, refusals.

The end-to-end loads themselves run over both transports in test_incremental.py,
test_backfill_time_travel.py and test_faults.py (the ``spark_transport`` fixture).
"""

from __future__ import annotations

import os
import threading
from collections import Counter
import time

import pyarrow as pa
import pytest
from airflow.sdk import DAG
from deltalake import DeltaTable, write_deltalake

from airflow_provider_delta.errors import SparkConnectError, SparkConnectUnavailableError
from airflow_provider_delta.job.connect import ConnectJob
from airflow_provider_delta.operators import DeltaIncrementalOperator, DeltaTimeTravelOperator
from airflow_provider_delta.operators.transport import connect_job

from .conftest import (
    CONNECT_SERVER_TIME_ZONE,
    CONNECT_TOKEN,
    append_rows,
    connect_connection,
    delta_rows,
    recorded,
    watermark,
)
from .transforms import STARTED_MARKER_ENV

pytestmark = pytest.mark.slow


@pytest.fixture
def source(tmp_path):
    path = str(tmp_path / "source")
    append_rows(path, [0, 1, 2])
    append_rows(path, [3, 4])
    return path


def _remote_session(port: int, session_id: str | None = None):
    """A Spark Connect session of the test itself (a new one, or attached to ``session_id``)."""
    from pyspark.sql.connect.session import SparkSession

    attach = f";session_id={session_id}" if session_id else ""
    return SparkSession.builder.remote(
        f"sc://localhost:{port}/;token={CONNECT_TOKEN}{attach}").create()


def test_each_task_runs_on_its_own_session_with_its_own_confs(
        connect_server, monkeypatch, source, run_dag, task_states, xcom_value, tmp_path, caplog):
    conn_id = connect_connection(monkeypatch, connect_server.port)
    targets = {task: str(tmp_path / task) for task in ("first", "second")}
    with DAG("connect_sessions", schedule=None) as dag:
        common = {"table_uri": source, "version": 1, "conn_id": conn_id,
                  "transform": "operators.transforms:record_session"}
        first = DeltaTimeTravelOperator(task_id="first", target=targets["first"],
                                        conf={"spark.sql.shuffle.partitions": "3"}, **common)
        second = DeltaTimeTravelOperator(task_id="second", target=targets["second"], **common)
        first >> second

    run = run_dag(dag)

    assert task_states(run) == {"first": "success", "second": "success"}
    [(first_session, first_zone, first_partitions)] = delta_rows(targets["first"])
    [(second_session, second_zone, second_partitions)] = delta_rows(targets["second"])
    assert first_session != second_session
    # Each task sets UTC on its session; the server's default zone is another one.
    assert first_zone == second_zone == "UTC"
    # The first task's conf stayed with its session: the second one sees the server's default.
    assert (first_partitions, second_partitions) == ("3", "2")
    fresh = _remote_session(connect_server.port)
    try:
        assert fresh.conf.get("spark.sql.session.timeZone") == CONNECT_SERVER_TIME_ZONE
    finally:
        fresh.stop()
    for session_id in (first_session, second_session):
        assert _is_released(connect_server.port, session_id)

    logs = caplog.text
    assert f"Spark Connect session {first_session}" in logs  # the task logs were captured
    assert CONNECT_TOKEN not in logs
    assert CONNECT_TOKEN not in str(_rendered_fields(run)) + str(xcom_value(run, "first"))


def _is_released(port: int, session_id: str) -> bool:
    """Whether the server refuses to attach to ``session_id`` because it was closed."""
    attached = _remote_session(port, session_id)
    attached.release_session_on_close = False  # only look; a failed attach has nothing to release
    try:
        attached.range(1).collect()
    except Exception as error:  # noqa: BLE001 - the error text is what is checked
        return "SESSION_CLOSED" in str(error)
    finally:
        attached.stop()
    return False


def _rendered_fields(dag_run) -> list:
    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        query = select(RenderedTaskInstanceFields.rendered_fields).where(
            RenderedTaskInstanceFields.run_id == dag_run.run_id)
        fields = session.scalars(query).all()
    assert fields, "no rendered fields were stored"
    return fields


def test_a_server_that_is_down_fails_naming_the_connection_then_a_retry_loads_once(
        connect_server, monkeypatch, source, run_dag, task_states, tmp_path):
    conn_id = connect_connection(monkeypatch, connect_server.port)
    target = str(tmp_path / "target")
    with DAG("connect_down", schedule=None) as dag:
        DeltaIncrementalOperator(task_id="load", table_uri=source, target=target,
                                 conn_id=conn_id, watermark_store="variable",
                                 watermark_key="wm_connect_down", initial="earliest")
    snapshot = DeltaTimeTravelOperator(task_id="snapshot", table_uri=source, target=target,
                                       version=1, conn_id=conn_id)

    connect_server.stop()
    try:
        started = time.monotonic()
        with pytest.raises(SparkConnectUnavailableError) as caught:
            snapshot.execute({"run_id": "manual__server_down"})
        assert time.monotonic() - started < 30, "a server that is down fails the task in seconds"
        run = run_dag(dag)
    finally:
        connect_server.start()

    assert caught.value.permanent is False
    assert str(caught.value).startswith(
        f"{source}: the snapshot at version 1 not loaded: the Spark Connect server of connection "
        f"{conn_id!r} (localhost:{connect_server.port}) cannot be reached (UNAVAILABLE)")
    assert task_states(run) == {"load": "failed"}
    assert not os.path.exists(target) and watermark("wm_connect_down") is None

    for _ in range(2):  # the retry loads everything; one more run finds nothing new
        run = run_dag(dag)
        assert task_states(run) == {"load": "success"}
        assert delta_rows(target) == delta_rows(source)
    assert watermark("wm_connect_down") == {source: recorded(source, 1)}


def test_what_connect_cannot_honour_is_refused_by_name(connect_server, monkeypatch, source,
                                                      tmp_path):
    target = str(tmp_path / "target")
    conn_id = connect_connection(monkeypatch, connect_server.port)
    wrong = connect_connection(monkeypatch, connect_server.port, "spark_connect_wrong_token",
                               token="not-the-token")
    refusals = [
        ({"conn_id": conn_id, "py_files": "deps.zip", "archives": "env.tar.gz",
          "env_vars": {"A": "1"}},
         "sets py_files, archives, env_vars, which only spark-submit uses"),
        ({"conn_id": conn_id, "conf": {"spark.driver.memory": "2g"}},
         "conf 'spark.driver.memory' cannot be set on a Spark Connect session"),
        ({"conn_id": wrong}, f"connection {wrong!r} .* refused the client \\(UNAUTHENTICATED\\); "
                             "fix the connection's token"),
    ]
    for kwargs, message in refusals:
        operator = DeltaTimeTravelOperator(task_id="refused", table_uri=source, target=target,
                                           version=1, **kwargs)
        with pytest.raises(SparkConnectError, match=message) as caught:
            operator.execute({"run_id": "manual__refused"})
        assert source in str(caught.value) and "not-the-token" not in str(caught.value)
    assert not os.path.exists(target)


def test_a_small_load_sets_its_confs_in_one_request(connect_server, monkeypatch, source,
                                                    run_dag, task_states, tmp_path):
    """Each Config request is a round trip of the task's own beside Spark's work: the task's
    and the job's confs go in one, and a plan of a few files reads or sets no listing conf."""
    from pyspark.sql.connect.client.core import SparkConnectClient

    requests = []
    config = SparkConnectClient.config

    def counted(client, operation):
        requests.append(operation.WhichOneof("op_type"))
        return config(client, operation)

    monkeypatch.setattr(SparkConnectClient, "config", counted)
    target = str(tmp_path / "target")
    with DAG("connect_round_trips", schedule=None) as dag:
        DeltaIncrementalOperator(
            task_id="small", table_uri=source, start_version=1, end_version=1, target=target,
            conn_id=connect_connection(monkeypatch, connect_server.port),
            conf={"spark.sql.shuffle.partitions": "3"})

    assert task_states(run_dag(dag)) == {"small": "success"}
    assert delta_rows(target) == Counter({(3, None): 1, (4, "n4"): 1})
    # one set; pyspark's own client reads its plan compression settings once ("get")
    assert requests.count("set") == 1 and len(requests) <= 2, requests


def test_only_a_spark_connect_connection_takes_the_connect_path(monkeypatch, spark_local_conn):
    assert isinstance(connect_job(connect_connection(monkeypatch, 15002)), ConnectJob)
    assert connect_job(spark_local_conn) is None
    # An unknown conn_id is left to the spark-submit path, which names it in its error.
    assert connect_job("no_such_connection") is None


def test_on_kill_interrupts_the_running_job(connect_server, monkeypatch, source, tmp_path):
    target, running = tmp_path / "target", tmp_path / "running"
    monkeypatch.setenv(STARTED_MARKER_ENV, str(running))
    operator = DeltaTimeTravelOperator(
        task_id="killed", table_uri=source, target=str(target), version=1,
        transform="operators.transforms:run_for_hours",
        conn_id=connect_connection(monkeypatch, connect_server.port))
    failure = []

    def execute():
        try:
            operator.execute({"run_id": "manual__killed"})
        except Exception as error:  # noqa: BLE001 - kept for the assertions below
            failure.append(error)

    task = threading.Thread(target=execute, daemon=True)
    task.start()
    try:
        # Killed once its hour-long rows run on the server: a kill before the job's Spark
        # write exists interrupts nothing, and the write then runs for the hour.
        deadline = time.monotonic() + 300
        while not running.exists():
            assert task.is_alive(), f"the job ended before it was killed: {failure}"
            assert time.monotonic() < deadline, "the job's Spark write did not start"
            time.sleep(0.2)
        killed_at = time.monotonic()
        operator.on_kill()
        task.join(timeout=60)
        assert not task.is_alive() and time.monotonic() - killed_at < 30
    finally:
        # The job sleeps for an hour on the server the other tests share: never leave it
        # (until its write starts, a kill finds nothing to interrupt).
        deadline = time.monotonic() + 300
        while task.is_alive() and time.monotonic() < deadline:
            operator.on_kill()
            task.join(timeout=5)
    assert failure and "OPERATION_CANCELED" in str(failure[0])
    assert not (target / "_delta_log").exists()
    # The cancelled tasks are gone: the server runs the next job at once.
    check = _remote_session(connect_server.port)
    try:
        started = time.monotonic()
        assert check.range(100).count() == 100 and time.monotonic() - started < 30
    finally:
        check.stop()


def test_a_partitioned_source_feeds_its_partition_values_over_connect(
        connect_server, monkeypatch, run_dag, task_states, tmp_path):
    # Connect's scan lists paths, so each row finds its file's partition values by path there
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    rows = pa.table({"id": pa.array(range(12), pa.int64()), "p": [f"p{i % 4}" for i in range(12)]})
    write_deltalake(source, rows, partition_by=["p"])
    with DAG("connect_partitioned_feed", schedule=None) as dag:
        DeltaIncrementalOperator(
            task_id="load", table_uri=source, target=target,
            conn_id=connect_connection(monkeypatch, connect_server.port),
            watermark_store="variable", watermark_key="wm_connect_partitioned",
            initial="earliest", change_feed=True, sink="delta-merge", merge_keys=["id"])
    assert task_states(run_dag(dag)) == {"load": "success"}
    assert delta_rows(target) == delta_rows(source)

    write_deltalake(source, pa.table({"id": pa.array([20, 21], pa.int64()), "p": ["p1", "p9"]}),
                    mode="append")
    table = DeltaTable(source)
    table.update(updates={"id": "id + 100"}, predicate="p = 'p2'")  # copy-on-write rewrite
    table.delete("id = 3")
    assert task_states(run_dag(dag)) == {"load": "success"}
    assert delta_rows(target) == delta_rows(source)
