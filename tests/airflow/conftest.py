"""Fixtures for the sensor, trigger, hook and watermark tests: growing Delta tables, DAG runs."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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

    def optimize(self) -> int:
        """Compact the table's files (an OPTIMIZE commit: files with dataChange=false)."""
        table = DeltaTable(self.uri, storage_options=self.storage_options)
        assert table.optimize.compact()["numFilesRemoved"] > 1, "nothing to compact"
        return self.version()

    def maintain(self) -> int:
        """OPTIMIZE, VACUUM (commitInfo-only commits) and SET TBLPROPERTIES (metaData only):
        commits that change no data. Returns the new latest version."""
        self.optimize()
        table = DeltaTable(self.uri, storage_options=self.storage_options)
        table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
        table.alter.set_table_properties({"delta.logRetentionDuration": "interval 60 days"})
        return self.version()


@pytest.fixture
def growing_table(tmp_path: Path) -> Callable[..., GrowingTable]:
    """``growing_table(commits)``: a table with versions 0..commits-1 (local unless ``uri``)."""

    def make(commits: int = 1, name: str = "table", *, uri: str | None = None,
             storage_options: dict[str, str] | None = None) -> GrowingTable:
        table = GrowingTable(uri or str(tmp_path / name), storage_options)
        table.append(commits)
        return table

    return make


@pytest.fixture
def ranges_of(xcom_value):
    """``ranges_of(dag_run)``: the (start, end) the sensor found, which ``load`` received."""

    def found_range(dag_run) -> tuple[int, int]:
        found = xcom_value(dag_run, "sense")
        assert found is not None, "the sensor returned no range"
        assert found == xcom_value(dag_run, "load")
        return found["start_version"], found["end_version"]

    return found_range


class _EventOnMessage(logging.Handler):
    """Sets an event when a log message containing ``text`` is emitted."""

    def __init__(self, text: str, event: threading.Event):
        super().__init__()
        self.text, self.event = text, event

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.event.set()


@pytest.fixture
def commit_once_deferred():
    """``with commit_once_deferred(table): dag_run = run_dag(dag)`` appends one commit only
    after dag.test() has started running a deferred task's trigger, so the sensor cannot have
    seen it before deferring (``commit``: what to do instead of the append)."""

    @contextmanager
    def arrange(table: GrowingTable, commit: Callable[[], object] | None = None
                ) -> Iterator[None]:
        trigger_running = threading.Event()
        dag_test_log = logging.getLogger("airflow.sdk.definitions.dag")
        handler = _EventOnMessage("running trigger in line", trigger_running)
        dag_test_log.addHandler(handler)
        with _commit_when(trigger_running.wait, commit or table.append):
            try:
                yield
            finally:
                dag_test_log.removeHandler(handler)
        assert trigger_running.is_set(), "the sensor never deferred"

    return arrange


@pytest.fixture
def commit_once_rescheduled():
    """``with commit_once_rescheduled(table, dag_id): run_dag(dag)`` appends one commit once
    the ``sense`` task of ``dag_id`` is up for reschedule (its first poke found nothing)."""
    from sqlalchemy import select

    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState

    def rescheduled(dag_id: str) -> bool:
        with create_session() as session:
            return session.scalar(select(TaskInstance.state).where(
                TaskInstance.dag_id == dag_id, TaskInstance.task_id == "sense",
            )) == TaskInstanceState.UP_FOR_RESCHEDULE

    def wait_for_reschedule(dag_id: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if rescheduled(dag_id):
                return True
            time.sleep(0.1)
        return False

    @contextmanager
    def arrange(table: GrowingTable, dag_id: str) -> Iterator[None]:
        with _commit_when(lambda timeout: wait_for_reschedule(dag_id, timeout), table.append):
            yield

    return arrange


@contextmanager
def _commit_when(wait: Callable[[float], bool], commit: Callable[[], object]) -> Iterator[None]:
    """Run ``commit`` from a thread, once ``wait`` returns true."""
    happened = threading.Event()

    def commit_in_time() -> None:
        if wait(120):
            commit()
            happened.set()

    thread = threading.Thread(target=commit_in_time)
    thread.start()
    try:
        yield
    finally:
        thread.join()
    assert happened.is_set(), "the moment to commit never came"
