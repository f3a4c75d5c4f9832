"""Fixtures for the sensor, trigger, hook and watermark tests: growing Delta tables, DAG runs."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake


class GrowingTable:
    """A real Delta table (written by deltalake) that tests append commits to."""

    def __init__(self, uri: str, storage_options: dict[str, str] | None = None):
        self.uri = uri
        self.storage_options = storage_options
        self._ids = itertools.count()

    def append(self, commits: int = 1) -> int:
        """Append ``commits`` one-row commits; return the new latest version."""
        for _ in range(commits):
            rows = pa.table({"id": pa.array([next(self._ids)], pa.int64())})
            write_deltalake(self.uri, rows, mode="append", storage_options=self.storage_options)
        return self.version()

    def version(self) -> int:
        return DeltaTable(self.uri, storage_options=self.storage_options).version()


@pytest.fixture
def growing_table(tmp_path: Path) -> Callable[..., GrowingTable]:
    """``growing_table(commits)``: a local table with versions 0..commits-1."""

    def make(commits: int = 1, name: str = "table") -> GrowingTable:
        table = GrowingTable(str(tmp_path / name))
        table.append(commits)
        return table

    return make


_run_dates = itertools.count(1)


@pytest.fixture
def run_dag(airflow_db):
    """Run a DAG object once with ``dag.test()`` on the SQLite DB; returns the DagRun.

    Each call gets a later logical date, so ``include_prior_dates`` sees earlier runs.
    """
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.collection import update_dag_parsing_results_in_db
    from airflow.serialization.serialized_objects import LazyDeserializedDAG
    from airflow.utils.session import create_session

    DagBundlesManager().sync_bundles_to_db()

    def run(dag):
        # dag.test() only runs DAGs it finds serialized in the DB; register this one directly.
        with create_session() as session:
            update_dag_parsing_results_in_db(
                "dags-folder", None, [LazyDeserializedDAG.from_dag(dag)], {}, None, set(),
                session=session,
            )
        logical_date = datetime(2024, 1, 1, tzinfo=timezone.utc) + timedelta(days=next(_run_dates))
        return dag.test(logical_date=logical_date)

    return run


@pytest.fixture
def task_states():
    """``task_states(dag_run)``: ``{task_id: state}`` of a finished DagRun, from the DB."""

    def states(dag_run) -> dict[str, str]:
        return {ti.task_id: ti.state for ti in dag_run.get_task_instances()}

    return states


@pytest.fixture
def xcom_value():
    """``xcom_value(dag_run, task_id, key)``: an XCom of ``task_id`` in ``dag_run``, from the DB."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    def value(dag_run, task_id: str, key: str = "return_value"):
        with create_session() as session:
            row = session.scalars(XComModel.get_many(
                run_id=dag_run.run_id, key=key, task_ids=task_id, dag_ids=dag_run.dag_id,
            )).first()
            return None if row is None else XComModel.deserialize_value(row)

    return value
