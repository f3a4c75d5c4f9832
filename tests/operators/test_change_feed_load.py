"""DeltaIncrementalOperator(change_feed=True, sink="delta-merge") in real DAG runs: a target kept
equal to a source that is appended to, updated, deleted from and merged into between runs."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest
from airflow.sdk import DAG
from deltalake import DeltaTable, write_deltalake

from airflow_provider_delta.errors import SchemaChangeError
from airflow_provider_delta.operators import DeltaIncrementalOperator

from .conftest import SPARK_CONF, delta_rows, driver_env, recorded, watermark
from .transforms import KILL_MARKER_ENV


def _rows(ids: list[int], label: str) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"{label}{i}" for i in ids]})


def _load(conn_id: str, source: str, target: str, **options) -> DeltaIncrementalOperator:
    return DeltaIncrementalOperator(
        task_id="load", table_uri=source, target=target, conn_id=conn_id, conf=SPARK_CONF,
        watermark_store="variable", watermark_key="wm_feed", initial="earliest",
        change_feed=True, sink="delta-merge", merge_keys=["id"], **options)


@pytest.mark.slow
def test_merge_load_keeps_target_equal_to_changing_source_through_a_sigkill(
        spark_local_conn, run_dag, task_states, tmp_path):
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    marker = str(tmp_path / "killed-once")
    write_deltalake(source, _rows([0, 1, 2, 3, 4, 5], "a"))  # CDF off at first
    write_deltalake(source, _rows([6, 7, 8, 9], "b"), mode="append")
    DeltaTable(source).update(updates={"v": "'updated'"}, predicate="id < 3")  # copy-on-write
    with DAG("change_feed_load", schedule=None) as dag:
        _load(spark_local_conn, source, target, max_files=1,
              transform="operators.transforms:kill_during_feed_write",
              env_vars={**driver_env(), KILL_MARKER_ENV: marker})

    # Batches v0 and v1 commit; the Spark JVM is SIGKILLed while batch v2 runs.
    assert task_states(run_dag(dag)) == {"load": "failed"}
    assert not os.path.exists(f"/proc/{int(Path(f'{marker}.killed').read_text())}")
    assert delta_rows(target) == delta_rows(source, 1)
    assert watermark("wm_feed") is None

    assert task_states(run_dag(dag)) == {"load": "success"}
    assert delta_rows(target) == delta_rows(source, 2)
    assert watermark("wm_feed") == {source: recorded(source, 2)}

    table = DeltaTable(source)
    table.alter.set_table_properties({"delta.enableChangeDataFeed": "true"})
    (table.merge(_rows([4, 5, 20], "m"), "t.id = s.id", source_alias="s", target_alias="t")
     .when_matched_delete("s.id = 5").when_matched_update_all().when_not_matched_insert_all()
     .execute())
    table.delete("id = 7")
    write_deltalake(source, _rows([30, 31], "c"), mode="append")
    assert task_states(run_dag(dag)) == {"load": "success"}
    assert delta_rows(target) == delta_rows(source)
    assert watermark("wm_feed") == {source: recorded(source, 6)}


@pytest.mark.parametrize(("options", "message"), [
    ({"sink": "delta", "merge_keys": ["id"]}, r"merge_keys=\['id'\] does not fit sink='delta'"),
    ({"sink": "delta-merge"}, r"merge_keys=\[\] does not fit sink='delta-merge'"),
    ({"sink": "delta-merge", "merge_keys": ["id"], "change_feed": False},
     "set change_feed=True"),
])
def test_merge_options_go_together(tmp_path, options, message):
    with pytest.raises(ValueError, match=message):
        DeltaIncrementalOperator(task_id="load", table_uri=str(tmp_path / "s"),
                                 target=str(tmp_path / "t"), **{"change_feed": True, **options})


def _run(operator):
    """``execute`` with the only context key an explicit range uses (as test_bad_input does)."""
    return operator.execute({"run_id": "manual__change_feed"})


def test_key_not_in_source_and_dropped_column_fail_before_spark(tmp_path):
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    write_deltalake(source, _rows([1, 2], "a"))
    wrong_key = DeltaIncrementalOperator(
        task_id="load", table_uri=source, target=target, start_version=0, end_version=0,
        change_feed=True, sink="delta-merge", merge_keys=["key"])
    with pytest.raises(ValueError, match=r"merge_keys=\[.key.\] names columns \[.key.\] that "
                                         r"the source does not have"):
        _run(wrong_key)
    write_deltalake(source, pa.table({"id": pa.array([3], pa.int64())}), mode="overwrite",
                    schema_mode="overwrite")
    across_drop = DeltaIncrementalOperator(
        task_id="load", table_uri=source, target=target, start_version=0, end_version=1,
        change_feed=True, sink="delta-merge", merge_keys=["id"])
    with pytest.raises(SchemaChangeError, match="column 'v' was dropped"):
        _run(across_drop)
    assert not os.path.exists(target)


@pytest.mark.slow
def test_merge_load_gives_the_same_target_on_both_transports(spark_transport, run_dag,
                                                             task_states, tmp_path):
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    write_deltalake(source, _rows([0, 1, 2, 3], "a"))
    with DAG("change_feed_transports", schedule=None) as dag:
        DeltaIncrementalOperator(
            task_id="load", table_uri=source, target=target, watermark_store="variable",
            watermark_key="wm_feed_transport", initial="earliest", change_feed=True,
            sink="delta-merge", merge_keys=["id"], max_files=1, **spark_transport)
    assert task_states(run_dag(dag)) == {"load": "success"}
    assert delta_rows(target) == delta_rows(source)

    table = DeltaTable(source)
    write_deltalake(source, _rows([4, 5], "b"), mode="append")
    table.update(updates={"v": "'updated'"}, predicate="id < 2")
    table.delete("id = 3")
    (table.merge(_rows([4, 9], "m"), "t.id = s.id", source_alias="s", target_alias="t")
     .when_matched_update_all().when_not_matched_insert_all().execute())
    assert task_states(run_dag(dag)) == {"load": "success"}
    assert delta_rows(target) == delta_rows(source)
