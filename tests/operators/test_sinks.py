"""The sinks against real Delta tables and real local Spark (no spark-submit)."""

from __future__ import annotations

import datetime as dt
import json
import os
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from airflow_provider_delta.core import LoadStart
from airflow_provider_delta.errors import SinkSchemaMismatchError
from airflow_provider_delta.job.driver import run_job
from airflow_provider_delta.job.sinks import DeltaAppendSink, FormatSink
from airflow_provider_delta.job.sinks.blind_append import ENGINE
from airflow_provider_delta.job.sinks.targets import STAGING_FOLDER
from airflow_provider_delta.job.spec import JobSpec, SinkSpec
from tests.conftest import URL_CHARACTERS

from .conftest import delta_rows


def _frame(spark, rows):
    return spark.createDataFrame(
        rows, "id long, part string, ts timestamp"
    )


ROWS_A = [(1, "a b", dt.datetime(2024, 1, 1, 12, tzinfo=dt.timezone.utc)), (2, None, None)]
ROWS_B = [(3, "c/d%", dt.datetime(2024, 1, 2, tzinfo=dt.timezone.utc))]


def test_a_load_between_folders_named_like_urls(spark, url_characters_table, tmp_path):
    """Source and targets in folders a file:// URL would cut at "#" or "?": every batch lands
    in the named target, once, and nothing is made where the URL would end."""
    source, copy = url_characters_table
    delta_target, files_target = str(tmp_path / "out#2 ?y é"), str(tmp_path / "files#2 ?y é")

    def load(kind: str, target: str, end: int):
        sink = SinkSpec(kind=kind, path=target, app_id="url-characters")
        return run_job(spark, JobSpec(table_uri=source, start=LoadStart("changes", 0),
                                      end_version=end, sink=sink))

    created = load("delta", delta_target, 1)  # deltalake creates the target
    appended = load("delta", delta_target, 2)  # the sink's own commit
    again = load("delta", delta_target, 2)
    assert [(b.rows, b.sink_version) for b in created.batches + appended.batches] == [
        (6, 0), (3, 1)]
    assert again.batches == ()
    assert delta_rows(delta_target) == delta_rows(copy)
    assert DeltaTable(delta_target).transaction_version("url-characters") == 2
    commit = Path(delta_target, "_delta_log", f"{1:020d}.json").read_text().splitlines()[0]
    assert json.loads(commit)["commitInfo"]["engineInfo"] == ENGINE

    assert load("format", files_target, 2).batches[0].rows == 9
    written = pq.read_table(os.path.join(files_target, "source_versions=0-2"))
    assert Counter(zip(*written.to_pydict().values())) == delta_rows(copy)
    assert sorted(os.listdir(tmp_path)) == sorted(
        ["plain", URL_CHARACTERS, "out#2 ?y é", "files#2 ?y é"])


def test_delta_sink_creates_partitioned_table_and_commits_txn_once(spark, tmp_path):
    target = str(tmp_path / "target")
    sink = DeltaAppendSink(SinkSpec(kind="delta", path=target, partition_by=("part",),
                                    app_id="app-1"))
    assert sink.committed_version() is None

    first = sink.write(_frame(spark, ROWS_A), 0, 3)
    second = sink.write(_frame(spark, ROWS_B), 4, 4)

    table = DeltaTable(target)
    assert (first.sink_version, second.sink_version) == (0, 1)
    assert (first.rows, second.rows) == (2, 1)
    assert table.metadata().partition_columns == ["part"]
    assert table.transaction_version("app-1") == 4 == sink.committed_version()
    assert delta_rows(target) == Counter(
        {(1, "a b", dt.datetime(2024, 1, 1, 12, tzinfo=dt.timezone.utc)): 1,
         (2, None, None): 1,
         (3, "c/d%", dt.datetime(2024, 1, 2, tzinfo=dt.timezone.utc)): 1}
    )
    # Every committed file lives in a staging folder of its own attempt.
    assert all(f"/{STAGING_FOLDER}/" in uri for uri in table.file_uris())


def test_delta_sink_refuses_mismatched_rows_before_writing(spark, tmp_path):
    target = str(tmp_path / "target")
    spec = SinkSpec(kind="delta", path=target, app_id="app-1")
    DeltaAppendSink(spec).write(_frame(spark, ROWS_A), 0, 0)

    wrong_type = spark.createDataFrame([(1, 2, None)], "id long, part int, ts timestamp")
    with pytest.raises(SinkSchemaMismatchError, match="part"):
        DeltaAppendSink(spec).check(wrong_type)
    with pytest.raises(SinkSchemaMismatchError, match="partition columns"):
        DeltaAppendSink(SinkSpec(kind="delta", path=target, app_id="a",
                                 partition_by=("nope",))).check(wrong_type)
    with pytest.raises(SinkSchemaMismatchError, match="partitioned by"):
        DeltaAppendSink(SinkSpec(kind="delta", path=target, app_id="a",
                                 partition_by=("part",))).check(_frame(spark, ROWS_B))
    assert DeltaTable(target).version() == 0


