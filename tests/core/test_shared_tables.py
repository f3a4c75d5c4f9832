"""The core against every shared reference table (each copied to a temp folder first)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from airflow_provider_delta.core import latest_version, plan_changes, plan_snapshot, split_batches
from airflow_provider_delta.errors import (
    DataChangeError, InvalidLogError, LogGapError, SchemaChangeError, UnsupportedFeatureError,
    VersionNotAvailableError,
)
from tests.conftest import shared_manifest
from tests.core.conftest import data_change_adds, has_data_change_remove

MANIFEST = shared_manifest()
# Tables whose log is broken or refused: which call shows it, and with what error.
ERROR_TABLES = {
    "delta-golden/versions-not-contiguous": LogGapError,
    "delta-rs-errors/table_c": LogGapError,
    "delta-golden/deltalog-invalid-protocol-version": UnsupportedFeatureError,
    "delta-golden/deltalog-state-reconstruction-without-metadata": InvalidLogError,
    "delta-kernel/catalog-owned-preview": UnsupportedFeatureError,
    "delta-rs-errors/table_d": UnsupportedFeatureError,
}
READABLE = sorted(name for name in MANIFEST if name not in ERROR_TABLES)


def version_window(name: str) -> tuple[int, int]:
    low, high = MANIFEST[name]["versions"].split("..")
    return int(low), int(high)


@pytest.mark.parametrize("name", READABLE)
def test_latest_version(shared_table, name):
    path = shared_table(name)
    low, high = version_window(name)
    assert latest_version(path) == high
    assert latest_version(path, since=low) == high
    assert latest_version("file://" + path, since=high) == high


@pytest.mark.parametrize("name", READABLE)
def test_append_only_ranges_equal_the_commits(shared_table, name):
    """Every range without data-changing removes plans exactly the commits' AddFiles."""
    path = shared_table(name)
    low, high = version_window(name)
    if name == "delta-rs/checkpoints_vacuumed":
        low = 5  # its log was cleaned below the checkpoint at 5
    changing = {v for v in range(low, high + 1) if has_data_change_remove(path, v)}
    for start in range(low, high + 1):
        for end in range(start, high + 1):
            if changing & set(range(start, end + 1)) or _schema_break(name, start, end):
                continue
            plan = plan_changes(path, start, end)
            expected = [(v, p) for v in range(start, end + 1) for p in data_change_adds(path, v)]
            assert [(f.version, f.path) for f in plan] == expected, (start, end)
            assert (plan.start_version, plan.end_version) == (start, end)


def _schema_break(name: str, start: int, end: int) -> bool:
    return name.endswith("partition-changes-b") and start == 0 and end >= 1


CHANGE_TABLES = sorted(
    name for name in READABLE if any(kind in MANIFEST[name]["commit_kinds"]
                                     for kind in ("update", "delete"))
)


@pytest.mark.parametrize("name", CHANGE_TABLES)
def test_change_commits_follow_delta_streaming_rules(shared_table, name):
    """Per changing commit, each option decides exactly as Delta's validateCommitAndDecideSkipping."""
    path = shared_table(name)
    low, high = version_window(name)
    low = max(low, 1)
    for version in range(low, high + 1):
        if not has_data_change_remove(path, version) or _schema_break(name, version - 1, version):
            continue
        adds = data_change_adds(path, version)
        with pytest.raises(DataChangeError) as caught:
            plan_changes(path, version, version)
        assert caught.value.version == version and caught.value.removed_path
        if adds:
            with pytest.raises(DataChangeError, match="ignore_changes"):
                plan_changes(path, version, version, ignore_deletes=True)
        else:
            assert len(plan_changes(path, version, version, ignore_deletes=True)) == 0
        assert [f.path for f in plan_changes(path, version, version, ignore_changes=True)] == adds
        assert len(plan_changes(path, version, version, skip_change_commits=True)) == 0
        both = plan_changes(path, version, version, ignore_changes=True, skip_change_commits=True)
        assert len(both) == 0


