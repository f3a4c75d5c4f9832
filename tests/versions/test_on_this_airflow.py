"""What must hold on every supported Airflow (2.11 to 3.3): `bash scripts/dev.sh test-airflow X`.

The package imports whole; the newer-only features refuse by name on older versions; the
connection type, its form and its Test button; a watermark Variable Airflow 3.0 wrote still
reads; and the DAG a user writes -- sensor with a Variable watermark, then an incremental load
into a Delta target through spark-submit -- run twice with ``dag.test()`` in fresh processes
from the installed wheel: first the snapshot, then only the new version. Where Airflow's
``dag.test()`` hands deferred tasks to a running triggerer (Airflow 2), the second run's sensor
defers to a real ``airflow triggerer`` process.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import re
import shutil
import subprocess
import sys
import threading
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder, write_deltalake

import airflow_provider_delta
from airflow_provider_delta.compat import (
    AIRFLOW_VERSION,
    airflow_at_least,
    variable_key,
    variable_key_of_airflow_3_0,
)
from airflow_provider_delta.errors import AirflowVersionError
from tests.processes import stop, wait_for

HERE = Path(__file__).resolve().parent


# The "Delta tables" page's API: imported only by its plugin, and only on Airflow >= 3.1.
UI_ONLY = {"airflow_provider_delta.plugins.delta_tables_api"}


def test_every_module_imports():
    failed = {}
    for module in pkgutil.walk_packages(airflow_provider_delta.__path__, "airflow_provider_delta."):
        if module.name in UI_ONLY and not airflow_at_least("3.1.0"):
            continue
        try:
            importlib.import_module(module.name)
        except Exception as err:  # noqa: BLE001 - each failure is reported by name
            failed[module.name] = f"{type(err).__name__}: {err}"
    assert failed == {}


def test_asset_watcher_trigger_needs_airflow_3(tmp_path):
    from airflow_provider_delta.triggers import DeltaVersionTrigger

    watch = lambda: DeltaVersionTrigger(table_uri=str(tmp_path), poll_interval=1)  # noqa: E731
    if airflow_at_least("3.0.0"):
        assert watch().fire_once is False
        return
    with pytest.raises(AirflowVersionError, match=rf"{tmp_path}: DeltaVersionTrigger as an "
                       rf"AssetWatcher event trigger needs Airflow >= 3\.0\.0, but this is "
                       rf"Airflow {AIRFLOW_VERSION}\. Upgrade Airflow, or poll with "
                       "DeltaVersionSensor"):
        watch()
    # The deferred sensor's own trigger is what Airflow 2 runs.
    assert DeltaVersionTrigger(table_uri=str(tmp_path), fire_once=True, start_version=0).fire_once


@pytest.mark.parametrize("operator", ["sensor", "load"])
def test_asset_state_watermarks_need_airflow_3_3_at_dag_parse(operator, tmp_path):
    from airflow.providers.common.compat.sdk import DAG

    from airflow_provider_delta.operators import DeltaIncrementalOperator
    from airflow_provider_delta.sensors import DeltaVersionSensor

    def parse() -> None:
        with DAG("asset_state_dag", schedule=None, start_date=datetime(2024, 1, 1)):
            if operator == "sensor":
                DeltaVersionSensor(task_id="wait", table_uri=str(tmp_path),
                                   watermark_store="asset_state")
            else:
                DeltaIncrementalOperator(task_id="load", table_uri=str(tmp_path),
                                         target=str(tmp_path / "t"), watermark_store="asset_state")

    if airflow_at_least("3.3.2"):
        parse()
        return
    task_id = "wait" if operator == "sensor" else "load"
    with pytest.raises(AirflowVersionError, match=rf"watermark_store='asset_state' \(the asset "
                       rf"state store\) needs Airflow >= 3\.3\.2, but this is Airflow "
                       rf"{AIRFLOW_VERSION}\. Upgrade Airflow, or give {task_id} "
                       "watermark_store='xcom' or 'variable'"):
        parse()


def test_asset_partitions_need_airflow_3_3_at_dag_parse(tmp_path):
    from airflow.providers.common.compat.sdk import DAG

    from airflow_provider_delta.operators import DeltaIncrementalOperator

    def parse() -> None:
        with DAG("asset_partition_dag", schedule=None, start_date=datetime(2024, 1, 1)):
            DeltaIncrementalOperator(task_id="load", table_uri=str(tmp_path),
                                     target=str(tmp_path / "t"), range_from="data_interval",
                                     asset_partition="interval")

    if airflow_at_least("3.3.0"):
        parse()
        return
    with pytest.raises(AirflowVersionError, match=rf"asset_partition= \(asset events with a "
                       rf"partition key\) needs Airflow >= 3\.3\.0, but this is Airflow "
                       rf"{AIRFLOW_VERSION}\. Upgrade Airflow, or leave asset_partition unset"):
        parse()


def test_connection_type_form_and_test_button(tmp_path, airflow_db):
    from airflow.models.connection import Connection
    from airflow.providers_manager import ProvidersManager

    from airflow_provider_delta.hooks import DeltaHook

    manager = ProvidersManager()
    assert manager.hooks["delta"].hook_class_name == f"{DeltaHook.__module__}.DeltaHook"
    # The form comes from DeltaHook.get_connection_form_widgets and get_ui_field_behaviour
    # (Airflow 2; Airflow 3.0 and 3.1 only where Flask-AppBuilder is installed) or from the
    # provider info's conn-fields and ui-field-behaviour (Airflow >= 3.2).
    fields = {name.removeprefix("extra__delta__") for name in manager.connection_form_widgets
              if name.startswith("extra__delta__")}
    if fields or not airflow_at_least("3.0.0") or airflow_at_least("3.2.0"):
        assert fields == CONN_FIELD_NAMES
        assert manager.field_behaviours["delta"]["relabeling"]["host"] == "Endpoint URL"

    write_deltalake(str(tmp_path / "t"), pa.table({"id": [1]}))
    button = Connection(conn_id="tested_delta", conn_type="delta",
                        extra=json.dumps({"location": str(tmp_path / "t")}))
    os.environ["AIRFLOW_CONN_TESTED_DELTA"] = button.get_uri()
    try:
        assert button.test_connection() == (True, f"{tmp_path / 't'}: listed with connection "
                                            "'tested_delta' (type delta): a Delta table (it has "
                                            "a _delta_log).")
    finally:
        os.environ.pop("AIRFLOW_CONN_TESTED_DELTA")


CONN_FIELD_NAMES = {"provider", "region", "session_token", "allow_http", "storage_options",
                    "location"}


def test_form_text_for_storage_options_reads_as_json():
    """Airflow 2's form saves the storage_options field as text; it reads like the object."""
    from airflow.models.connection import Connection

    from airflow_provider_delta.hooks.storage_options import storage_options_from_connection

    def options(storage_options) -> dict:
        return dict(storage_options_from_connection(Connection(
            conn_id="form", conn_type="delta", extra=json.dumps(
                {"provider": "", "storage_options": storage_options}))))

    assert options('{"aws_region": "eu-west-1"}') == options({"aws_region": "eu-west-1"})
    assert options('{"aws_region": "eu-west-1"}')["AWS_REGION"] == "eu-west-1"


