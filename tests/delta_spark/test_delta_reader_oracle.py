"""Delta's own Spark reader as the oracle, in the same session as ours.

On every shared reference table Delta reads, and on the random histories of
``tests/operators/test_differential.py``:

* ``read_snapshot`` == ``format("delta")`` with ``versionAsOf`` and with ``timestampAsOf``
  (the times Delta's own history gives);
* ``read_change_feed`` == ``readChangeFeed`` with ``startingVersion``/``endingVersion`` where
  Delta serves the range (where it refuses one, CDF off in it, ours derives it: deliberate);
* ``read_changes`` == Delta's streaming source, ``Trigger.AvailableNow`` from
  ``startingVersion`` on a copy whose log ends at the range's end, with the same
  ``maxFilesPerTrigger``/``maxBytesPerTrigger`` and ``ignoreDeletes``/``ignoreChanges``/
  ``skipChangeCommits``: the same rows, or an error on both sides.

More seeds: ``DIFFERENTIAL_SEEDS=N``; every version, range and option on every shared
table (default: a few of each): ``DELTA_ORACLE_ALL_VERSIONS=1``.
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
from collections import Counter
from pathlib import Path

import pytest
from deltalake import DeltaTable

from airflow_provider_delta.errors import DataChangeError, DeltaProviderError
from airflow_provider_delta.spark import read_change_feed, read_changes, read_snapshot
from tests.conftest import shared_manifest
from tests.delta_spark.conftest import needs_delta_jars
from tests.spark.conftest import spark_rows

pytestmark = [needs_delta_jars, pytest.mark.slow]

MANIFEST = shared_manifest()
SEEDS = range(int(os.environ.get("DIFFERENTIAL_SEEDS", "1")))
ALL_VERSIONS = os.environ.get("DELTA_ORACLE_ALL_VERSIONS") == "1"
# Tables Delta 4.4 cannot read (or refuses), and tables whose data files are not shipped.
DELTA_REFUSES = {
    "delta-kernel/catalog-owned-preview": "catalogManaged: its commits are in a catalog",
    "delta-rs-errors/table_d": "catalogOwned-preview",
}


def _tables() -> list[str]:
    return [name for name, row in MANIFEST.items()
            if row["data_files"] == "present" and "error-case" not in row["classes"]]


def _versions(name: str) -> list[int]:
    low, high = (int(v) for v in MANIFEST[name]["versions"].split(".."))
    every = list(range(low, high + 1))
    return every if ALL_VERSIONS else sorted({low, (low + high) // 2, high})


def _delta(delta_spark, path: str, **options) -> Counter:
    reader = delta_spark.read.format("delta")
    for key, value in options.items():
        reader = reader.option(key, value)
    return spark_rows(reader.load(path))


def _history(delta_spark, path: str) -> dict[int, object]:
    """Delta's own commit timestamps, by version."""
    rows = delta_spark.sql(f"DESCRIBE HISTORY delta.`{path}`").select("version", "timestamp")
    return {row.version: row.timestamp for row in rows.collect()}


