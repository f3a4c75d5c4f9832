"""Mapped loads: one mapped task over several source/target pairs, XCom watermarks."""

from __future__ import annotations

import pytest
from airflow.sdk import DAG

from airflow_provider_delta.operators import DeltaIncrementalOperator

from .conftest import SPARK_CONF, append_rows, delta_rows

pytestmark = pytest.mark.slow


def test_each_mapped_load_keeps_its_target_equal_to_its_source(spark_local_conn, run_dag,
                                                                tmp_path):
    pairs = [(str(tmp_path / f"source_{n}"), str(tmp_path / f"target_{n}")) for n in range(2)]
    for n, (source, _) in enumerate(pairs):
        append_rows(source, [10 * n, 10 * n + 1])
        append_rows(source, [10 * n + 2])
    with DAG("mapped_loads", schedule=None) as dag:
        DeltaIncrementalOperator.partial(
            task_id="load", conn_id=spark_local_conn, conf=SPARK_CONF, watermark_store="xcom",
        ).expand_kwargs([{"table_uri": source, "target": target} for source, target in pairs])

    for run_number in range(3):
        if run_number:  # new commits in each source between runs
            for n, (source, _) in enumerate(pairs):
                append_rows(source, [100 * run_number + n])
        run = run_dag(dag)
        assert sorted(ti.state for ti in run.get_task_instances()) == ["success", "success"]
        for source, target in pairs:
            assert delta_rows(target) == delta_rows(source), f"run {run_number}: {target}"