def test_format_sink_overwrites_a_batch_folder_and_reports_progress(spark, tmp_path):
    target = str(tmp_path / "out")
    sink = FormatSink(SinkSpec(kind="format", path=target, format="parquet"))
    assert sink.committed_version() is None

    sink.write(_frame(spark, ROWS_A), 0, 2)
    rewrite = sink.write(_frame(spark, ROWS_A), 0, 2)  # a re-run of the same batch
    sink.write(_frame(spark, ROWS_B), 3, 5)

    assert rewrite.rows == 2
    assert sink.committed_version() == 5
    ids = sorted(r.id for r in spark.read.parquet(target).collect())
    assert ids == [1, 2, 3]
    assert sorted(os.listdir(target)) == ["source_versions=0-2", "source_versions=3-5"]


def test_delta_sink_commits_partitions_whose_names_start_with_underscore_or_dot(spark, tmp_path):
    target = str(tmp_path / "target")
    rows = [(1, "_hidden", "2024-01-01"), (2, ".dot", "_2024"), (3, "plain", ".x"),
            (4, None, "2024-01-02")]
    frame = spark.createDataFrame(rows, "id long, _kind string, _date string")
    sink = DeltaAppendSink(SinkSpec(kind="delta", path=target, partition_by=("_date", "_kind"),
                                    app_id="app-1"))

    written = sink.write(frame, 0, 0)

    assert written.rows == 4
    assert DeltaTable(target).metadata().partition_columns == ["_date", "_kind"]
    assert delta_rows(target) == Counter(rows)


def test_delta_sink_round_trips_extreme_timestamps(spark, tmp_path):
    target = str(tmp_path / "target")
    utc = dt.timezone.utc
    rows = [(1, "x", dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=utc)),
            (2, "y", dt.datetime(1, 1, 1, tzinfo=utc)),
            (3, "z", dt.datetime(1582, 10, 4, 23, 59, 59, tzinfo=utc))]
    sink = DeltaAppendSink(SinkSpec(kind="delta", path=target, app_id="app-1"))

    sink.write(_frame(spark, rows), 0, 0)

    assert delta_rows(target) == Counter(rows)
    # Only the write used TIMESTAMP_MICROS: the session keeps its own setting.
    assert spark.conf.get("spark.sql.parquet.outputTimestampType") == "INT96"


def test_delta_sink_adds_new_columns_only_with_merge_schema(spark, tmp_path):
    target = str(tmp_path / "target")
    DeltaAppendSink(SinkSpec(kind="delta", path=target, app_id="app-1")).write(
        _frame(spark, ROWS_A), 0, 0)
    wider = spark.createDataFrame([(3, "c", None, "new")],
                                  "id long, part string, ts timestamp, note string")

    with pytest.raises(SinkSchemaMismatchError, match="mergeSchema"):
        DeltaAppendSink(SinkSpec(kind="delta", path=target, app_id="app-1")).check(wider)

    merging = DeltaAppendSink(SinkSpec(kind="delta", path=target, app_id="app-1",
                                       options={"mergeSchema": "true"}))
    merging.check(wider)
    merging.write(wider, 1, 1)

    assert [f.name for f in DeltaTable(target).schema().fields] == ["id", "part", "ts", "note"]
    assert delta_rows(target) == Counter(
        {(1, "a b", dt.datetime(2024, 1, 1, 12, tzinfo=dt.timezone.utc), None): 1,
         (2, None, None, None): 1, (3, "c", None, "new"): 1})
    assert merging.committed_version() == 1
    narrower_types = spark.createDataFrame([(4, 5, None, "x")],
                                           "id long, part int, ts timestamp, note string")
    with pytest.raises(SinkSchemaMismatchError, match="part"):
        merging.check(narrower_types)


def test_delta_sink_refuses_variant_columns_before_writing(spark, tmp_path):
    target = str(tmp_path / "target")
    sink = DeltaAppendSink(SinkSpec(kind="delta", path=target, app_id="app-1"))
    top_level = spark.sql("""select 1L as id, parse_json('{"a": 1}') as v""")
    nested = spark.sql("""select 1L as id, array(named_struct('x', parse_json('2'))) as v""")

    for rows in (top_level, nested):
        with pytest.raises(SinkSchemaMismatchError, match=r"\['v'\] hold VARIANT.*to_json"):
            sink.check(rows)
    assert not os.path.exists(target)