def test_variable_watermark_of_airflow_3_0_still_reads(monkeypatch, tmp_path):
    """A watermark Airflow 3.0 stored (each "/" as "|") reads on every version: on 3.0 it is
    the store's own Variable, elsewhere the one an upgrade from 3.0 left."""
    from airflow_provider_delta.watermarks import Watermark, make_watermark_store

    uri = str(tmp_path / "orders")
    # An environment variable is a real Airflow Variable (secrets backend), no task needed.
    name_on_3_0 = variable_key_of_airflow_3_0(f"wm_upgrade:{uri}")
    monkeypatch.setenv(f"AIRFLOW_VAR_{name_on_3_0.upper()}", '{"version": 4, "table_id": "t1"}')
    store = make_watermark_store("variable", key="wm_upgrade", table_uri=uri)
    assert store.read_watermark({}) == Watermark(4, "t1")


# -- the DAG a user writes, run twice in fresh processes from the installed wheel ----------


def rows(uri: str) -> Counter:
    table = QueryBuilder().register("t", DeltaTable(uri)).execute("select * from t").read_all()
    return Counter(zip(*(column.to_pylist() for column in table.columns)))


def append(uri: str, ids: list[int]) -> int:
    write_deltalake(uri, pa.table({"id": pa.array(ids, pa.int64())}), mode="append")
    return DeltaTable(uri).version()


