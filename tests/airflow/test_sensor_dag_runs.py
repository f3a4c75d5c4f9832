"""Real DAG runs (dag.test on SQLite): watermarks carried across runs, deferral, timeouts."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from airflow.sdk import DAG, Asset, get_current_context, task

from airflow_provider_delta.sensors import DeltaVersionSensor
from airflow_provider_delta.watermarks import make_watermark_store

WATERMARK_KEY = "orders_watermark"


def incremental_dag(dag_id: str, table_uri: str, store: str, *, table_id: str | None = None,
                    **sensor_kwargs) -> DAG:
    """sense >> load, where ``load`` stands in for the incremental operator: it records the
    range it was given and writes the range's end (and ``table_id``) as the new watermark."""
    # The asset state store is reachable from tasks that have the asset as inlet or outlet.
    assets = [Asset(name=f"{dag_id}_table", uri=f"file://{table_uri}")] if store == "asset_state" else []
    with DAG(dag_id, schedule=None, start_date=datetime(2024, 1, 1), catchup=False) as dag:
        sense = DeltaVersionSensor(
            task_id="sense", table_uri=table_uri, watermark_store=store,
            watermark_key=WATERMARK_KEY, watermark_task_id="load" if store == "xcom" else None,
            inlets=assets,
            **{"initial": "earliest", "poke_interval": 0.1, "timeout": 30, **sensor_kwargs},
        )

        @task(outlets=assets)
        def load(uri: str) -> dict:
            context = get_current_context()
            found = context["ti"].xcom_pull(task_ids="sense")
            make_watermark_store(store, key=WATERMARK_KEY, table_uri=uri).write(
                context, found["end_version"], table_id=table_id
            )
            return found

        sense >> load(table_uri)
    return dag


def test_xcom_watermark_carries_across_runs(run_dag, growing_table, ranges_of, xcom_value):
    table = growing_table(3)
    dag = incremental_dag("delta_xcom_watermark", table.uri, "xcom")
    assert ranges_of(run_dag(dag)) == (0, 2)
    table.append(2)
    assert ranges_of(run_dag(dag)) == (3, 4)
    table.append(1)
    second = run_dag(dag)
    assert ranges_of(second) == (5, 5)
    assert xcom_value(second, "load", WATERMARK_KEY) == 5


def test_variable_watermark_carries_across_runs_and_tables(run_dag, growing_table, ranges_of):
    from airflow.models import Variable

    orders, users = growing_table(2, "orders"), growing_table(4, "users")
    orders_dag = incremental_dag("delta_variable_orders", orders.uri, "variable")
    users_dag = incremental_dag("delta_variable_users", users.uri, "variable")
    assert ranges_of(run_dag(orders_dag)) == (0, 1)
    assert ranges_of(run_dag(users_dag)) == (0, 3)
    orders.append()
    assert ranges_of(run_dag(orders_dag)) == (2, 2)
    assert Variable.get(f"{WATERMARK_KEY}:{orders.uri}", deserialize_json=True) == 2
    assert Variable.get(f"{WATERMARK_KEY}:{users.uri}", deserialize_json=True) == 3


def test_asset_state_watermark_carries_across_runs(run_dag, growing_table, ranges_of):
    table = growing_table(2)
    dag = incremental_dag("delta_asset_state_watermark", table.uri, "asset_state")
    assert ranges_of(run_dag(dag)) == (0, 1)
    table.append(3)
    assert ranges_of(run_dag(dag)) == (2, 4)


@pytest.mark.parametrize("store", ["xcom", "variable"])
def test_watermark_records_the_table_id(run_dag, growing_table, ranges_of, xcom_value, store):
    from airflow.models import Variable
    from deltalake import DeltaTable

    table = growing_table(2)
    table_id = DeltaTable(table.uri).metadata().id
    if store == "variable":
        Variable.set(WATERMARK_KEY, json.dumps({table.uri: 0}))  # a plain int from older writes
    dag = incremental_dag(f"delta_table_id_{store}", table.uri, store, table_id=table_id)
    first = run_dag(dag)
    assert ranges_of(first) == ((1, 1) if store == "variable" else (0, 1))
    stored = {"version": 1, "table_id": table_id}
    if store == "variable":
        assert Variable.get(f"{WATERMARK_KEY}:{table.uri}", deserialize_json=True) == stored
    else:
        assert xcom_value(first, "load", WATERMARK_KEY) == stored
    table.append()
    assert ranges_of(run_dag(dag)) == (2, 2)  # the new format reads back
    Variable.delete(WATERMARK_KEY)


