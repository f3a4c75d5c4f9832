"""Conformance on the shared reference tables: snapshots, append ranges, change ranges, errors."""

from __future__ import annotations

from collections import Counter

import pytest
from deltalake import DeltaTable

from airflow_provider_delta.core import plan_changes
from airflow_provider_delta.errors import (
    DataChangeError,
    DeltaProviderError,
    LogGapError,
    UnsupportedFeatureError,
)
from airflow_provider_delta.spark import read_changes, read_plan, read_snapshot

from tests.conftest import shared_manifest
from tests.spark.conftest import oracle_rows, plan_rows, spark_rows

MANIFEST = shared_manifest()
# Tables refused by design from some version on (reader features the provider does not read):
# table -> (error, first refused version).
REFUSED = {
    "delta-kernel/catalog-owned-preview": (UnsupportedFeatureError, 0),
    "delta-rs-errors/table_d": (UnsupportedFeatureError, 0),
}
# Tables the oracle (deltalake's DataFusion) refuses from some version on: compared with it below
# that version here; test_type_widening.py reads the rest with its own oracle.
ORACLE_REFUSES_FROM = {"delta-golden/type-widening": 1}


def _versions(name: str) -> range:
    low, high = MANIFEST[name]["versions"].split("..")
    return range(int(low), int(high) + 1)


def _readable_versions(name: str) -> range:
    versions = _versions(name)
    refused_from = REFUSED.get(name, (None, versions[-1] + 1))[1]
    return range(versions[0], min(refused_from, ORACLE_REFUSES_FROM.get(name, refused_from)))


def _readable_tables() -> list[str]:
    return [
        name for name, row in MANIFEST.items()
        if row["data_files"] == "present" and _readable_versions(name)
    ]


def _with_class(word: str) -> list[str]:
    return [n for n in _readable_tables() if word in MANIFEST[n]["classes"]
            and n not in REFUSED and n not in ORACLE_REFUSES_FROM]


@pytest.mark.parametrize("name", _readable_tables())
def test_snapshot_at_every_version_equals_oracle(spark, shared_table, assert_same_rows, name):
    path = shared_table(name)
    for version in _readable_versions(name):
        got = spark_rows(read_snapshot(spark, path, version=version))
        assert_same_rows(got, oracle_rows(path, version))


@pytest.mark.parametrize("name", _readable_tables())
def test_snapshot_has_the_table_columns_in_order(spark, shared_table, name):
    path = shared_table(name)
    version = _readable_versions(name)[-1]
    df = read_snapshot(spark, path, version=version)
    expected = [f.name for f in DeltaTable(path, version=version).schema().fields]
    assert df.columns == expected


@pytest.mark.parametrize("name", _with_class("append-only-multiversion"))
def test_append_range_equals_snapshot_difference(spark, shared_table, assert_same_rows, name):
    path = shared_table(name)
    versions = _versions(name)
    last = versions[-1]
    middle = versions[len(versions) // 2]
    ranges = {(versions[0], last), (middle, last), (last, last), (versions[0], middle), (1, 1)}
    for start, end in sorted(ranges):
        got = spark_rows(read_changes(spark, path, start, end))
        expected = oracle_rows(path, end)
        if start > versions[0]:
            expected = expected - _padded(oracle_rows(path, start - 1), _width(expected))
        assert_same_rows(got, expected)


def _width(rows: Counter) -> int:
    return len(next(iter(rows))) if rows else 0


def _padded(rows: Counter, width: int) -> Counter:
    """Rows read before an additive schema change, with NULL for the columns added since."""
    return Counter({row + (None,) * (width - len(row)): n for row, n in rows.items()})


@pytest.mark.parametrize("name", _with_class("deletes/updates"))
@pytest.mark.parametrize(
    "option", ["ignore_deletes", "ignore_changes", "skip_change_commits"]
)
def test_change_range_equals_admitted_files(spark, shared_table, assert_same_rows, name, option):
    path = shared_table(name)
    versions = _versions(name)
    try:
        plan = plan_changes(path, versions[0], versions[-1], **{option: True})
    except DeltaProviderError as refused:  # the option does not admit a commit, or a schema change
        with pytest.raises(type(refused)):
            read_changes(spark, path, versions[0], versions[-1], **{option: True})
        return
    if plan.metadata.column_mapping_mode != "none":
        pytest.skip("the pyarrow oracle reads files without column mapping")
    assert_same_rows(spark_rows(read_plan(spark, plan)), plan_rows(plan))
    got = spark_rows(read_changes(spark, path, versions[0], versions[-1], **{option: True}))
    assert_same_rows(got, plan_rows(plan))


def test_changes_without_options_refuse_a_delete(spark, shared_table):
    path = shared_table("delta-golden/basic-with-inserts-deletes-checkpoint")
    with pytest.raises(DataChangeError) as error:
        read_changes(spark, path, 4, 6)
    assert error.value.version == 5


def test_same_path_read_with_each_of_its_deletion_vectors(spark, shared_table, assert_same_rows):
    """A DV delete re-adds the file it changes: under ignore_changes each AddFile of the path
    is read with its own vector (part=0 is added at v0, then re-added at v1 and v6)."""
    path = shared_table("delta-golden/dv-partitioned-with-checkpoint")
    plan = plan_changes(path, 0, 6, ignore_changes=True)
    paths = [f.path for f in plan.files]
    assert max(paths.count(p) for p in paths) >= 2
    df = read_plan(spark, plan)
    assert_same_rows(spark_rows(df), plan_rows(plan))
    live = sum(f.num_records - (f.deletion_vector.cardinality if f.deletion_vector else 0)
               for f in plan.files)
    assert df.count() == live > 50


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_features_raise(spark, shared_table, name):
    path = shared_table(name)
    error, version = REFUSED[name]
    with pytest.raises(error) as raised:
        read_snapshot(spark, path, version=version)
    assert path in str(raised.value)
    with pytest.raises(error):
        read_changes(spark, path, version, version)


@pytest.mark.parametrize(
    "name, error",
    [
        ("delta-golden/versions-not-contiguous", LogGapError),
        ("delta-golden/deltalog-invalid-protocol-version", UnsupportedFeatureError),
        ("delta-golden/deltalog-state-reconstruction-without-metadata", DeltaProviderError),
    ],
)
def test_error_tables_raise(spark, shared_table, name, error):
    path = shared_table(name)
    end = _versions(name)[-1]
    with pytest.raises(error):
        read_changes(spark, path, 0, end)


def test_timestamp_time_travel(spark, time_travel_table, assert_same_rows):
    path = time_travel_table
    cases = {
        "2018-10-24T21:14:18Z": 0,  # exactly the first commit
        "2018-10-24T21:30:00Z": 0,
        "2018-10-24T21:34:18Z": 1,
        "2018-10-24T21:54:18Z": 2,  # exactly the last commit
    }
    for timestamp, version in cases.items():
        got = spark_rows(read_snapshot(spark, path, timestamp=timestamp))
        assert_same_rows(got, oracle_rows(path, version))
