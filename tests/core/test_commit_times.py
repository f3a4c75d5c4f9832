"""Commit times by Delta's rules, and the versions of a half-open time interval.

Tables are written with deltalake and their commit file times set with ``os.utime`` (the
file-time rule), or carry hand-written in-commit timestamps (ICT) in their ``commitInfo``.
Delta's own answers on tables its jars wrote: ``tests/delta_spark/test_commit_times_oracle.py``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_provider_delta.core import (
    commit_timestamp, newest_commit_time, version_at, versions_between,
)
from airflow_provider_delta.core.commit_times import CommitClock, epoch_ms, ms_to_datetime
from airflow_provider_delta.core.delta_log import TableLocation
from airflow_provider_delta.errors import VersionNotAvailableError

HOUR_MS = 3_600_000
T0_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def _write(path: str, versions: int) -> None:
    for version in range(versions):
        write_deltalake(path, pa.table({"id": [version]}), mode="append")


def _set_file_time(path: str, version: int, millis: int) -> None:
    os.utime(Path(path) / "_delta_log" / f"{version:020d}.json", ns=(millis * 10**6,) * 2)


def file_time_table(tmp_path, times_ms: list[int]) -> str:
    """A deltalake table with one commit per entry of ``times_ms``, its file times set so."""
    path = str(tmp_path / "files")
    _write(path, len(times_ms))
    for version, millis in enumerate(times_ms):
        _set_file_time(path, version, millis)
    return path


def ict_table(tmp_path, file_times_ms: list[int], icts_ms: list[int]) -> str:
    """A table timed by file times for its first commits and by ICTs after them.

    Version 0 is deltalake's; ``file_times_ms`` time versions 0..k-1; the enablement commit
    (version k) and the ICT commits after it are written by hand as Delta writes them:
    ``commitInfo`` with ``inCommitTimestamp`` first, the enablement properties in metadata.
    """
    path = str(tmp_path / "ict")
    _write(path, len(file_times_ms))
    log_dir = Path(path) / "_delta_log"
    first = len(file_times_ms)
    metadata = next(json.loads(line) for line in (log_dir / f"{0:020d}.json").read_text()
                    .splitlines() if "metaData" in line)["metaData"]
    metadata["configuration"] = {
        "delta.enableInCommitTimestamps": "true",
        "delta.inCommitTimestampEnablementVersion": str(first),
        "delta.inCommitTimestampEnablementTimestamp": str(icts_ms[0])}
    enable = [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 7,
                            "writerFeatures": ["inCommitTimestamp"]}}, {"metaData": metadata}]
    for offset, ict in enumerate(icts_ms):
        actions = [{"commitInfo": {"inCommitTimestamp": ict, "operation": "WRITE"}}]
        (log_dir / f"{first + offset:020d}.json").write_text(
            "\n".join(map(json.dumps, actions + (enable if offset == 0 else []))) + "\n")
    for version, millis in enumerate(file_times_ms):
        _set_file_time(path, version, millis)
    for version in range(first, first + len(icts_ms)):  # far later: must never count
        _set_file_time(path, version, T0_MS + 1000 * HOUR_MS)
    return path


def test_interval_is_half_open_on_commit_times(tmp_path):
    times = [T0_MS + HOUR_MS * h + 600_000 for h in range(4)]  # at hh:10 each hour
    path = file_time_table(tmp_path, times)
    assert versions_between(path, T0_MS, T0_MS + HOUR_MS) == (0, 0)
    assert versions_between(path, T0_MS + HOUR_MS, T0_MS + 3 * HOUR_MS) == (1, 2)
    # a boundary exactly on a commit's time: the commit belongs to the interval it starts
    assert versions_between(path, times[0], times[2]) == (0, 1)
    assert versions_between(path, times[2], times[2] + 1) == (2, 2)
    assert versions_between(path, times[2] - 1, times[2]) is None
    assert versions_between(path, T0_MS, T0_MS + 600_000) is None  # before the first commit
    assert versions_between(path, times[3] + 1, times[3] + HOUR_MS) is None
    assert versions_between(path, T0_MS + HOUR_MS, T0_MS) is None  # start after end
    assert commit_timestamp(path, 2) == times[2]
    assert newest_commit_time(path) == (3, times[3])


def test_consecutive_intervals_split_the_versions_exactly(tmp_path):
    """Many commits in a minute: every 10-second interval's versions, put together, are the
    versions of the table, each once -- in any order of asking."""
    times = [T0_MS + 1000 * (7 * v // 3) for v in range(25)]  # several commits share a second
    path = file_time_table(tmp_path, times)
    bounds = range(T0_MS - 10_000, T0_MS + 70_000, 10_000)
    ranges = [versions_between(path, low, low + 10_000) for low in reversed(bounds)]
    loaded = sorted(v for r in ranges if r for v in range(r[0], r[1] + 1))
    assert loaded == list(range(25))


def test_file_times_are_made_strictly_increasing(tmp_path):
    """A commit whose file time is not after its predecessor's counts one ms after it (Delta's
    history), so it falls in the interval where its predecessor is, never in an earlier one."""
    times = [T0_MS, T0_MS + HOUR_MS, T0_MS + 60_000, T0_MS + HOUR_MS, T0_MS + 2 * HOUR_MS]
    path = file_time_table(tmp_path, times)
    clock = CommitClock(TableLocation(path))
    assert [clock.millis(v) for v in range(5)] == [
        T0_MS, T0_MS + HOUR_MS, T0_MS + HOUR_MS + 1, T0_MS + HOUR_MS + 2, T0_MS + 2 * HOUR_MS]
    assert versions_between(path, T0_MS, T0_MS + HOUR_MS) == (0, 0)  # not 2, filed at +1 min
    assert versions_between(path, T0_MS + HOUR_MS, T0_MS + 2 * HOUR_MS) == (1, 3)


def test_in_commit_timestamps_are_used_from_their_enablement(tmp_path):
    """Versions 0-1 by file times; 2-5 by ICTs (their file times, far later, do not count)."""
    files = [T0_MS, T0_MS + HOUR_MS]
    icts = [T0_MS + 2 * HOUR_MS, T0_MS + 2 * HOUR_MS + 1, T0_MS + 3 * HOUR_MS,
            T0_MS + 4 * HOUR_MS]
    path = ict_table(tmp_path, files, icts)
    assert [commit_timestamp(path, v) for v in range(6)] == files + icts
    assert versions_between(path, T0_MS + HOUR_MS, T0_MS + 2 * HOUR_MS) == (1, 1)
    assert versions_between(path, T0_MS + 2 * HOUR_MS, T0_MS + 3 * HOUR_MS) == (2, 3)
    assert versions_between(path, T0_MS + HOUR_MS, T0_MS + 4 * HOUR_MS) == (1, 4)
    assert versions_between(path, T0_MS + 3 * HOUR_MS + 1, T0_MS + 10 * HOUR_MS) == (5, 5)
    assert newest_commit_time(path) == (5, icts[-1])


def test_file_times_later_than_the_enablement_fall_before_it(tmp_path):
    """A copied table: the pre-ICT commit files are newer than the first ICT. Delta searches
    times at or after the enablement among ICT versions only; those earlier versions count
    just before the enablement time, so each still falls in exactly one interval."""
    late = T0_MS + 50 * HOUR_MS
    path = ict_table(tmp_path, [late, late + 1], [T0_MS + 2 * HOUR_MS, T0_MS + 3 * HOUR_MS])
    assert versions_between(path, T0_MS + 2 * HOUR_MS, late + 10) == (2, 3)
    assert versions_between(path, T0_MS, T0_MS + 2 * HOUR_MS) == (0, 1)
    assert commit_timestamp(path, 1) == T0_MS + 2 * HOUR_MS - 1
    assert version_at(path, ms_to_datetime(T0_MS + 2 * HOUR_MS)) == 2
    with pytest.raises(VersionNotAvailableError, match="timestamp"):  # Delta's time travel
        version_at(path, ms_to_datetime(T0_MS + 2 * HOUR_MS - 1))


def test_cleaned_log_starts_at_the_oldest_commit_left(tmp_path):
    path = str(tmp_path / "files")
    _write(path, 3)
    DeltaTable(path).create_checkpoint()
    _write(path, 2)
    for version in range(5):
        _set_file_time(path, version, T0_MS + HOUR_MS * version)
    for version in (0, 1):
        (Path(path) / "_delta_log" / f"{version:020d}.json").unlink()
    assert versions_between(path, T0_MS + 2 * HOUR_MS, T0_MS + 4 * HOUR_MS) == (2, 3)
    with pytest.raises(VersionNotAvailableError):
        commit_timestamp(path, 1)


@pytest.mark.parametrize("hours", [1, 4])
def test_an_interval_over_cleaned_commits_is_refused(tmp_path, hours):
    """Commits 0..2 removed by log cleanup (checkpoint at 5): an interval that may hold them
    raises, naming the oldest commit left and its time, rather than loading nothing or part."""
    path = str(tmp_path / "files")
    _write(path, 6)
    DeltaTable(path).create_checkpoint()
    for version in range(6):
        _set_file_time(path, version, T0_MS + HOUR_MS * version)
    for version in (0, 1, 2):
        (Path(path) / "_delta_log" / f"{version:020d}.json").unlink()
    with pytest.raises(VersionNotAvailableError) as error:
        versions_between(path, T0_MS, T0_MS + hours * HOUR_MS)
    assert "versions 3..5" in str(error.value)
    assert "version 3 (committed 2026-01-01T03:00:00+00:00)" in str(error.value)
    assert versions_between(path, T0_MS + 3 * HOUR_MS, T0_MS + 4 * HOUR_MS) == (3, 3)


class _CountingLocation(TableLocation):
    """Counts commit reads and listed entries, to pin the cost of a search."""

    def __init__(self, table_uri):
        super().__init__(table_uri)
        self.commit_reads = self.listings = 0

    def read_log_file(self, name):
        self.commit_reads += name.endswith(".json")
        return super().read_log_file(name)

    def list_log(self, *args, **kwargs):
        self.listings += 1
        return super().list_log(*args, **kwargs)


def test_ict_search_reads_log2_commits_and_lists_nothing(tmp_path):
    """1,000 ICT commits after 3 file-time ones: an interval among the ICTs is found by
    binary search (about 2 x log2(1000) reads), with no listing of file times."""
    icts = [T0_MS + 60_000 * i for i in range(1000)]
    path = ict_table(tmp_path, [T0_MS - 3 * HOUR_MS + v for v in range(3)], icts)
    location = _CountingLocation(path)
    clock = CommitClock(location, 1002, {"delta.enableInCommitTimestamps": "true",
                                         "delta.inCommitTimestampEnablementVersion": "3"})
    assert clock.versions_between(icts[100], icts[160]) == (103, 162)
    assert clock.versions_between(icts[100] - 1, icts[160] + 1) == (103, 163)
    assert location.listings == 0
    assert location.commit_reads <= 2 * 2 * 11


def test_file_time_search_reads_no_commit(tmp_path):
    path = file_time_table(tmp_path, [T0_MS + HOUR_MS * v for v in range(6)])
    location = _CountingLocation(path)
    clock = CommitClock(location, 5, {})
    assert clock.versions_between(T0_MS + HOUR_MS, T0_MS + 3 * HOUR_MS) == (1, 2)
    assert clock.millis(5) == T0_MS + 5 * HOUR_MS
    assert location.commit_reads == 0
    assert location.listings == 1


def test_epoch_ms_refuses_naive_datetimes():
    assert epoch_ms(dt.datetime(2026, 1, 1, 1, tzinfo=dt.timezone.utc)) == T0_MS + HOUR_MS
    cet = dt.timezone(dt.timedelta(hours=1))
    assert epoch_ms(dt.datetime(2026, 1, 1, 2, tzinfo=cet)) == T0_MS + HOUR_MS
    with pytest.raises(ValueError, match="no time zone"):
        epoch_ms(dt.datetime(2026, 1, 1))
