"""The sensor and AssetWatcher examples parse into DAGs that Airflow can serialize."""

from __future__ import annotations

from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "dags_examples"


@pytest.mark.parametrize("name", ["sensor_incremental.py", "asset_watcher_delta.py",
                                  "wait_for_data.py"])
def test_example_parses_and_serializes(name):
    from airflow.dag_processing.dagbag import DagBag
    from airflow.serialization.serialized_objects import LazyDeserializedDAG

    bag = DagBag(dag_folder=str(EXAMPLES / name))
    assert bag.import_errors == {}
    assert bag.dags
    for dag in bag.dags.values():
        LazyDeserializedDAG.from_dag(dag)  # raises if a trigger or operator does not serialize