@pytest.mark.parametrize("name", [n for n in _tables() if n not in DELTA_REFUSES])
def test_snapshots_equal_deltas_reader(delta_spark, shared_table, name):
    """By version (default: the latest) and by the time of a commit Delta's history gives
    (default: a middle one)."""
    path = shared_table(name)
    versions = _versions(name)
    for version in versions if ALL_VERSIONS else versions[-1:]:
        ours = read_snapshot(delta_spark, path, version=version)
        assert spark_rows(ours) == _delta(delta_spark, path, versionAsOf=version), version
    times = _history(delta_spark, path)
    for version in versions if ALL_VERSIONS else versions[len(versions) // 2:][:1]:
        if version in times:
            at = times[version]
            ours = read_snapshot(delta_spark, path, timestamp=at)
            assert spark_rows(ours) == _delta(delta_spark, path, timestampAsOf=str(at)), at


@pytest.mark.parametrize("name", sorted(DELTA_REFUSES))
def test_tables_delta_refuses_are_refused_by_both(delta_spark, shared_table, name):
    path = shared_table(name)
    with pytest.raises(Exception):  # noqa: B017 - Delta's error classes live in the JVM
        _delta(delta_spark, path)
    with pytest.raises(DeltaProviderError):
        read_snapshot(delta_spark, path)


def _cdf_tables() -> list[str]:
    return [n for n in _tables() if "cdf" in MANIFEST[n]["classes"]]


def _delta_feed(delta_spark, path: str, start: int, end: int) -> Counter | None:
    """Delta's batch change feed of ``start..end``; None where Delta refuses the range."""
    try:
        return _delta(delta_spark, path, readChangeFeed="true", startingVersion=start,
                      endingVersion=end)
    except Exception as error:  # noqa: BLE001
        assert "DELTA_MISSING_CHANGE_DATA" in str(error) or "not enabled" in str(error), error
        return None


def _compare_feeds(delta_spark, path: str, ranges) -> int:
    """Our feed against Delta's on each range Delta serves; how many it served."""
    served = 0
    for start, end in ranges:
        theirs = _delta_feed(delta_spark, path, start, end)
        if theirs is None:
            continue  # ours derives ranges with CDF off (README: Sources that change)
        served += 1
        ours = read_change_feed(delta_spark, path, start, end)
        assert spark_rows(ours) == theirs, (start, end)
    return served


@pytest.mark.parametrize("name", _cdf_tables())
def test_change_feeds_equal_deltas_reader(delta_spark, shared_table, name):
    path = shared_table(name)
    latest = DeltaTable(path).version()
    ranges = [(s, e) for s, e in itertools.combinations_with_replacement(range(latest + 1), 2)
              if ALL_VERSIONS or (s, e) in ((0, latest), (latest // 2, latest // 2),
                                             (latest, latest))]
    assert _compare_feeds(delta_spark, path, ranges) > 0


def log_ending_at(path: str, end: int, into: Path) -> str:
    """A copy of the table whose log ends at version ``end`` (later commits, checkpoints and
    ``_last_checkpoint`` left out), as Delta's streaming source would have found it."""
    shutil.copytree(path, into)
    log = into / "_delta_log"
    for entry in log.iterdir():
        version = entry.name.split(".")[0]
        if entry.name == "_last_checkpoint" or (version.isdigit() and int(version) > end):
            entry.unlink()
    return str(into)


STREAM_OPTIONS = {"ignore_deletes": "ignoreDeletes", "ignore_changes": "ignoreChanges",
                  "skip_change_commits": "skipChangeCommits"}
_queries = itertools.count()


def delta_stream(delta_spark, path: str, start: int, checkpoint: Path, option: str | None,
                 max_files: int | None, max_bytes: int | None) -> Counter:
    """Every row Delta's streaming source gives from ``startingVersion=start`` to the end of
    the log, drained with ``Trigger.AvailableNow``."""
    reader = delta_spark.readStream.format("delta").option("startingVersion", start)
    if option:
        reader = reader.option(STREAM_OPTIONS[option], "true")
    if max_files:
        reader = reader.option("maxFilesPerTrigger", max_files)
    if max_bytes:
        reader = reader.option("maxBytesPerTrigger", max_bytes)
    name = f"delta_oracle_{next(_queries)}"
    query = (reader.load(path).writeStream.format("memory").queryName(name)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    try:
        query.awaitTermination()
        return spark_rows(delta_spark.table(name))
    finally:
        query.stop()
        delta_spark.catalog.dropTempView(name)


def compare_with_stream(delta_spark, path: str, start: int, end: int, work: Path,
                        option: str | None = None, max_files: int | None = None,
                        max_bytes: int | None = None) -> str:
    """``read_changes(start..end)`` against Delta's stream; "rows" or "error" (both sides)."""
    copy = log_ending_at(path, end, work / "copy")
    try:
        theirs = delta_stream(delta_spark, copy, start, work / "checkpoint", option,
                              max_files, max_bytes)
    except Exception as error:  # noqa: BLE001 - a StreamingQueryException from the JVM
        assert any(code in str(error) for code in (
            "DELTA_SOURCE_IGNORE_DELETE", "DELTA_SOURCE_TABLE_IGNORE_CHANGES")), error
        with pytest.raises(DataChangeError):
            read_changes(delta_spark, path, start, end, **({option: True} if option else {}))
        return "error"
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ours = read_changes(delta_spark, path, start, end, **({option: True} if option else {}))
    assert spark_rows(ours) == theirs, (start, end, option)
    return "rows"


def _stream_tables() -> list[str]:
    return [n for n in _tables() if n not in DELTA_REFUSES
            and ("deletes/updates" in MANIFEST[n]["classes"]
                 or "append" in MANIFEST[n]["classes"])]


@pytest.mark.parametrize("index_and_name", enumerate(_stream_tables()), ids=_stream_tables())
def test_change_ranges_equal_deltas_streaming_source(delta_spark, shared_table, tmp_path,
                                                     index_and_name):
    """From version 1 to the latest, with each option (default: one per table, in turn)."""
    index, name = index_and_name
    path = shared_table(name)
    latest = DeltaTable(path).version()
    start = 1 if latest >= 1 else 0
    options = [None, *STREAM_OPTIONS]
    for i, option in enumerate(options if ALL_VERSIONS else options[index % 4:][:1]):
        compare_with_stream(delta_spark, path, start, latest, tmp_path / f"w{i}", option,
                            max_files=1 if (index + i) % 2 else None)


# The random histories of test_differential.py, against Delta's reader.
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("changes", [False, True])
def test_random_histories_equal_deltas_reader(delta_spark, tmp_path, seed, changes):
    from tests.operators.test_differential import Source

    source = Source(tmp_path / "source", 700 + seed, changes=changes).write(commits=8)
    latest = DeltaTable(source).version()
    chooser = random.Random(seed)
    for version in range(latest + 1):
        ours = read_snapshot(delta_spark, source, version=version)
        assert spark_rows(ours) == _delta(delta_spark, source, versionAsOf=version), version
    for case in range(4):
        start = chooser.randint(0, latest)
        end = chooser.randint(start, latest)
        option = chooser.choice([None, *STREAM_OPTIONS])
        compare_with_stream(delta_spark, source, start, end, tmp_path / f"s{case}", option,
                            max_files=chooser.choice([None, 1, 2]),
                            max_bytes=chooser.choice([None, 1, 4000]))
    if changes:
        _compare_feeds(delta_spark, source, [(0, latest), (latest // 2, latest)])


@pytest.mark.parametrize("seed", SEEDS)
def test_rich_change_histories_feed_equals_deltas(delta_spark, tmp_path, seed):
    from tests.operators.test_differential import RichSource

    source = RichSource(tmp_path / "source", 900 + seed).write(commits=8)
    latest = DeltaTable(source).version()
    ranges = [(s, e) for s in range(latest + 1) for e in (s, latest) if s <= e]
    _compare_feeds(delta_spark, source, ranges)
