"""The change feed of a source with row tracking and without the Change Data Feed, checked by
Delta's engine: twin tables written by delta-spark with the same operations, one with CDF on
(Delta's CDF reader is the reference), one with row tracking on (our feed pairs rewritten rows
by row id). Also: such a source kept by a merge target, and the netting diff no longer used on
it (still used where row tracking is suspended)."""

from __future__ import annotations

import shutil
from collections import Counter

import pytest

from airflow_provider_delta.core import plan_change_feed
from airflow_provider_delta.job.driver import run_job
from airflow_provider_delta.core import row_id_runs
from airflow_provider_delta.spark import change_feed, reader, row_id_changes
from airflow_provider_delta.spark.change_feed import read_change_feed
from tests.delta_spark.conftest import needs_delta_jars
from tests.operators.test_differential import spec_of

pytestmark = [needs_delta_jars, pytest.mark.slow]

_CDF = {"delta.enableChangeDataFeed": "true"}
_ROW_TRACKING = {"delta.enableRowTracking": "true"}
_FEED_KEY = ("id", "v", "p", "_change_type", "_commit_version")


def _create(spark, path: str, properties: dict[str, str]) -> None:
    pairs = ", ".join(f"'{k}' = '{v}'" for k, v in
                      {**properties, "delta.enableDeletionVectors": "false"}.items())
    spark.sql(f"CREATE TABLE delta.`{path}` (id long, v string, p int) USING delta "
              f"PARTITIONED BY (p) TBLPROPERTIES ({pairs})")


def _operations(spark, path: str) -> None:
    """Appends, copy-on-write UPDATE and DELETE, then with deletion vectors a DELETE, an UPDATE
    and a MERGE that updates, inserts and deletes; an UPDATE to the same value; OPTIMIZE."""
    table = f"delta.`{path}`"
    for low in (0, 40):
        spark.sql(f"INSERT INTO {table} SELECT id, concat('a', id), int(id % 2) "
                  f"FROM range({low}, {low + 40})")
    spark.sql(f"UPDATE {table} SET v = concat('u', id) WHERE id % 7 = 0")
    spark.sql(f"DELETE FROM {table} WHERE id % 11 = 3")
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    spark.sql(f"DELETE FROM {table} WHERE id % 13 = 1")
    spark.sql(f"UPDATE {table} SET v = concat('w', id) WHERE id % 5 = 2")
    spark.sql(f"""MERGE INTO {table} t USING (SELECT id, int(id % 2) p FROM range(70, 90)) s
                  ON t.id = s.id
                  WHEN MATCHED AND s.id % 3 = 0 THEN DELETE
                  WHEN MATCHED THEN UPDATE SET v = concat('m', s.id)
                  WHEN NOT MATCHED THEN INSERT (id, v, p) VALUES (s.id, concat('n', s.id), s.p)
               """)
    spark.sql(f"UPDATE {table} SET v = v WHERE id = 4")
    spark.sql(f"OPTIMIZE {table}")
    spark.sql(f"INSERT INTO {table} VALUES (100, 'z', 0)")


def _twins(spark, tmp_path, tracked_properties=_ROW_TRACKING) -> tuple[str, str]:
    reference, tracked = str(tmp_path / "cdf"), str(tmp_path / "row_tracking")
    _create(spark, reference, _CDF)
    _create(spark, tracked, tracked_properties)
    for path in (reference, tracked):
        _operations(spark, path)
    return reference, tracked


def _feed(frame) -> Counter:
    return Counter(tuple(row) for row in frame.select(*_FEED_KEY).collect())


def _deltas_feed(spark, path: str, start: int) -> Counter:
    return _feed(spark.read.format("delta").option("readChangeFeed", "true")
                 .option("startingVersion", start).load(path))


@pytest.fixture(scope="module")
def twins(delta_spark, tmp_path_factory):
    """The twins, written once for the module (tests only read them)."""
    folder = tmp_path_factory.mktemp("twins")
    yield _twins(delta_spark, folder)
    shutil.rmtree(folder, ignore_errors=True)


def test_feed_by_row_id_equals_deltas_change_data_feed(delta_spark, twins, monkeypatch):
    reference, tracked = twins
    joined = _count_calls(monkeypatch, row_id_changes, "_typed_changes")
    with_gaps = _count_calls(monkeypatch, row_id_changes, "entries_with_gaps")
    expected = _deltas_feed(delta_spark, reference, 1)
    assert {key[3] for key in expected} == {
        "insert", "delete", "update_preimage", "update_postimage"}
    ours = read_change_feed(delta_spark, tracked, 1)
    assert ours.columns == ["id", "v", "p", "_change_type", "_commit_version",
                            "_commit_timestamp"]  # no row-tracking column leaks
    assert _feed(ours) == expected
    checked = _checked_paths(monkeypatch)
    narrowed = _count_calls(monkeypatch, row_id_changes._Entries, "narrow")
    gapped, by_spark = {}, {}
    for start in (3, 4, 7, 8, 9):  # single commits too: each kind of rewrite on its own
        before, narrow_before = len(with_gaps), len(narrowed)
        checked.clear()
        assert _feed(read_change_feed(delta_spark, tracked, start, start)) == Counter(
            {k: n for k, n in expected.items() if k[4] == start}), start
        gapped[start] = any(len(entries) for entries in with_gaps[before:])
        by_spark[start] = len(narrowed) > narrow_before
        # each file is checked for existence once: opened for its footer, or by the first
        # of the commit's Spark reads
        assert checked and len(checked) == len(set(checked)), start
    # every commit is read by ranges of row ids, none by a join of ids; where a removed file
    # has a deletion vector (7, 8: gaps in its ranges) its groups are split into runs first,
    # by Spark; the copy-on-write UPDATE and DELETE (3, 4) are told from their files' footers
    # and materialized columns on the driver
    assert not joined
    assert gapped[7] and gapped[8]
    assert not by_spark[3] and not by_spark[4] and by_spark[7]


