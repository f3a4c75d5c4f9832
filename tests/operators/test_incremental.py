"""End to end: DAGs run with dag.test() on SQLite, loads through spark-submit or Spark Connect."""

from __future__ import annotations

from collections import Counter

import pytest
from airflow.sdk import DAG

from airflow_provider_delta.operators import DeltaIncrementalOperator
from airflow_provider_delta.sensors import DeltaVersionSensor

from .conftest import SPARK_CONF, append_rows, delta_rows, forget_watermark, recorded, watermark

pytestmark = pytest.mark.slow


def _incremental(transport, source, target, **kwargs):
    with DAG("incremental_load", schedule=None) as dag:
        DeltaIncrementalOperator(
            task_id="load", table_uri=source, target=target, watermark_store="variable",
            watermark_key="wm_incremental", transform="operators.transforms:add_batch_end",
            **transport, **kwargs,
        )
    return dag


def test_first_run_snapshot_then_only_new_versions(spark_transport, run_dag, xcom_value,
                                                   task_states, tmp_path):
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    append_rows(source, [0, 1, 2])
    append_rows(source, [3, 4])
    dag = _incremental(spark_transport, source, target, max_files=1, partition_by=["batch_end"])
    forget_watermark("wm_incremental")

    first = run_dag(dag)
    assert task_states(first) == {"load": "success"}
    result = xcom_value(first, "load")
    assert (result["mode"], result["start_version"], result["end_version"]) == ("snapshot", 1, 1)
    assert (result["rows"], result["files"], result["sink_version"]) == (5, 2, 0)
    assert watermark("wm_incremental") == {source: recorded(source, 1)}
    expected = Counter({row + (1,): n for row, n in delta_rows(source).items()})
    assert delta_rows(target) == expected

    append_rows(source, [5, 6])
    append_rows(source, [7])
    second = run_dag(dag)
    result = xcom_value(second, "load")
    assert (result["mode"], result["start_version"], result["end_version"]) == ("changes", 2, 3)
    assert [(b["start_version"], b["end_version"], b["rows"], b["sink_version"])
            for b in result["batches"]] == [(2, 2, 2, 1), (3, 3, 1, 2)]
    assert watermark("wm_incremental") == {source: recorded(source, 3)}
    expected.update({(5, "n5", 2): 1, (6, None, 2): 1, (7, "n7", 3): 1})
    assert delta_rows(target) == expected
    assert _last_asset_event_extra(target) == {
        "source_table": source, "source_start_version": 2, "source_end_version": 3,
        "sink_version": 2,
    }

    third = run_dag(dag)
    assert task_states(third) == {"load": "success"}
    assert xcom_value(third, "load")["batches"] == []
    assert watermark("wm_incremental") == {source: recorded(source, 3)}
    assert delta_rows(target) == expected


def _last_asset_event_extra(target: str) -> dict:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        query = (select(AssetEvent.extra).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
                 .where(AssetModel.uri == f"file://{target}").order_by(AssetEvent.id.desc()))
        return session.scalars(query).first()


def test_initial_latest_records_the_current_version_without_loading(run_dag, xcom_value,
                                                                    task_states, tmp_path):
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    append_rows(source, [0])
    append_rows(source, [1])
    with DAG("start_at_latest", schedule=None) as dag:
        DeltaIncrementalOperator(task_id="load", table_uri=source, target=target,
                                 initial="latest", watermark_store="variable",
                                 watermark_key="wm_latest", conn_id="no_spark_needed")

    run = run_dag(dag)

    assert task_states(run) == {"load": "success"}
    assert xcom_value(run, "load")["batches"] == []
    assert watermark("wm_latest") == {source: recorded(source, 1)}
    assert not (tmp_path / "target").exists()


def test_readme_sensor_and_operator_load_the_rows_from_before_the_first_run(
    spark_local_conn, run_dag, xcom_value, task_states, tmp_path
):
    """The README's DAG, defaults kept: the sensor and the operator share one start policy."""
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    append_rows(source, [0, 1, 2])
    append_rows(source, [3, 4])
    with DAG("readme_sensor_load", schedule=None) as dag:
        wait = DeltaVersionSensor(
            task_id="wait", table_uri=source, watermark_store="variable",
            watermark_key="wm_readme", deferrable=True, poke_interval=0.2, timeout=5,
            soft_fail=True)
        load = DeltaIncrementalOperator(
            task_id="load", table_uri=source, sensor_task_id="wait",
            watermark_store="variable", watermark_key="wm_readme", target=target,
            conn_id=spark_local_conn, conf=SPARK_CONF)
        wait >> load

    first = run_dag(dag)
    assert task_states(first) == {"wait": "success", "load": "success"}
    assert xcom_value(first, "wait")["mode"] == "snapshot"
    assert delta_rows(target) == delta_rows(source)
    assert watermark("wm_readme") == {source: recorded(source, 1)}

    append_rows(source, [5, 6])
    second = run_dag(dag)
    assert task_states(second) == {"wait": "success", "load": "success"}
    assert (xcom_value(second, "load")["start_version"], xcom_value(second, "load")["end_version"]) == (2, 2)
    assert delta_rows(target) == delta_rows(source)
