"""Every file in dags_examples/ and the README's DAG import on this Airflow with the DAGs they
document, and the examples that need no cluster or triggerer run with ``dag.test()`` on local
tables, from the DAG folder in a fresh process, as their docs pages show them."""

from __future__ import annotations

import json
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, QueryBuilder, write_deltalake

from airflow_provider_delta.compat import airflow_at_least
from tests.versions.conftest import SPARK_CONF

REPOSITORY = Path(__file__).resolve().parents[2]
EXAMPLES = REPOSITORY / "dags_examples"
HERE = Path(__file__).resolve().parent
WATCHERS = airflow_at_least("3.0.0")  # AssetWatcher; on Airflow 2 those files define no DAG

DAG_IDS = {
    "__init__.py": [],
    "asset_watcher_delta.py": ["delta_asset_watcher"] if WATCHERS else [],
    "backfill_by_params.py": ["delta_backfill_by_params"],
    "change_feed_merge.py": ["delta_change_feed_merge"],
    "cluster_load.py": ["delta_incremental_k8s", "delta_incremental_standalone",
                        "delta_incremental_yarn"],
    "demo.py": [],  # builds its DAG when run (bash scripts/dev.sh demo)
    "load_by_time.py": ["delta_load_by_day"],
    "local_connect_server.py": [],
    "sensor_incremental.py": ["delta_sensor_incremental"],
    "time_travel.py": ["delta_time_travel"],
    "wait_for_data.py": ["delta_load_by_hour_when_complete", "delta_wait_for_data_changes"],
    "watch_delta_tables.py": ["delta_customers_changed", "delta_orders_changed"] if WATCHERS else [],
}


def dag_bag(path: Path):
    try:
        from airflow.dag_processing.dagbag import DagBag  # Airflow >= 3.1
    except ImportError:
        from airflow.models.dagbag import DagBag
    return DagBag(dag_folder=str(path), safe_mode=False)


def test_every_example_is_listed():
    assert sorted(path.name for path in EXAMPLES.glob("*.py")) == sorted(DAG_IDS)


@pytest.mark.parametrize("name", sorted(DAG_IDS))
def test_example_imports(name, airflow_db):
    bag = dag_bag(EXAMPLES / name)
    assert bag.import_errors == {}
    assert sorted(bag.dag_ids) == DAG_IDS[name]


def test_readme_dag_imports(airflow_db, tmp_path):
    """The README's first Python block is a whole DAG file."""
    readme = (REPOSITORY / "README.md").read_text()
    code = readme.split("```python\n", 1)[1].split("```", 1)[0]
    (tmp_path / "readme_dag.py").write_text(code)
    bag = dag_bag(tmp_path / "readme_dag.py")
    assert bag.import_errors == {}
    assert {dag_id: sorted(dag.task_ids) for dag_id, dag in bag.dags.items()} == {
        "orders_incremental": ["load", "wait"]}


def rows(table: str | DeltaTable) -> Counter:
    if isinstance(table, str):
        table = DeltaTable(table)
    table = QueryBuilder().register("t", table).execute("select * from t").read_all()
    return Counter(zip(*(column.to_pylist() for column in table.columns)))


def orders(uri: str, first_id: int, count: int) -> None:
    ids = list(range(first_id, first_id + count))
    write_deltalake(uri, pa.table({"order_id": pa.array(ids, pa.int64()),
                                   "amount": pa.array([10.0 + i for i in ids])}), mode="append")


@pytest.fixture
def example_env(user_env, tmp_path):
    """A user's environment where ``spark_default`` is local Spark (spark-defaults.conf holds
    the tests' small-JVM settings) and the examples' tables are under ``tmp_path``."""
    conf_dir = tmp_path / "spark-conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(
        "".join(f"{key} {value}\n" for key, value in SPARK_CONF.items()))
    return {**user_env, "SPARK_CONF_DIR": str(conf_dir),
            "AIRFLOW_CONN_SPARK_DEFAULT": '{"conn_type": "spark", "host": "local[2]"}',
            "AIRFLOW_CONN_DELTA_DEFAULT": '{"conn_type": "delta"}',  # local files: no options
            "DELTA_EXAMPLE_SOURCE": str(tmp_path / "source"),
            "DELTA_EXAMPLE_TARGET": str(tmp_path / "target"),
            "DELTA_EXAMPLE_EXPORT": str(tmp_path / "export")}


