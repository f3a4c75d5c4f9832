"""Requests that cannot succeed: a clear error, nothing committed, the watermark unchanged.

Requests the operators can judge alone fail before any Spark starts (no SparkSession here);
failures inside the job are shown by running the driver's ``run_job`` on the test session.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_provider_delta.core import LoadStart
from airflow_provider_delta.errors import (
    InvalidParameterError,
    SinkSchemaMismatchError,
    VersionNotAvailableError,
    WatermarkError,
)
from airflow_provider_delta.job.driver import run_job
from airflow_provider_delta.job.spec import JobSpec, SinkSpec
from airflow_provider_delta.operators import (
    DeltaIncrementalOperator, DeltaTimeTravelOperator, version_range,
)
from airflow_provider_delta.watermarks import VariableWatermarkStore

from .conftest import append_rows, delta_rows


@pytest.fixture
def source(tmp_path):
    path = str(tmp_path / "source")
    append_rows(path, [0, 1])
    append_rows(path, [2])
    return path


def _run(operator):
    """``execute`` with the only context key these paths use; a watermark read would fail."""
    return operator.execute({"run_id": "manual__bad_input"})


@pytest.mark.parametrize(("request_", "problem"), [
    ({"version": 1, "timestamp": "2024-01-01T00:00:00"},
     "version=1 is given with timestamp='2024-01-01T00:00:00'; give exactly one"),
    ({}, "version=None is not given, nor is timestamp; give exactly one"),
], ids=["both", "neither"])
def test_time_travel_needs_exactly_one_of_version_and_timestamp(source, tmp_path, request_,
                                                                 problem):
    """Both given and neither given are told apart."""
    target = str(tmp_path / "target")
    with pytest.raises(InvalidParameterError) as refused:
        DeltaTimeTravelOperator(task_id="tt", table_uri=source, target=target, **request_)
    assert str(refused.value).startswith(f"tt: {source}: {problem}")
    assert not os.path.exists(target)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"start_version": "2", "end_version": "1"}, ValueError, "start_version=2 is after"),
        ({"start_version": 1, "end_version": 5}, VersionNotAvailableError, "5 is not available"),
        ({"start_version": 7}, ValueError, "start_version=7 is after the latest version"),
    ],
)
def test_explicit_range_is_checked_before_submitting(source, tmp_path, kwargs, error, message):
    target = str(tmp_path / "target")
    with pytest.raises(error, match=message):
        _run(DeltaIncrementalOperator(task_id="load", table_uri=source, target=target,
                                      conn_id="no_such_spark", **kwargs))
    assert not os.path.exists(target)


def test_time_travel_outside_the_log_fails_before_submitting(source, tmp_path):
    target = str(tmp_path / "target")
    for request in ({"version": 9}, {"timestamp": "2001-01-01T00:00:00"}):
        operator = DeltaTimeTravelOperator(task_id="tt", table_uri=source, target=target,
                                           conn_id="no_such_spark", **request)
        with pytest.raises(VersionNotAvailableError, match="is not available"):
            _run(operator)
    assert not os.path.exists(target)


@pytest.mark.parametrize("column", ["_change_type", "_Commit_Version"])
def test_a_feed_column_clash_is_refused_before_spark_submit(tmp_path, column):
    """Planned by the operator through the job's plan path: refused at task start. Had it got
    as far as spark-submit, the missing Spark connection would have been the error."""
    source, target = str(tmp_path / "feed_source"), str(tmp_path / "target")
    write_deltalake(source, pa.table({"id": [1, 2], column: pa.array([5, 6], pa.int64())}),
                    configuration={"delta.enableChangeDataFeed": "true"})
    for sink in ({"sink": "delta"}, {"sink": "delta-merge", "merge_keys": ["id"]}):
        load = DeltaIncrementalOperator(task_id="load", table_uri=source, target=target,
                                        start_version=0, end_version=0, change_feed=True,
                                        conn_id="no_such_spark", **sink)
        with pytest.raises(InvalidParameterError) as refused:
            _run(load)
        assert f"but the source has ['{column}'] at version 0" in str(refused.value)
        assert refused.value.parameter == "change_feed" and source in str(refused.value)
    assert not os.path.exists(target)


def _spec(source, target, **kwargs):
    sink = SinkSpec(kind="delta", path=target, app_id="bad-input")
    return JobSpec(table_uri=source, start=LoadStart("changes", 0), end_version=1, sink=sink,
                   **kwargs)


def test_a_transform_that_raises_commits_nothing(spark, source, tmp_path):
    target = str(tmp_path / "target")
    with pytest.raises(ValueError, match="bad data"):
        run_job(spark, _spec(source, target, transform="operators.transforms:raise_error"))
    assert not os.path.exists(target)


def test_a_transform_that_writes_by_itself_may_return_none(spark, source):
    """Only a sink needs the transform's rows: with ``sink=None`` None is what it returns."""
    spec = replace(_spec(source, "unused"), sink=SinkSpec(kind="none"),
                   transform="operators.transforms:return_none")
    result = run_job(spark, spec)
    assert [(b.start_version, b.end_version, b.rows) for b in result.batches] == [(0, 1, None)]


def test_rows_that_do_not_fit_the_target_commit_nothing(spark, source, tmp_path):
    target = str(tmp_path / "target")
    run_job(spark, _spec(source, target))
    before = delta_rows(target)
    widened = _spec(source, target, sql="select id, name, 1 as extra from changes")
    # Another task's appId: the first task's txn would (rightly) skip the range.
    widened = replace(widened, sink=replace(widened.sink, app_id="another-task"))
    with pytest.raises(SinkSchemaMismatchError, match="do not match the target table"):
        run_job(spark, widened)
    assert DeltaTable(target).version() == 0 and delta_rows(target) == before


def test_an_unwritable_target_commits_nothing(spark, source, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")  # unwritable even for root: the parent is a file
    with pytest.raises(Exception, match="(?i)not a directory|already exists|mkdirs"):
        run_job(spark, _spec(source, str(blocker / "target")))
    assert blocker.read_text() == "not a folder"


def test_recreated_source_is_refused_unless_reset(source, tmp_path, monkeypatch):
    """The watermark's table id differs from the source's: it was dropped and recreated."""
    old_id = DeltaTable(source).metadata().id
    # An environment variable is a real Airflow Variable (secrets backend), no DB needed.
    monkeypatch.setenv("AIRFLOW_VAR_SOURCE_WM",
                       json.dumps({source: {"version": 1, "table_id": old_id}}))
    shutil.rmtree(source)
    for ids in ([0], [1], [2], [3]):
        append_rows(source, ids)  # versions 0..3 of a new table
    new_id = DeltaTable(source).metadata().id

    def load(**kwargs):
        return DeltaIncrementalOperator(
            task_id="load", table_uri=source, target=str(tmp_path / "t"),
            watermark_store="variable", watermark_key="source_wm", **kwargs,
        )

    with pytest.raises(WatermarkError) as caught:
        version_range.from_watermark(load(), {})
    assert old_id in str(caught.value) and new_id in str(caught.value)
    reset = load(initial="earliest", reset_if_ahead=True)
    assert version_range.from_watermark(reset, {}) == (LoadStart("changes", 0), 3)

    class Kept(VariableWatermarkStore):
        """Keeps what the operator writes (a Variable write needs the metadata DB)."""

        def _put(self, context, value):
            self.value = value

    reset.store = Kept(key="source_wm", table_uri=source)
    reset.advance_watermark({}, 3)
    assert reset.store.value == {"version": 3, "table_id": new_id}
