"""The example DAGs parse and wire the operators as documented."""

from __future__ import annotations

import importlib

import pytest

from airflow_provider_delta.operators import DeltaIncrementalOperator, DeltaTimeTravelOperator


@pytest.mark.parametrize(
    ("module", "dag_ids"),
    [
        ("dags_examples.backfill_by_params", ["delta_backfill_by_params"]),
        ("dags_examples.time_travel", ["delta_time_travel"]),
        ("dags_examples.change_feed_merge", ["delta_change_feed_merge"]),
        ("dags_examples.load_by_time", ["delta_load_by_day"]),
        ("dags_examples.wait_for_data",
         ["delta_wait_for_data_changes", "delta_load_by_hour_when_complete"]),
        ("dags_examples.cluster_load",
         ["delta_incremental_standalone", "delta_incremental_yarn", "delta_incremental_k8s"]),
    ],
)
def test_example_dags_parse(module, dag_ids):
    from airflow.sdk import DAG

    loaded = importlib.import_module(module)
    dags = {d.dag_id: d for d in vars(loaded).values() if isinstance(d, DAG)}
    assert sorted(dags) == sorted(dag_ids)
    for dag in dags.values():
        ours = [t for t in dag.tasks
                if isinstance(t, (DeltaIncrementalOperator, DeltaTimeTravelOperator))]
        assert ours, dag.dag_id
        for task in ours:
            assert task.outlets, f"{dag.dag_id}.{task.task_id} declares its target as an asset"
