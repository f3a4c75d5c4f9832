"""Templated parameters: rendered by real ``dag.test()`` runs, checked on their rendered values."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest
from airflow.sdk import DAG
from deltalake import DeltaTable, write_deltalake

from airflow_provider_delta.operators import DeltaIncrementalOperator, DeltaTimeTravelOperator

from .conftest import SPARK_CONF, append_rows, delta_rows, driver_env, forget_watermark

TRANSFORM_SQL = "select *, '{{ ds }}' as load_date from changes where id >= {{ params.min_id }}\n"


@pytest.mark.slow
def test_templated_target_partitions_options_and_sql_file(spark_local_conn, run_dag,
                                                          task_states, xcom_value, tmp_path):
    source = str(tmp_path / "source")
    append_rows(source, [0, 1, 2])
    (tmp_path / "sql").mkdir()
    (tmp_path / "sql" / "transform.sql").write_text(TRANSFORM_SQL)
    params = {"lake": str(tmp_path), "target_name": "orders_copy", "partition_column": "load_date",
              "merge_schema": "true", "min_id": 1}
    with DAG("templated_load", schedule=None, params=params,
             template_searchpath=[str(tmp_path / "sql")]) as dag:
        DeltaIncrementalOperator(
            task_id="load", table_uri=source, target="{{ params.lake }}/{{ params.target_name }}",
            partition_by=["{{ params.partition_column }}"],
            sink_options={"mergeSchema": "{{ params.merge_schema }}"}, sql="transform.sql",
            watermark_store="variable", watermark_key="wm_templated", conn_id=spark_local_conn,
            conf=SPARK_CONF, env_vars=driver_env())
    forget_watermark("wm_templated")
    target = str(tmp_path / "orders_copy")

    first = run_dag(dag)
    assert task_states(first) == {"load": "success"}
    first_ds = first.logical_date.strftime("%Y-%m-%d")
    expected = Counter({(1, "n1", first_ds): 1, (2, "n2", first_ds): 1})
    assert delta_rows(target) == expected
    assert DeltaTable(target).metadata().partition_columns == ["load_date"]

    # A new source column reaches the target only through the rendered mergeSchema option.
    write_deltalake(source, pa.table({"id": pa.array([3], pa.int64()),
                                      "name": pa.array(["n3"], pa.string()),
                                      "score": pa.array([7.5], pa.float64())}),
                    mode="append", schema_mode="merge")
    second = run_dag(dag)
    assert task_states(second) == {"load": "success"}
    second_ds = second.logical_date.strftime("%Y-%m-%d")
    assert xcom_value(second, "load")["start_version"] == 1
    rows = delta_rows(target)
    assert rows == Counter({(1, "n1", first_ds, None): 1, (2, "n2", first_ds, None): 1,
                            (3, "n3", second_ds, 7.5): 1})


def test_templated_target_rendering_empty_fails_at_task_start(run_dag, task_states, tmp_path,
                                                              capfd):
    source = str(tmp_path / "source")
    append_rows(source, [0])
    with DAG("templated_empty_target", schedule=None, params={"target_name": ""}) as dag:
        DeltaIncrementalOperator(task_id="load", table_uri=source, target="{{ params.target_name }}",
                                 start_version=0, conn_id="no_such_spark")
    assert task_states(run_dag(dag)) == {"load": "failed"}
    assert f"load: {source}: target='' is needed by sink='delta'" in capfd.readouterr().out


@pytest.mark.parametrize(("partition_by", "sink_options", "problem"), [
    ("{{ params.columns }}", None, "partition_by=[1, 2] is not a list of column names"),
    (None, "{{ params.options }}", "sink_options=['a'] is not a mapping of option names"),
])
def test_templated_partitions_and_options_are_checked_at_task_start(
        partition_by, sink_options, problem, run_dag, task_states, tmp_path, capfd):
    source = str(tmp_path / "source")
    append_rows(source, [0])
    params = {"columns": [1, 2], "options": ["a"]}
    with DAG("templated_bad_shapes", schedule=None, params=params) as dag:
        DeltaTimeTravelOperator(task_id="load", table_uri=source, target=str(tmp_path / "t"),
                                version=0, partition_by=partition_by or (),
                                sink_options=sink_options, conn_id="no_such_spark")
    assert task_states(run_dag(dag)) == {"load": "failed"}
    assert f"load: {source}: {problem}" in capfd.readouterr().out


def test_partition_and_option_texts_of_rendered_lists_and_dicts(tmp_path):
    source = str(tmp_path / "source")
    operator = DeltaTimeTravelOperator(
        task_id="load", table_uri=source, target=str(tmp_path / "t"), version=0,
        partition_by="['day', 'kind']", sink_options="{'mergeSchema': True}")
    operator.check_rendered()
    assert operator.partition_by == ("day", "kind")
    assert operator.sink_options == {"mergeSchema": "true"}