def _deltalake_opens(path: str, version: int) -> DeltaTable | None:
    try:
        return DeltaTable(path, version=version)
    except Exception:  # deltalake refuses some tables we read; nothing to compare then
        return None


@pytest.mark.parametrize("name", READABLE)
def test_snapshot_files_match_deltalake(shared_table, name):
    """Live files, typed partition values and deletion vectors per version, as deltalake sees them."""
    path = shared_table(name)
    low, high = version_window(name)
    compared = 0
    for version in range(low, high + 1):
        try:
            plan = plan_snapshot(path, version=version)
        except VersionNotAvailableError:
            assert name == "delta-rs/checkpoints_vacuumed"
            continue
        oracle = _deltalake_opens(path, version)
        if oracle is None:
            continue
        actions = pa.table(oracle.get_add_actions(flatten=True)).to_pylist()
        expected = sorted(
            (str(Path(path) / _decode(a["path"])),
             tuple(sorted((k[len("partition."):], v) for k, v in a.items()
                          if k.startswith("partition."))))
            for a in actions
        )
        ours = sorted((f.path[len("file://"):], tuple(sorted(f.partition_values.items())))
                      for f in plan)
        assert ours == expected, version
        assert {f.version for f in plan} <= {version}
        compared += 1
    assert compared or name in {"delta-rs/checkpoints_vacuumed"}


def _decode(path: str) -> str:
    from urllib.parse import unquote

    return unquote(path)


@pytest.mark.parametrize("name", sorted(ERROR_TABLES))
def test_error_tables_raise_their_error(shared_table, name):
    path = shared_table(name)
    error = ERROR_TABLES[name]
    _, high = version_window(name)
    with pytest.raises(error) as caught:
        plan_snapshot(path, version=high)
    assert path in str(caught.value)
    with pytest.raises(error):
        plan_changes(path, 0, high)


def test_non_additive_partition_change_names_the_version(shared_table):
    path = shared_table("delta-golden/time-travel-partition-changes-b")
    with pytest.raises(SchemaChangeError) as caught:
        plan_changes(path, 0, 1, ignore_changes=True)
    assert caught.value.version == 1 and "partition columns" in str(caught.value)


def test_additive_schema_change_is_allowed(shared_table):
    path = shared_table("delta-golden/time-travel-schema-changes-b")
    plan = plan_changes(path, 0, 1)
    first, second = {f.version: f.metadata for f in plan}[0], plan.metadata
    assert [f["name"] for f in second.schema["fields"]][: len(first.schema["fields"])] == [
        f["name"] for f in first.schema["fields"]]
    assert len(second.schema["fields"]) == len(first.schema["fields"]) + 1
    assert sorted(plan.metadata_changes) == [0, 1]


def test_deletion_vectors_in_snapshot_and_changes(shared_table):
    path = shared_table("delta-golden/dv-partitioned-with-checkpoint")
    snapshot = plan_snapshot(path, version=15)
    with_dv = [f for f in snapshot if f.deletion_vector is not None]
    assert with_dv and all(f.deletion_vector.cardinality >= 1 for f in with_dv)
    assert sum((f.num_records or 0) - (f.deletion_vector.cardinality if f.deletion_vector else 0)
               for f in snapshot) == 35
    changed = plan_changes(path, 11, 15, ignore_changes=True)
    rewritten = [p for v in range(11, 16) for p in data_change_adds(path, v)]
    assert rewritten and [f.path for f in changed] == rewritten
    assert all(f.deletion_vector and f.deletion_vector.storage_type == "u" for f in changed)


