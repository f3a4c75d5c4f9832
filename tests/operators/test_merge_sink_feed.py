"""A merge batch's change feed read on the driver with Arrow (no Spark job) must equal the
Spark reader's feed of the same plan, row for row, or be left to Spark."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_provider_delta.core import plan_change_feed
from airflow_provider_delta.job.arrow_feed import read_feed_on_driver
from airflow_provider_delta.job.driver import run_job
from airflow_provider_delta.spark.change_feed import read_feed
from tests.spark.conftest import table_rows
from tests.spark.test_change_feed import CDF_ON, write_changes

from .conftest import delta_rows
from .test_merge_sink import _job


def _spark_and_driver_feeds(spark, path: str, start: int = 0, end: int | None = None):
    feed = plan_change_feed(path, start, end)
    return table_rows(read_feed(spark, feed).toArrow()), read_feed_on_driver(feed)


@pytest.mark.parametrize("name, on_driver", [
    ("delta-rs/cdf-table", True),  # cdc files, a date partition
    ("delta-rs/simple_table_with_cdc", True),  # Spark's legacy calendar flags, no dates
    ("delta-golden/data-reader-partition-values", True),  # every partition type, nulls
    ("delta-golden/data-reader-primitives", True),
    ("delta-golden/data-reader-map", True),
    ("delta-golden/data-reader-nested-struct", True),
    ("delta-golden/data-reader-array-primitives", True),
    ("delta-golden/data-reader-timestamp_ntz", True),
    ("delta-golden/kernel-timestamp-TIMESTAMP_MICROS", True),
    ("delta-golden/basic-decimal-table", True),
    ("delta-golden/data-reader-escaped-chars", True),
    ("delta-golden/hive/deltatbl-column-names-case-insensitive", True),
    ("delta-golden/time-travel-schema-changes-b", True),  # an added column
    ("delta-rs/delta-0.8.0-special-partition", True),
    ("delta-kernel/basic-dv-no-checkpoint", False),  # deletion vectors
    ("delta-rs/table_with_column_mapping", False),
    ("delta-golden/kernel-timestamp-INT96", False),  # Spark rebases INT96
    ("delta-golden/type-widening", False),  # int to double, decimals: Spark's widening rules
    ("delta-rs/simple_table", False),  # copy-on-write without CDF: netted
])
def test_driver_feed_of_a_shared_table_equals_sparks_or_is_left_to_spark(
        spark, shared_table, name, on_driver):
    feed = plan_change_feed(shared_table(name), 0)
    driver_rows = read_feed_on_driver(feed)
    assert (driver_rows is not None) == on_driver
    if on_driver:
        assert table_rows(driver_rows) == table_rows(read_feed(spark, feed).toArrow())


def test_written_feed_with_partitions_added_columns_and_widened_ints(spark, tmp_path):
    """Older files lack the added column (null) and hold int32 where the table has int64."""
    path = str(tmp_path / "t")
    day = dt.date(2024, 1, 2)
    write_deltalake(path, pa.table({"id": pa.array([1, 2, 3], pa.int32()), "day": [day] * 3,
                                    "v": ["a", "b", "c"]}),
                    partition_by=["day"], configuration=CDF_ON)
    table = DeltaTable(path)
    table.update(updates={"v": "'b2'"}, predicate="id = 2")
    write_deltalake(path, pa.table({"id": pa.array([4], pa.int64()), "day": [None],
                                    "v": ["d"], "added": [1.5]}),
                    mode="append", schema_mode="merge")
    DeltaTable(path).delete("id = 1")
    spark_rows, on_driver = _spark_and_driver_feeds(spark, path)
    assert on_driver is not None and table_rows(on_driver) == spark_rows


@pytest.mark.parametrize("start, end", [(0, None), (1, 3), (4, 5)])
def test_written_cdf_feed_on_the_driver_equals_sparks(spark, tmp_path, start, end):
    path = str(tmp_path / "t")
    write_changes(path, CDF_ON)
    spark_rows, on_driver = _spark_and_driver_feeds(spark, path, start, end)
    assert on_driver is not None and table_rows(on_driver) == spark_rows


def test_a_small_merge_batch_runs_no_spark_job(spark, tmp_path):
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    write_changes(source, CDF_ON)
    run_job(spark, _job(source, target, 0, 3))
    jobs_before = spark.sparkContext.statusTracker().getJobIdsForGroup(None)

    run_job(spark, _job(source, target, 4))

    assert spark.sparkContext.statusTracker().getJobIdsForGroup(None) == jobs_before
    assert delta_rows(target) == delta_rows(source)