def test_feed_by_row_id_over_files_of_many_row_groups(delta_spark, tmp_path, monkeypatch):
    """Row groups of about 100 rows: a rewrite's file holds groups that are one run (told by
    the footer) and groups with gaps or updated rows (their columns read)."""
    reference, tracked = str(tmp_path / "cdf"), str(tmp_path / "row_tracking")
    reads = _count_calls(monkeypatch, row_id_runs, "_read_runs")
    footer = _count_calls(monkeypatch, row_id_runs, "_runs")
    delta_spark.conf.set("parquet.block.size", "1")
    try:
        for path, properties in ((reference, _CDF), (tracked, _ROW_TRACKING)):
            _create(delta_spark, path, properties)
            table = f"delta.`{path}`"
            delta_spark.sql(f"INSERT INTO {table} SELECT /*+ COALESCE(1) */ id, "
                            "concat('a', id), 0 FROM range(0, 1000)")
            delta_spark.sql(f"DELETE FROM {table} WHERE id % 97 = 5 AND id < 500")
            delta_spark.sql(f"UPDATE {table} SET v = 'u' WHERE id IN (610, 611, 900)")
    finally:
        delta_spark.conf.unset("parquet.block.size")
    assert _feed(read_change_feed(delta_spark, tracked, 1)) == _deltas_feed(
        delta_spark, reference, 1)
    assert reads and footer  # both kinds of row group were met


def test_feed_by_a_join_of_ids_where_runs_are_too_many(delta_spark, twins, monkeypatch):
    reference, tracked = twins
    monkeypatch.setattr(row_id_changes, "_MAX_COLLECTED", 4)
    joined = _count_calls(monkeypatch, row_id_changes, "_typed_changes")
    assert _feed(read_change_feed(delta_spark, tracked, 1)) == _deltas_feed(
        delta_spark, reference, 1)
    assert joined


def _count_calls(monkeypatch, module, name: str) -> list:
    """The results of the calls of ``module.name``, one per call (it still runs)."""
    results, real = [], getattr(module, name)
    monkeypatch.setattr(module, name, lambda *args, **kw: results.append(
        real(*args, **kw)) or results[-1])
    return results


def _checked_paths(monkeypatch) -> list:
    """The paths of the files checked for existence before a read or opened on the driver
    for their footers (both still run)."""
    paths, real, opened = [], reader.check_files_exist, row_id_runs._open
    monkeypatch.setattr(reader, "check_files_exist", lambda plan, options, **kw: paths.extend(
        plan.file_table.column("path").to_pylist()) or real(plan, options, **kw))
    monkeypatch.setattr(row_id_runs, "_open", lambda file, *args: paths.append(
        file.uri) or opened(file, *args))
    return paths


def _count_netting(monkeypatch) -> list:
    """The calls of the netting diff, counted (it still runs)."""
    return _count_calls(monkeypatch, change_feed, "_net_changes")


def test_merge_target_stays_equal_to_a_row_tracking_source(
        delta_spark, twins, tmp_path, monkeypatch):
    _, tracked = twins
    target = str(tmp_path / "target")
    netted = _count_netting(monkeypatch)
    run_job(delta_spark, spec_of(tracked, target, 0, None, change_feed=True, max_files=3))
    assert not netted
    source_rows = Counter(tuple(r) for r in delta_spark.read.format("delta").load(tracked)
                          .select("id", "v", "p").collect())
    assert source_rows == Counter(tuple(r) for r in delta_spark.read.format("delta")
                                  .load(target).select("id", "v", "p").collect())


def test_netting_diff_is_used_only_where_row_tracking_is_suspended(
        delta_spark, twins, tmp_path, monkeypatch):
    netted = _count_netting(monkeypatch)
    reference, tracked = twins
    assert _feed(read_change_feed(delta_spark, tracked, 1)) == _deltas_feed(
        delta_spark, reference, 1)
    assert not netted
    assert {c.version for c in plan_change_feed(tracked, 1).commits if c.row_tracking} == {
        3, 4, 7, 8, 9}

    _, suspended = _twins(delta_spark, tmp_path / "suspended", {
        "delta.feature.rowTracking": "supported", "delta.rowTrackingSuspended": "true"})
    read_change_feed(delta_spark, suspended, 1).collect()
    assert len(netted) == 1
    assert not any(c.row_tracking for c in plan_change_feed(suspended, 1).commits)
    shutil.rmtree(tmp_path, ignore_errors=True)