def loaded_ranges(target: str) -> list[str]:
    """The source versions each commit of the target holds, oldest first."""
    return [commit["airflow_provider_delta.source_versions"]
            for commit in reversed(DeltaTable(target).history())
            if "airflow_provider_delta.source_versions" in commit]


def stored_watermark(source: str) -> dict | None:
    from airflow.models import Variable
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        key = variable_key(f"acceptance:{source}")  # "/" as "|" on 3.0 (compat.variable_key)
        row = session.scalar(select(Variable).where(Variable.key == key))
        return None if row is None else json.loads(row.val)


@pytest.fixture
def user_dag(user_env, run_dag_file):
    """``user_dag(dag_id, source, target, deferrable=False)``: run load_twice_dag.py once with
    ``python`` from the DAG folder, as a user would: a fresh process that imports the installed
    wheel. Returns the task states it printed."""

    def run(dag_id: str, source: str, target: str, deferrable: bool = False) -> dict:
        env = {**user_env, "DELTA_DAG_ID": dag_id, "DELTA_SOURCE": source,
               "DELTA_TARGET": target, "DELTA_DEFERRABLE": str(int(deferrable))}
        return run_dag_file(HERE / "load_twice_dag.py", env)

    return run


@pytest.mark.skipif(os.environ.get("DELTA_FROM_WHEEL") != "1",
                    reason="an editable install (dev.sh setup, test-lowest)")