def test_variable_watermark_of_airflow_3_0_is_read_and_moved_after_an_upgrade(
    run_dag, growing_table, ranges_of
):
    """Airflow 3.0 stored ``<key>:<table_uri>`` with each "/" as "|"; after an upgrade the
    sensor goes on from it, and the next write stores the "/" spelling and drops the old one."""
    from airflow.models import Variable
    from deltalake import DeltaTable

    table = growing_table(3)
    table_id = DeltaTable(table.uri).metadata().id
    name = f"{WATERMARK_KEY}:{table.uri}"
    name_on_3_0 = name.replace("/", "|")
    Variable.set(name_on_3_0, json.dumps({"version": 1, "table_id": table_id}))
    dag = incremental_dag("delta_variable_from_3_0", table.uri, "variable", table_id=table_id)
    assert ranges_of(run_dag(dag)) == (2, 2)  # not initial="earliest"'s (0, 2)
    assert Variable.get(name, deserialize_json=True) == {"version": 2, "table_id": table_id}
    assert Variable.get(name_on_3_0, default_var=None) is None
    table.append()
    assert ranges_of(run_dag(dag)) == (3, 3)


@pytest.mark.parametrize(("case", "stored", "message"), [
    ("malformed", lambda uri: "{not json", "Airflow Variable 'bad_watermark_malformed' is not JSON"),
    ("ahead", lambda uri: json.dumps({uri: 9}),
     "table's latest version is 1; the table was probably recreated"),
    ("negative", lambda uri: json.dumps({uri: -4}), "is -4, not a table version"),
])
def test_bad_variable_watermark_fails_the_sensor(
    run_dag, growing_table, task_states, capfd, case, stored, message
):
    from airflow.models import Variable

    table = growing_table(2)
    Variable.set(f"bad_watermark_{case}", stored(table.uri))
    with DAG(f"delta_bad_watermark_{case}", schedule=None, start_date=datetime(2024, 1, 1)) as dag:
        DeltaVersionSensor(task_id="sense", table_uri=table.uri, watermark_store="variable",
                           watermark_key=f"bad_watermark_{case}", poke_interval=0.1, timeout=5)
    assert task_states(run_dag(dag)) == {"sense": "failed"}
    assert message in "".join(capfd.readouterr())


def test_deferrable_sensor_completes_through_the_trigger(run_dag, growing_table, ranges_of, commit_once_deferred):
    table = growing_table(2)
    dag = incremental_dag("delta_deferrable", table.uri, "xcom", deferrable=True)
    assert ranges_of(run_dag(dag)) == (0, 1)
    # Nothing new when the next run starts: the sensor defers, the commit lands meanwhile.
    with commit_once_deferred(table):
        dag_run = run_dag(dag)
    assert ranges_of(dag_run) == (2, 2)


@pytest.mark.parametrize("deferrable", [False, True], ids=["poke", "deferrable"])
@pytest.mark.parametrize(("soft_fail", "state"), [(False, "failed"), (True, "skipped")])
def test_timeout(run_dag, growing_table, task_states, deferrable, soft_fail, state):
    table = growing_table(1)
    dag = incremental_dag(f"delta_timeout_{deferrable}_{soft_fail}", table.uri, "variable",
                          initial="latest", timeout=1, poke_interval=0.2,
                          deferrable=deferrable, soft_fail=soft_fail)
    assert task_states(run_dag(dag)) == {"sense": state, "load": "upstream_failed" if state == "failed" else "skipped"}


def test_reschedule_mode_keeps_latest_fixed_between_pokes(
    run_dag, growing_table, ranges_of, commit_once_rescheduled
):
    """Stateless pokes: with initial="latest", "latest" is the version at the first poke."""
    table = growing_table(2)
    dag = incremental_dag("delta_reschedule", table.uri, "variable", initial="latest",
                          mode="reschedule", poke_interval=1, timeout=60)
    with commit_once_rescheduled(table, dag.dag_id):
        dag_run = run_dag(dag)
    assert ranges_of(dag_run) == (2, 2)
