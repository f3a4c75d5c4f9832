"""Delta's jars as the oracle for commit times and time intervals.

Tables written by Delta Spark: one created with in-commit timestamps (ICT), one that enables
them after two commits, one timed by file times only. For each, our commit times equal
``DESCRIBE HISTORY``'s, and the versions of ``[start, end)`` equal the commits Delta's change
feed returns for ``startingTimestamp=start``, ``endingTimestamp=end - 1 ms`` (both inclusive).
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest

from airflow_provider_delta.core import commit_timestamp, versions_between
from tests.delta_spark.conftest import needs_delta_jars

pytestmark = [needs_delta_jars, pytest.mark.slow]

FAR_FUTURE_S = 4_000_000_000  # 2096: file times that must never count where ICTs are on


def _history(spark, path: str) -> dict[int, int]:
    rows = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").select("version", "timestamp").collect()
    return {r.version: (r.timestamp.replace(tzinfo=dt.timezone.utc)
                        - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc))
            // dt.timedelta(milliseconds=1) for r in rows}


def _feed_versions(spark, path: str, start_ms: int, end_ms: int) -> set[int]:
    def shown(millis: int) -> str:
        moment = dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=millis)
        return moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]

    rows = (spark.read.format("delta").option("readChangeFeed", "true")
            .option("startingTimestamp", shown(start_ms))
            .option("endingTimestamp", shown(end_ms - 1)).load(path)
            .select("_commit_version").distinct().collect())
    return {r._commit_version for r in rows}


def _create(spark, path: str, *, ict: bool) -> None:
    properties = "'delta.enableChangeDataFeed'='true'" + (
        ", 'delta.enableInCommitTimestamps'='true'" if ict else "")
    spark.sql(f"CREATE TABLE delta.`{path}` (id INT) USING delta TBLPROPERTIES ({properties})")


def _insert(spark, path: str, count: int) -> None:
    for value in range(count):
        spark.sql(f"INSERT INTO delta.`{path}` VALUES ({value})")


def _check_against_delta(spark, path: str, data_versions: list[int]) -> None:
    history = _history(spark, path)
    ours = {v: commit_timestamp(path, v) for v in history}
    assert ours == history
    for i, first in enumerate(data_versions):
        for last in data_versions[i:]:
            start, end = history[first], history[last] + 1
            found = versions_between(path, start, end)
            assert found is not None and found[0] <= first and found[1] == last
            assert set(range(found[0], found[1] + 1)) & set(data_versions) == \
                _feed_versions(spark, path, start, end)


def test_created_with_in_commit_timestamps(delta_spark, tmp_path):
    path = str(tmp_path / "ict")
    _create(delta_spark, path, ict=True)
    _insert(delta_spark, path, 4)
    for commit in (Path(path) / "_delta_log").glob("*.json"):
        os.utime(commit, (FAR_FUTURE_S, FAR_FUTURE_S))
    _check_against_delta(delta_spark, path, [1, 2, 3, 4])


def test_in_commit_timestamps_enabled_later(delta_spark, tmp_path):
    path = str(tmp_path / "later")
    _create(delta_spark, path, ict=False)
    _insert(delta_spark, path, 2)
    log_dir = Path(path) / "_delta_log"
    now = int(dt.datetime.now(dt.timezone.utc).timestamp())
    for version in range(3):  # spread the file-timed commits over the last hours
        os.utime(log_dir / f"{version:020d}.json", (now - 3600 * (3 - version),) * 2)
    delta_spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES "
                    "('delta.enableInCommitTimestamps'='true')")
    _insert(delta_spark, path, 2)
    for version in range(3, 6):
        os.utime(log_dir / f"{version:020d}.json", (FAR_FUTURE_S, FAR_FUTURE_S))
    _check_against_delta(delta_spark, path, [1, 2, 4, 5])


def test_file_times_made_increasing_as_delta_does(delta_spark, tmp_path):
    path = str(tmp_path / "files")
    _create(delta_spark, path, ict=False)
    _insert(delta_spark, path, 4)
    # hourly over the last hours (Delta's change feed refuses times older than its file
    # retention), but commit 3 filed before commit 2
    base = int(dt.datetime.now(dt.timezone.utc).timestamp()) - 5 * 3600
    for version, hour in enumerate([0, 1, 2, 1, 4]):
        os.utime(Path(path) / "_delta_log" / f"{version:020d}.json", (base + 3600 * hour,) * 2)
    _check_against_delta(delta_spark, path, [1, 2, 3, 4])
