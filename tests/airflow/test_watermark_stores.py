"""The watermark stores in real DAG runs (dag.test on SQLite): concurrent writers, watermarks
that must not move back, mapped task instances each with their own watermark."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
from airflow.models.xcom import XComModel
from airflow.sdk import DAG, get_current_context, task

from airflow_provider_delta.errors import WatermarkError
from airflow_provider_delta.watermarks import make_watermark_store

from watermark_writer import TABLE_ID, WATERMARK_KEY, WRITES, writer_dag

WRITER_SCRIPT = str(Path(__file__).with_name("watermark_writer.py"))


def test_two_writers_of_one_key_keep_each_tables_watermark(register_dag, run_dag, tmp_path):
    """Two task processes (two tables, one watermark_key) writing at once: no lost update."""
    from airflow.configuration import conf

    start_line = tmp_path / "start_line"
    start_line.mkdir()
    writers = {f"watermark_writer_{name}": str(tmp_path / name) for name in ("orders", "users")}
    for dag_id, table_uri in writers.items():
        register_dag(writer_dag(dag_id, table_uri, str(start_line), len(writers)))
    # Unit-test mode makes up a Fernet key per process; all must share the Variables' key.
    env = {**os.environ, "AIRFLOW__CORE__FERNET_KEY": conf.get("core", "fernet_key")}
    processes = [
        subprocess.Popen([sys.executable, WRITER_SCRIPT, dag_id, table_uri, str(start_line),
                          str(len(writers))], env=env, stdout=subprocess.DEVNULL)
        for dag_id, table_uri in writers.items()
    ]
    assert [process.wait(timeout=300) for process in processes] == [0, 0]
    last = {"version": WRITES - 1, "table_id": TABLE_ID}
    assert read_back(run_dag, list(writers.values())) == [last, last]


def read_back(run_dag, table_uris: list[str]) -> list:
    """The Variable watermarks of ``table_uris``, as a task reads them."""
    with DAG("watermark_reader", schedule=None, start_date=datetime(2024, 1, 1)) as dag:
        @task
        def read() -> list:
            stores = [make_watermark_store("variable", key=WATERMARK_KEY, table_uri=uri)
                      for uri in table_uris]
            return [store.read_watermark(get_current_context())._asdict() for store in stores]

        read()
    run = run_dag(dag)
    return XComModel.deserialize_value(_xcoms(run, "read")[0])


@pytest.mark.parametrize("store_kind", ["variable", "xcom"])
def test_a_watermark_moves_back_only_with_an_explicit_reset(run_dag, task_states, xcom_value,
                                                             tmp_path, store_kind):
    table_uri = str(tmp_path / "orders")
    with DAG(f"watermark_backwards_{store_kind}", schedule=None,
             start_date=datetime(2024, 1, 1)) as dag:
        @task
        def write_back() -> int:
            context = get_current_context()
            store = make_watermark_store(store_kind, key="wm_back", table_uri=table_uri)
            store.write(context, 5, table_id="t1")
            for version, table_id in ((3, "t1"), (7, "another-table")):
                with pytest.raises(WatermarkError) as caught:
                    store.write(context, version, table_id=table_id)
                message = str(caught.value)
                assert table_uri in message and "reset_if_ahead=True" in message
                assert f"from version 5 (table id t1) back to version {version}" in message
            assert store.read(context) == 5
            store.write(context, 3, table_id="t1", reset=True)
            return store.read(context)

        write_back()

    run = run_dag(dag)
    assert task_states(run) == {"write_back": "success"}
    assert xcom_value(run, "write_back") == 3


def test_variable_watermark_spellings_in_order_of_precedence(run_dag, xcom_value, tmp_path):
    """The "/" spelling, then Airflow 3.0's "|" spelling, then the shared layout."""
    table_uri = str(tmp_path / "orders")
    twin_uri = f"{tmp_path}|orders"  # Airflow 3.0 spelled its Variable as table_uri's
    name = f"wm_spelled:{table_uri}"
    with DAG("watermark_spellings", schedule=None, start_date=datetime(2024, 1, 1)) as dag:
        @task
        def read_each() -> list:
            from airflow.sdk import Variable

            context = get_current_context()
            store = make_watermark_store("variable", key="wm_spelled", table_uri=table_uri)
            Variable.set("wm_spelled", json.dumps({table_uri: 1}))
            Variable.set(name.replace("/", "|"), "2")
            Variable.set(name, "3")
            found = []
            for stored in (name, name.replace("/", "|")):
                found.append(store.read(context))
                Variable.delete(stored)
            found.append(store.read(context))
            Variable.set(name.replace("/", "|"), "4")  # cannot be told apart: both read it
            twin = make_watermark_store("variable", key="wm_spelled", table_uri=twin_uri)
            found.append(twin.read(context))
            Variable.delete("wm_spelled")
            return found

        read_each()

    assert xcom_value(run_dag(dag), "read_each") == [3, 2, 1, 4]


def test_each_mapped_task_instance_reads_its_own_xcom_watermark(run_dag, xcom_value, tmp_path):
    """Mapped over two tables, each map index keeps the watermark of its table."""
    tables = {str(tmp_path / "orders"): 4, str(tmp_path / "users"): 9}
    with DAG("watermark_mapped", schedule=None, start_date=datetime(2024, 1, 1)) as dag:
        @task
        def advance(table_uri: str) -> dict:
            context = get_current_context()
            store = make_watermark_store("xcom", key="wm_mapped", table_uri=table_uri)
            before = store.read(context)
            store.write(context, tables[table_uri] if before is None else before + 1)
            return {"table": table_uri, "before": before}

        advance.expand(table_uri=list(tables))

    first, second = run_dag(dag), run_dag(dag)
    assert _before_by_table(first) == {uri: None for uri in tables}
    assert _before_by_table(second) == tables


def _before_by_table(dag_run) -> dict:
    return {value["table"]: value["before"]
            for value in map(XComModel.deserialize_value, _xcoms(dag_run, "advance"))}


def _xcoms(dag_run, task_id: str) -> list:
    """The return values of ``task_id`` in ``dag_run`` (one per map index)."""
    from airflow.utils.session import create_session

    with create_session() as session:
        return session.scalars(XComModel.get_many(
            run_id=dag_run.run_id, key="return_value", task_ids=task_id, dag_ids=dag_run.dag_id,
        )).all()
