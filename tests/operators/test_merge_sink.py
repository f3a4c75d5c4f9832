"""The delta-merge sink run by the driver's run_job on real local Spark (no spark-submit):
a change feed applied by key keeps the target equal to the source, exactly once."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_provider_delta.core import LoadStart
from airflow_provider_delta.errors import (
    InvalidParameterError, MergeInputError, SinkSchemaMismatchError,
)
from airflow_provider_delta.job.driver import run_job
from airflow_provider_delta.job.sinks import DeltaMergeSink
from airflow_provider_delta.job.spec import JobSpec, SinkSpec
from airflow_provider_delta.spark import read_change_feed
from tests.spark.test_change_feed import CDF_ON, write_changes

from .conftest import delta_rows, run_twice_at_once

APP_ID = "merge-app"


def _job(source: str, target: str, start: int = 0, end: int | None = None, *,
         keys: tuple[str, ...] = ("id",), change_feed: bool = True, **options) -> JobSpec:
    sink = SinkSpec(kind="delta-merge", path=target, app_id=APP_ID, merge_keys=keys)
    return JobSpec(table_uri=source, start=LoadStart("changes", start), sink=sink,
                   end_version=end, change_feed=change_feed, **options)


@pytest.mark.parametrize("cdf, max_files", [(True, None), (False, 1)])
def test_merged_target_equals_source_and_reruns_apply_nothing(spark, tmp_path, cdf, max_files):
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    write_changes(source, CDF_ON if cdf else None)

    first = run_job(spark, _job(source, target, 0, 3, max_files=max_files))
    assert delta_rows(target) == delta_rows(source, 3)
    assert DeltaTable(target).transaction_version(APP_ID) == 3
    run_job(spark, _job(source, target, 4, max_files=max_files))
    assert delta_rows(target) == delta_rows(source)
    if max_files == 1:  # one batch per commit: v0, v1, v2 and v3 committed one by one
        assert [b.end_version for b in first.batches] == [0, 1, 2, 3]

    version = DeltaTable(target).version()
    again = run_job(spark, _job(source, target, 0, 5, max_files=max_files))  # a re-run
    assert again.batches == () and DeltaTable(target).version() == version


def test_a_change_feed_merged_between_folders_named_like_urls(spark, tmp_path):
    """The feed's change files and the target in folders a file:// URL would cut at "#"."""
    source, target = str(tmp_path / "in#1 ?x é"), str(tmp_path / "out#2 ?y é")
    write_changes(source, CDF_ON)
    run_job(spark, _job(source, target, 0, 3))  # deltalake creates the target
    run_job(spark, _job(source, target, 4))
    assert delta_rows(target) == delta_rows(source)
    assert DeltaTable(target).transaction_version(APP_ID) == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in#1 ?x é", "out#2 ?y é"]


def _source(path: str, ids: list[int | None], names: list[str]) -> None:
    write_deltalake(path, pa.table({"id": pa.array(ids, pa.int64()), "name": names}),
                    configuration=CDF_ON)


def test_null_and_duplicate_keys_are_refused_before_writing(spark, tmp_path):
    nulls, twice, target = (str(tmp_path / n) for n in ("nulls", "twice", "target"))
    _source(nulls, [1, None], ["a", "b"])
    _source(twice, [1, 1, 2], ["a", "b", "c"])
    with pytest.raises(MergeInputError, match=r"null in merge_keys \['id'\]"):
        run_job(spark, _job(nulls, target))
    with pytest.raises(MergeInputError, match=r"version 0 holds 2 rows with merge_keys \['id'\]"
                                              r" = \[1\]"):
        run_job(spark, _job(twice, target))
    assert not (tmp_path / "target").exists()


def test_keys_not_in_the_rows_and_plain_loads_are_refused(spark, tmp_path):
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    _source(source, [1, 2], ["a", "b"])
    # Not in the source: the plan path refuses it, in the driver as in the operator.
    with pytest.raises(InvalidParameterError, match=r"merge_keys=\['nope'\] names columns"):
        run_job(spark, _job(source, target, keys=("nope",)))
    # Dropped by the sql: the sink refuses the rows.
    dropped = "select name, _change_type, _commit_version, _commit_timestamp from changes"
    with pytest.raises(MergeInputError, match=r"merge_keys \['id'\] are not columns"):
        run_job(spark, _job(source, target, sql=dropped))
    with pytest.raises(MergeInputError, match="load with change_feed=True"):
        run_job(spark, _job(source, target, change_feed=False))
    assert not (tmp_path / "target").exists()


def test_target_with_another_schema_is_refused(spark, tmp_path):
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    _source(source, [1, 2], ["a", "b"])
    write_deltalake(target, pa.table({"id": pa.array([1], pa.int64()), "other": [1.5]}))
    with pytest.raises(SinkSchemaMismatchError, match="other"):
        run_job(spark, _job(source, target))
    assert DeltaTable(target).version() == 0


def test_merge_reads_only_target_files_whose_key_range_holds_a_changed_key(spark, tmp_path):
    """A target loaded in batches keeps its files clustered by key; a later change of a few
    keys must not read the other files (they are moved away while it runs)."""
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    for first in range(0, 100, 25):  # v0..v3: ids 0..99, one file each
        ids = pa.array(range(first, first + 25), pa.int64())
        write_deltalake(source, pa.table({"id": ids, "name": pa.array(ids).cast(pa.string())}),
                        mode="append", configuration=CDF_ON if not first else None)
    run_job(spark, _job(source, target, 0, 3, max_files=1))
    DeltaTable(source).update(updates={"name": "'changed'"}, predicate="id >= 90 AND id < 95")
    DeltaTable(source).delete("id = 99")

    files = pa.table(DeltaTable(target).get_add_actions(flatten=True)).to_pylist()
    untouched = [Path(target, f["path"]) for f in files if f["max.id"] < 90]
    assert len(untouched) == 3 and len(files) == 4
    for path in untouched:
        path.rename(tmp_path / path.name)
    run_job(spark, _job(source, target, 4))
    for path in untouched:
        (tmp_path / path.name).rename(path)
    assert delta_rows(target) == delta_rows(source)


class _RacingMergeSink(DeltaMergeSink):
    """The real sink; both runs wait at the barrier right before creating the target."""

    barrier: threading.Barrier

    def _create(self, *args):
        self.barrier.wait(timeout=120)
        return super()._create(*args)


def test_two_first_runs_creating_the_target_at_once_write_each_row_once(spark, tmp_path):
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    _source(source, [1, 2, 3], ["a", "b", "c"])
    feed = read_change_feed(spark, source, 0, 0)
    spec = _job(source, target).sink
    _RacingMergeSink.barrier = threading.Barrier(2)
    run_twice_at_once(lambda: _RacingMergeSink(spec).write(feed, 0, 0))

    assert delta_rows(target) == delta_rows(source)


def test_a_late_run_does_not_merge_a_batch_another_run_merged_since(spark, tmp_path):
    """Two runs of one task overlap: the late one looked before the other merged versions 0
    and 1; merging its stale batch 0 again would bring back the old name of key 1."""
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    _source(source, [1, 2], ["a", "b"])
    DeltaTable(source).update(updates={"name": "'a2'"}, predicate="id = 1")
    late = DeltaMergeSink(_job(source, target).sink)
    late.check_target(source)  # the late run looks at the target: not created yet

    run_job(spark, _job(source, target, 0, 1, max_files=1))
    version = DeltaTable(target).version()
    late.write(read_change_feed(spark, source, 0, 0), 0, 0)

    assert delta_rows(target) == delta_rows(source)
    assert DeltaTable(target).version() == version
