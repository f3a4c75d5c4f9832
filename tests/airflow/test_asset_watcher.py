"""DeltaVersionTrigger as an AssetWatcher, run by a real `airflow triggerer` process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
from airflow.sdk import DAG, Asset, AssetWatcher, task
from deltalake import DeltaTable

from airflow_provider_delta.core import commit_timestamp
from airflow_provider_delta.triggers import DeltaVersionTrigger
from airflow_provider_delta.triggers.delta_version import WATCHER_STATE_KEY
from tests.processes import stop, wait_for

pytestmark = pytest.mark.slow  # starts a triggerer process


def asset_events(asset_name: str) -> list[dict]:
    from sqlalchemy import select

    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.scalars(
            select(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .where(AssetModel.name == asset_name).order_by(AssetEvent.id)
        )
        return [dict(row.extra) for row in rows]


def watcher_trigger_started(asset_name: str) -> bool:
    from sqlalchemy import select

    from airflow.models.asset import AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        asset = session.scalars(select(AssetModel).where(AssetModel.name == asset_name)).one()
        return any(trigger.triggerer_id is not None for trigger in asset.triggers)


def asset_state(asset_name: str, key: str):
    from airflow._shared.state import AssetScope
    from airflow.models.asset import AssetModel
    from airflow.state import get_state_backend
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        asset_id = session.scalar(select(AssetModel.id).where(AssetModel.name == asset_name))
        return get_state_backend().get(AssetScope(asset_id=asset_id), key, session=session)


def register_unpaused(register_dag, dag) -> None:
    """Serialize the DAG, unpause it, serialize again: watchers of paused DAGs get no trigger."""
    from sqlalchemy import update

    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    register_dag(dag)
    with create_session() as session:
        session.execute(update(DagModel).where(DagModel.dag_id == dag.dag_id).values(is_paused=False))
    register_dag(dag)


def register_watched(register_dag, asset_name: str, trigger: DeltaVersionTrigger) -> None:
    """An unpaused DAG scheduled on asset ``asset_name``, which ``trigger`` watches."""
    asset = Asset(name=asset_name, uri=f"file://{trigger.table_uri}", watchers=[AssetWatcher(
        name=f"{asset_name}_watcher", trigger=trigger)])
    with DAG(f"{asset_name}_consumer", schedule=[asset], start_date=datetime(2024, 1, 1)) as dag:
        @task
        def consume() -> None:
            pass

        consume()
    register_unpaused(register_dag, dag)


@pytest.fixture
def triggerer(airflow_db, tmp_path):
    """A real `airflow triggerer` on the test metadata DB; stopped by its own pid."""
    from airflow.configuration import conf

    # Unit-test mode makes up a Fernet key per process; the triggerer must decrypt our triggers.
    # It imports this checkout's package first, not the one installed in the venv.
    checkout = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "AIRFLOW__CORE__FERNET_KEY": conf.get("core", "fernet_key"),
           "PYTHONPATH": os.pathsep.join(filter(None, [checkout, os.environ.get("PYTHONPATH")]))}
    log_file = (tmp_path / "triggerer.log").open("wb")
    process = subprocess.Popen(
        [str(Path(sys.executable).with_name("airflow")), "triggerer", "--capacity", "5"],
        stdout=log_file, stderr=subprocess.STDOUT, env=env,
    )
    yield process
    stop(process)
    log_file.close()


def test_a_new_commit_makes_exactly_one_asset_event(register_dag, growing_table, triggerer):
    table = growing_table(2)  # versions 0..1 exist; the watcher announces from version 2 on
    register_watched(register_dag, "delta_orders", DeltaVersionTrigger(
        table_uri=table.uri, initial=2, poll_interval=0.2))

    wait_for(lambda: watcher_trigger_started("delta_orders"), 120, "the triggerer to take the watcher")
    table.append()
    wait_for(lambda: asset_events("delta_orders"), 120, "an asset event")
    time.sleep(2)  # ten more polls with nothing new: still one event for the range
    events = asset_events("delta_orders")
    assert len(events) == 1
    payload = events[0]["payload"]
    assert (payload["start_version"], payload["end_version"]) == (2, 2)
    assert payload["table_uri"] == table.uri and payload["status"] == "success"
    assert payload["latest_commit_timestamp"] == commit_timestamp(table.uri, 2)
    # The watermark format of every store: the version and the table it belongs to.
    assert json.loads(asset_state("delta_orders", WATCHER_STATE_KEY)) == {
        "version": 2, "table_id": DeltaTable(table.uri).metadata().id}


def test_a_data_changes_only_watcher_sleeps_through_maintenance(register_dag, growing_table,
                                                                 triggerer, tmp_path):
    """OPTIMIZE, VACUUM and a property change make no asset event; the next append does, for
    the range from the watermark on."""
    table = growing_table(3)
    register_watched(register_dag, "delta_compacted", DeltaVersionTrigger(
        table_uri=table.uri, initial=3, poll_interval=0.2, data_changes_only=True))

    log = tmp_path / "triggerer.log"
    wait_for(lambda: "watching from version 3" in log.read_text(), 300,
             "the watcher's first look at the table")
    assert table.maintain() == 6
    time.sleep(3)  # fifteen polls see the maintenance commits
    assert asset_events("delta_compacted") == []
    table.append()
    events = wait_for(lambda: asset_events("delta_compacted"), 120, "an asset event")
    assert [(e["payload"]["start_version"], e["payload"]["end_version"]) for e in events] == [(3, 7)]


def test_the_watch_example_waits_for_its_tables_then_runs_on_their_versions(
        register_dag, run_dag, xcom_value, growing_table, triggerer, tmp_path, monkeypatch):
    """dags_examples/watch_delta_tables.py on a real triggerer: watchers set up before their
    tables wait for them; a created table announces its snapshot, then each new range, and the
    example's DAG reads the range it was run for."""
    from airflow.dag_processing.dagbag import DagBag

    sales, customers = tmp_path / "sales", tmp_path / "customers"  # neither exists yet
    monkeypatch.setenv("DELTA_WATCHED_TABLES", f"{sales},{customers}")
    monkeypatch.setenv("DELTA_WATCH_POLL_SECONDS", "0.2")
    example = Path(__file__).resolve().parents[2] / "dags_examples" / "watch_delta_tables.py"
    bag = DagBag(dag_folder=str(example))
    assert bag.import_errors == {} and set(bag.dags) == {"delta_sales_changed",
                                                         "delta_customers_changed"}
    for dag in bag.dags.values():
        register_unpaused(register_dag, dag)
    for asset in ("delta_sales", "delta_customers"):
        wait_for(lambda: watcher_trigger_started(asset), 120, f"the triggerer to take {asset}")

    time.sleep(2)  # ten polls of missing tables: no event, and the watchers keep running
    assert asset_events("delta_sales") == []
    table = growing_table(1, uri=str(sales))
    wait_for(lambda: asset_events("delta_sales"), 120, "the snapshot's asset event")
    table.append()
    events = wait_for(lambda: (found := asset_events("delta_sales"))[1:] and found, 120,
                      "the new range's asset event")
    assert [(e["payload"]["mode"], e["payload"]["start_version"], e["payload"]["end_version"])
            for e in events] == [("snapshot", 0, 0), ("changes", 1, 1)]
    assert asset_events("delta_customers") == []
    # Waiting is not a crash loop: no trigger ended with an error (and was restarted).
    assert "exited with error" not in (tmp_path / "triggerer.log").read_text()

    dag_run = run_dag(bag.dags["delta_sales_changed"])
    assert xcom_value(dag_run, "announced_range") == {
        "mode": "changes", "start_version": 1, "end_version": 1}