def run_example(run_dag_file, env: dict, name: str, run_conf: dict | None = None,
                logical_date: datetime | None = None) -> dict:
    return run_dag_file(EXAMPLES / name, env, str(HERE / "run_example.py"),
                        json.dumps(run_conf or {}), logical_date.isoformat() if logical_date else "")


@pytest.mark.slow
@pytest.mark.example_run
def test_sensor_then_load(run_dag_file, example_env):
    source, target = example_env["DELTA_EXAMPLE_SOURCE"], example_env["DELTA_EXAMPLE_TARGET"]
    orders(source, 0, 3)
    orders(source, 3, 2)
    assert run_example(run_dag_file, example_env, "sensor_incremental.py") == {
        "wait_for_versions": "success", "load_new_versions": "success"}
    assert rows(target) == rows(source)


@pytest.mark.slow
@pytest.mark.example_run
def test_backfill_by_params(run_dag_file, example_env):
    source, target = example_env["DELTA_EXAMPLE_SOURCE"], example_env["DELTA_EXAMPLE_TARGET"]
    orders(source, 0, 3)
    orders(source, 3, 2)
    orders(source, 5, 1)  # version 2: outside the range
    assert run_example(run_dag_file, example_env, "backfill_by_params.py",
                       {"start_version": 0, "end_version": 1}) == {"backfill": "success"}
    assert rows(target) == Counter((i, 10.0 + i) for i in range(5))


@pytest.mark.slow
@pytest.mark.example_run
def test_time_travel(run_dag_file, example_env):
    source, export = example_env["DELTA_EXAMPLE_SOURCE"], example_env["DELTA_EXAMPLE_EXPORT"]
    orders(source, 0, 3)
    orders(source, 3, 2)
    # The end of the run's data interval falls between versions 1 and 2 (a timestamp after
    # the latest commit is refused, as Delta refuses it).
    time.sleep(1)
    end_of_interval = datetime.now(timezone.utc)
    time.sleep(1)
    orders(source, 5, 1)
    assert run_example(run_dag_file, example_env, "time_travel.py", {"version": 0},
                       end_of_interval) == {"snapshot_at_version": "success",
                                            "snapshot_at_end_of_day": "success"}
    by_version = pq.read_table(f"{export}/by_version/source_versions=0-0")
    assert sorted(by_version.column("order_id").to_pylist()) == [0, 1, 2]
    assert rows(f"{export}/end_of_day") == rows(DeltaTable(source, version=1))


@pytest.mark.slow
@pytest.mark.example_run
def test_change_feed_merge(run_dag_file, example_env):
    source, target = example_env["DELTA_EXAMPLE_SOURCE"], example_env["DELTA_EXAMPLE_TARGET"]
    write_deltalake(source, pa.table({"customer_id": pa.array([1, 2, 3], pa.int64()),
                                      "name": ["ann", "bob", "cy"]}))
    expected = {"load_changes": "success"}
    assert run_example(run_dag_file, example_env, "change_feed_merge.py") == expected
    assert rows(target) == rows(source)  # the snapshot

    DeltaTable(source).update(updates={"name": "'bea'"}, predicate="customer_id = 2")
    DeltaTable(source).delete("customer_id = 3")
    write_deltalake(source, pa.table({"customer_id": pa.array([4], pa.int64()),
                                      "name": ["dee"]}), mode="append")
    assert run_example(run_dag_file, example_env, "change_feed_merge.py") == expected
    assert rows(target) == rows(source)  # the changes, merged by customer_id


def test_hourly_interval_example_has_data_intervals(airflow_db, monkeypatch):
    """The scheduler's view of the hourly interval example: each run's data interval is the
    hour before it (a bare timedelta on Airflow 3 gives an empty interval, refused by the
    time-range load)."""
    # Airflow 3's default, which its unit-test configuration turns around.
    for key in ("CRON", "DELTA"):
        monkeypatch.setenv(f"AIRFLOW__SCHEDULER__CREATE_{key}_DATA_INTERVALS", "False")
    import pendulum
    try:
        from airflow.serialization.serialized_objects import DagSerialization  # Airflow >= 3.2
    except ImportError:
        from airflow.serialization.serialized_objects import SerializedDAG as DagSerialization

    dag = dag_bag(EXAMPLES / "wait_for_data.py").dags["delta_load_by_hour_when_complete"]
    timetable = DagSerialization.from_dict(DagSerialization.to_dict(dag)).timetable
    run_after = pendulum.datetime(2026, 1, 2, 5, 0, tz="UTC")
    interval = timetable.infer_manual_data_interval(run_after=run_after)
    assert (interval.start, interval.end) == (run_after.subtract(hours=1), run_after)
