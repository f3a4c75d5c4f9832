"""split_batches admits files as Delta's streaming source does, keeping whole commits."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from airflow_provider_delta.core import plan_changes, split_batches


@pytest.fixture(scope="module")
def five_appends(tmp_path_factory) -> str:
    """Five appends of one string row each, one file per commit, as DeltaSourceSuite's
    maxBytesPerTrigger tests write them (``Seq(i.toString).toDF.write.mode("append")``)."""
    path = str(Path(tmp_path_factory.mktemp("five")) / "t")
    for i in range(5):
        write_deltalake(path, pa.table({"value": [str(i)]}), mode="append")
    return path


def batch_sizes(path: str, **limits) -> list[int]:
    return [len(batch) for batch in split_batches(plan_changes(path, 0), **limits)]


def test_the_file_that_crosses_max_bytes_is_admitted(five_appends):
    """Delta checks the remaining capacity before taking a file: with a limit of one and a
    half files, the second file crosses it and is still taken (batches of two, not one)."""
    sizes = {f.size for f in plan_changes(five_appends, 0)}
    assert len(sizes) == 1  # every file holds one row of one character: the same size
    file_size = sizes.pop()
    assert batch_sizes(five_appends, max_bytes=file_size * 3 // 2) == [2, 2, 1]
    assert batch_sizes(five_appends, max_bytes=file_size) == [1] * 5
    assert batch_sizes(five_appends, max_bytes=file_size + 1) == [2, 2, 1]


def test_max_bytes_process_at_least_one_file(five_appends):
    """DeltaSourceSuite "maxBytesPerTrigger: process at least one file": 1 byte, 5 batches."""
    assert batch_sizes(five_appends, max_bytes=1) == [1] * 5


def test_max_bytes_and_max_files_together(five_appends):
    """DeltaSourceSuite "maxBytesPerTrigger: max bytes and max files together"."""
    assert batch_sizes(five_appends, max_files=1, max_bytes=100 * 2**30) == [1] * 5
    assert batch_sizes(five_appends, max_files=2, max_bytes=1) == [1] * 5
    assert batch_sizes(five_appends, max_files=2) == [2, 2, 1]


def test_a_commit_joins_only_if_delta_would_take_all_its_files(shared_table):
    """Five files per commit: Delta would stop inside the second commit, so it starts a batch."""
    plan = plan_changes(shared_table("delta-kernel/kernel-pagination-all-jsons"), 0)
    first_commit = sum(f.size for f in plan if f.version == 0)
    second_commit = [f.size for f in plan if f.version == 1]
    before_its_last_file = first_commit + sum(second_commit[:-1])
    assert [len(b) for b in split_batches(plan, max_bytes=before_its_last_file + 1)] == [10, 5]
    assert [len(b) for b in split_batches(plan, max_bytes=before_its_last_file)] == [5, 5, 5]
    assert [len(b) for b in split_batches(plan, max_bytes=first_commit + 1)] == [5, 5, 5]
    assert [len(b) for b in split_batches(plan, max_files=9)] == [5, 5, 5]
    assert [len(b) for b in split_batches(plan, max_files=10)] == [10, 5]