def test_max_files_batches_on_five_file_commits(shared_table):
    path = shared_table("delta-kernel/kernel-pagination-all-jsons")
    plan = plan_changes(path, 0, 2)
    assert [(b.start_version, b.end_version) for b in split_batches(plan, max_files=10)] == [
        (0, 1), (2, 2)]
    assert [(b.start_version, b.end_version) for b in split_batches(plan, max_files=3)] == [
        (0, 0), (1, 1), (2, 2)]
    assert len(split_batches(plan)) == 1
    by_bytes = split_batches(plan, max_bytes=plan.total_bytes // 2)
    assert sum(len(b) for b in by_bytes) == 15 and all(len(b) == 5 for b in by_bytes)


def test_empty_commits_still_belong_to_batches(shared_table):
    path = shared_table("delta-golden/125-iterator-bug")
    plan = plan_changes(path, 0, 11)
    batches = split_batches(plan, max_files=1)
    covered = [v for b in batches for v in range(b.start_version, b.end_version + 1)]
    assert covered == list(range(12))
    assert all(len({f.version for f in b}) <= 1 for b in batches)


def _live_rows(plan) -> int:
    """Rows a plan's files hold, from their Parquet footers, minus deletion-vector rows."""
    return sum(
        pq.ParquetFile(f.path[len("file://"):]).metadata.num_rows
        - (f.deletion_vector.cardinality if f.deletion_vector else 0)
        for f in plan
    )


def _rows_by_version(name: str) -> dict[int, int]:
    pairs = (pair.split(":") for pair in MANIFEST[name]["rows_by_version"].split())
    return {int(v): int(rows) for v, rows in pairs if rows != "?"}


COUNTED = sorted(name for name in READABLE if MANIFEST[name]["data_files"] == "present"
                 and _rows_by_version(name))


@pytest.mark.parametrize("name", COUNTED)
def test_snapshot_row_counts_match_the_manifest(shared_table, name):
    path = shared_table(name)
    for version, rows in _rows_by_version(name).items():
        assert _live_rows(plan_snapshot(path, version=version)) == rows, version


APPEND_ONLY = sorted(name for name in COUNTED
                     if "append-only-multiversion" in MANIFEST[name]["classes"])


@pytest.mark.parametrize("name", APPEND_ONLY)
def test_append_range_rows_are_snapshot_differences(shared_table, name):
    """rows(start..end) == rows(snapshot end) - rows(snapshot start-1), for append-only tables."""
    path = shared_table(name)
    counts = _rows_by_version(name)
    for start in counts:
        for end in (v for v in counts if v >= start):
            if _schema_break(name, start, end) or any(
                    has_data_change_remove(path, v) for v in range(start, end + 1)):
                continue
            before = counts.get(start - 1, 0)
            assert _live_rows(plan_changes(path, start, end)) == counts[end] - before, (start, end)


def test_multi_part_checkpoint_without_hint_and_incomplete(shared_table):
    """Found by listing when _last_checkpoint is gone; skipped when a part is missing."""
    path = Path(shared_table("delta-golden/multi-part-checkpoint"))
    expected = sorted(f.path for f in plan_snapshot(str(path)))
    (path / "_delta_log" / "_last_checkpoint").unlink()
    assert sorted(f.path for f in plan_snapshot(str(path))) == expected
    next((path / "_delta_log").glob("*.checkpoint.0000000002.0000000002.parquet")).unlink()
    assert sorted(f.path for f in plan_snapshot(str(path))) == expected
    (path / "_delta_log" / f"{0:020d}.json").unlink()
    with pytest.raises(VersionNotAvailableError):
        plan_snapshot(str(path))


def test_v2_checkpoint_needs_its_sidecars(shared_table):
    path = Path(shared_table("delta-golden/v2-checkpoint-json"))
    assert len(plan_snapshot(str(path))) == 4
    for sidecar in (path / "_delta_log" / "_sidecars").iterdir():
        sidecar.unlink()
    with pytest.raises(InvalidLogError, match="sidecar"):
        plan_snapshot(str(path))


@pytest.mark.parametrize(("name", "feature"), [
    ("delta-kernel/catalog-owned-preview", "catalogManaged"),
    ("delta-rs-errors/table_d", "catalogOwned"),
])
def test_catalog_managed_tables_have_no_latest_version(shared_table, name, feature):
    """Their newest commits live in the catalog: a version from _delta_log alone is stale."""
    path = shared_table(name)
    for since in (None, 0):
        with pytest.raises(UnsupportedFeatureError, match="catalog-managed") as caught:
            latest_version(path, since=since)
        assert caught.value.feature == feature and path in str(caught.value)