def test_wheel_not_checkout(tmp_path):
    """The DAG runs use the installed wheel: a fresh process outside the checkout imports it
    from site-packages."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    where = subprocess.run([sys.executable, "-c", "import airflow_provider_delta as p; "
                            "print(p.__file__)"], cwd=tmp_path, env=env, capture_output=True,
                           text=True, check=True).stdout.strip()
    assert "site-packages" in where, where


@pytest.mark.slow
def test_snapshot_then_only_the_new_version(user_dag, tmp_path):
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    append(source, [0, 1, 2])
    table_id = DeltaTable(source).metadata().id
    assert append(source, [3, 4]) == 1

    assert user_dag("load_twice", source, target) == {"wait": "success", "load": "success"}
    assert loaded_ranges(target) == ["0..1"]  # the snapshot at version 1
    assert rows(target) == rows(source)
    assert stored_watermark(source) == {"version": 1, "table_id": table_id}

    assert append(source, [5]) == 2
    assert user_dag("load_twice", source, target) == {"wait": "success", "load": "success"}
    assert loaded_ranges(target) == ["0..1", "2..2"]  # only the new version
    assert rows(target) == rows(source)
    assert stored_watermark(source) == {"version": 2, "table_id": table_id}


@pytest.fixture
def triggerer(user_env, tmp_path):
    """A real ``airflow triggerer`` process on the test's DB, up and heartbeating; stopped by
    its own pid. Yields its log file."""
    log = tmp_path / "triggerer.log"
    with log.open("wb") as out:
        process = subprocess.Popen([str(Path(sys.executable).with_name("airflow")), "triggerer",
                                    "--capacity", "5"], stdout=out, stderr=subprocess.STDOUT,
                                   env=user_env)
    try:
        wait_for(lambda: triggerer_heartbeats(process.pid), 300, "the triggerer to heartbeat")
        yield log
    finally:
        stop(process, timeout=60)


def triggerer_heartbeats(pid: int) -> bool:
    from airflow.jobs.job import Job
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return session.scalar(select(Job.id).where(
            Job.job_type == "TriggererJob", Job.state == "running", Job.latest_heartbeat.isnot(None),
        )) is not None and Path(f"/proc/{pid}").exists()


def sensor_deferred(dag_id: str) -> bool:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return session.scalar(select(TaskInstance.task_id).where(
            TaskInstance.dag_id == dag_id, TaskInstance.task_id == "wait",
            TaskInstance.state == "deferred")) is not None


@pytest.mark.slow
@pytest.mark.skipif(airflow_at_least("3.0.0"), reason="Airflow 3's dag.test() runs a deferred "
                    "task's trigger in line, never in a triggerer process")
def test_deferred_sensor_waits_in_a_real_triggerer(user_dag, triggerer, tmp_path):
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    append(source, [0, 1])
    user_dag("deferred", source, target)  # the snapshot; the watermark is now version 0

    committed = threading.Event()

    def commit_once_deferred() -> None:
        wait_for(lambda: sensor_deferred("deferred"), 600, "the sensor to defer")
        append(source, [2])
        committed.set()

    thread = threading.Thread(target=commit_once_deferred, daemon=True)
    thread.start()
    assert user_dag("deferred", source, target, deferrable=True) == {"wait": "success",
                                                                      "load": "success"}
    assert committed.is_set()
    assert loaded_ranges(target) == ["0..0", "1..1"]
    assert rows(target) == rows(source)
    assert stored_watermark(source)["version"] == 1
    # The triggerer process ran the sensor's trigger to completion (dag.test() did not).
    assert re.search(r"trigger deferred/\S+/wait/-1/\d+ \(ID \d+\) completed",
                     triggerer.read_text())


def hourly_source(user_env, tmp_path) -> tuple[dict[str, str], str, str]:
    """Commits at 00:30, 01:00 (exactly), 01:30, 03:10 and 04:00, the hourly DAG in the DAG
    folder, and the environment its tasks read the tables from."""
    from airflow.configuration import conf

    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    hour = datetime(2024, 5, 1, tzinfo=timezone.utc)
    for version, minutes in enumerate((30, 60, 90, 190, 240)):
        append(source, [10 * version, 10 * version + 1])
        moment = int((hour + timedelta(minutes=minutes)).timestamp()) * 10**9
        os.utime(Path(source) / "_delta_log" / f"{version:020d}.json", ns=(moment, moment))
    dags = Path(conf.get("core", "dags_folder"))
    dags.mkdir(parents=True, exist_ok=True)
    shutil.copy(HERE / "hourly_by_time_dag.py", dags / "hourly_by_time_dag.py")
    return {**user_env, "DELTA_SOURCE": source, "DELTA_TARGET": target}, source, target


def assert_each_hour_loaded(target: str) -> None:
    """The hours from 01:00 to 04:00: versions 1..2, none, 3..3; each row once."""
    assert loaded_ranges(target) == ["1..2", "3..3"]
    assert rows(target) == Counter((i,) for i in (10, 11, 20, 21, 30, 31))


def airflow_command(*args: str, env: dict[str, str], cwd: Path, timeout: float = 600
                    ) -> subprocess.CompletedProcess:
    done = subprocess.run([str(Path(sys.executable).with_name("airflow")), *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return done


@pytest.mark.slow
@pytest.mark.skipif(airflow_at_least("3.0.0"), reason="Airflow 3: airflow backfill create")
def test_airflow_2_backfill_loads_each_data_interval(user_env, tmp_path):
    """``airflow dags backfill`` over three hours (a BackfillJob running each task): each run
    loads the versions committed in its data interval."""
    env, _, target = hourly_source(user_env, tmp_path)
    airflow_command("dags", "backfill", "-s", "2024-05-01T01:00:00+00:00", "-e",
                    "2024-05-01T03:00:00+00:00", "hourly_by_time", env=env, cwd=tmp_path,
                    timeout=1200)
    assert_each_hour_loaded(target)


@pytest.mark.slow
@pytest.mark.skipif(not airflow_at_least("3.0.0"), reason="Airflow 2: airflow dags backfill")
def test_airflow_3_backfill_create_loads_each_data_interval(user_env, tmp_path):
    """``airflow backfill create`` over three hours, run by a real scheduler (LocalExecutor),
    DAG processor and API server: each run loads its data interval's versions."""
    env, _, target = hourly_source(user_env, tmp_path)
    port = _free_port()
    env.update({"AIRFLOW__CORE__EXECUTOR": "LocalExecutor", "AIRFLOW__CORE__PARALLELISM": "2",
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
                "AIRFLOW__API_AUTH__JWT_SECRET": "backfill-test-jwt-secret-0123456789",
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                # CI runs this test on two Airflow minors at once: the scheduler's log server
                # must not take the default port the other one holds.
                "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(_free_port()),
                # Four processes write one SQLite file: on a busy machine a writer can hold it
                # past SQLite's 5 s wait ("database is locked" in `backfill create`).
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": _waiting_sqlite(env)})
    logs = tmp_path / "logs"
    logs.mkdir()
    airflow = str(Path(sys.executable).with_name("airflow"))
    # One API server process: uvicorn's supervisor kills a worker that does not answer its 5 s
    # health check, so on a busy machine workers still starting were killed and restarted over
    # and over, and the tasks' calls to the execution API were refused meanwhile.
    commands = {"api-server": ["api-server", "-H", "127.0.0.1", "--port", str(port), "-w", "1"],
                "dag-processor": ["dag-processor"], "scheduler": ["scheduler"]}
    processes = []
    try:
        for name, command in commands.items():
            with (logs / f"{name}.log").open("wb") as out:
                processes.append(subprocess.Popen([airflow, *command], stdout=out,
                                                  stderr=subprocess.STDOUT, env=env))
        # What `airflow dags list` lists (the serialized DAGs), read here: a CLI process a
        # poll cost seconds of CPU each, and slowed the DAG processor it waited for.
        wait_for(lambda: dag_serialized("hourly_by_time"), 300, "the DAG to be parsed")
        airflow_command("dags", "unpause", "hourly_by_time", env=env, cwd=tmp_path)
        airflow_command("backfill", "create", "--dag-id", "hourly_by_time", "--from-date",
                        "2024-05-01T01:00:00+00:00", "--to-date", "2024-05-01T03:00:00+00:00",
                        env=env, cwd=tmp_path)
        wait_for(lambda: backfill_states("hourly_by_time") == ["success"] * 3, 900,
                 "the three backfill runs to succeed")
    finally:
        for process in reversed(processes):
            stop(process, timeout=60)
    assert_each_hour_loaded(target)


def _waiting_sqlite(env: dict[str, str]) -> str:
    """The tests' SQLite URL with a 120 s wait for a lock held by another process."""
    url = env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    return f"{url}{'&' if '?' in url else '?'}timeout=120"


def dag_serialized(dag_id: str) -> bool:
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return session.scalar(select(SerializedDagModel.dag_id).where(
            SerializedDagModel.dag_id == dag_id).limit(1)) is not None


def backfill_states(dag_id: str) -> list[str]:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        runs = session.scalars(select(DagRun).where(DagRun.dag_id == dag_id,
                                                    DagRun.run_type == "backfill")).all()
        states = [str(run.state) for run in runs]
    assert "failed" not in states, states
    return states


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
