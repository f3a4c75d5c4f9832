"""Differential tests: loads driven by ``run_job`` over random splits of random source
histories, against an independent oracle (deltalake's DataFusion snapshots, multisets of rows).

Each seed writes a source with ``deltalake`` (appends of varied types, optional partitioning,
OPTIMIZE, checkpoints, new columns, deletes, updates), then loads it in random pieces (random
``max_files``/``max_bytes``, a re-run of a loaded range, a run that crashes before its sink
commit) and compares the target with what Delta's streaming source would give. More seeds:
``DIFFERENTIAL_SEEDS=20``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder, write_deltalake

from airflow_provider_delta.core import LoadStart
from airflow_provider_delta.errors import DeltaProviderError, InvalidParameterError
from airflow_provider_delta.job.driver import run_job
from airflow_provider_delta.job.sinks import DeltaAppendSink, DeltaMergeSink
from airflow_provider_delta.job.spec import JobSpec
from airflow_provider_delta.operators import DeltaIncrementalOperator, DeltaTimeTravelOperator
from airflow_provider_delta.spark import read_change_feed
from tests.spark.conftest import table_rows
from tests.spark.test_change_feed import _enable_in_commit_timestamps

SEEDS = range(int(os.environ.get("DIFFERENTIAL_SEEDS", "1")))
UTC = dt.timezone.utc
STRINGS = ["a/b", "50%", "k=v", "#1", "two words", "ünï", "日本", " lead", "", "null"]
TIMESTAMPS = [dt.datetime(1850, 3, 1, 12, 30, tzinfo=UTC), dt.datetime(9999, 12, 31, 23, 59, tzinfo=UTC),
              dt.datetime(2024, 2, 29, 1, 2, 3, 456789, tzinfo=UTC), dt.datetime(1970, 1, 1, tzinfo=UTC)]
DATES = [dt.date(1850, 1, 1), dt.date(2024, 1, 31), dt.date(9999, 12, 31)]
PARTITIONINGS = [(), ("_part",), ("day",), ("_part", "bucket"), ("bucket",)]


class Source:
    """A seeded random source history; every row has a unique ``id``."""

    def __init__(self, path: Path, seed: int, changes: bool, rewrites: bool = True):
        self.uri, self.random, self.changes = str(path), random.Random(seed), changes
        self.rewrites = rewrites  # deletes and updates that rewrite files (remove + add)
        self.next_id, self.last_append, self.extra_columns = 0, 0, []
        self.partition_by = list(self.random.choice(PARTITIONINGS))

    def value(self, choices):
        return None if self.random.random() < 0.2 else self.random.choice(choices)

    def rows(self, count: int) -> pa.Table:
        ids = list(range(self.next_id, self.next_id + count))
        self.last_append, self.next_id = self.next_id, self.next_id + count
        pick = self.random.choice
        columns = {
            "id": pa.array(ids, pa.int64()),
            "text": pa.array([self.value(STRINGS) for _ in ids], pa.string()),
            "at": pa.array([self.value(TIMESTAMPS) for _ in ids], pa.timestamp("us", "UTC")),
            "amount": pa.array([self.value([Decimal("1.25"), Decimal("-99999.99")]) for _ in ids],
                               pa.decimal128(10, 2)),
            "flag": pa.array([self.value([True, False]) for _ in ids], pa.bool_()),
            "_part": pa.array([pick(STRINGS[:6] + [None]) for _ in ids], pa.string()),
            "day": pa.array([pick(DATES + [None]) for _ in ids], pa.date32()),
            "bucket": pa.array([pick([0, 1, -7, None]) for _ in ids], pa.int32()),
        }
        for name in self.extra_columns:
            columns[name] = pa.array([self.value([1.5, -0.0, 3e300]) for _ in ids], pa.float64())
        return pa.table(columns)

    def append(self, schema_mode: str | None = None) -> None:
        config = {"delta.enableChangeDataFeed": "true"} if self.changes else None
        write_deltalake(self.uri, self.rows(self.random.randint(1, 4)), mode="append",
                        partition_by=self.partition_by or None, schema_mode=schema_mode,
                        configuration=config)

    def step(self) -> None:
        """One random commit (or a checkpoint next to the latest one)."""
        kinds = ["append"] * 4 + ["optimize", "add_column", "checkpoint"]
        kinds += ["drop_last_append"] if self.changes else []
        kinds += ["delete", "update"] * 2 if self.changes and self.rewrites else []
        kind = self.random.choice(kinds)
        table = DeltaTable(self.uri)
        if kind == "append":
            self.append()
        elif kind == "optimize":
            table.optimize.compact()
        elif kind == "add_column":
            self.extra_columns.append(f"added {len(self.extra_columns)}")
            self.append(schema_mode="merge")
        elif kind == "checkpoint":
            table.create_checkpoint()
            self.append()
        elif kind == "drop_last_append":  # whole files removed, unless OPTIMIZE merged them
            table.delete(f"id >= {self.last_append}")
        elif kind == "delete":
            table.delete(f"id % 5 = {self.random.randint(0, 4)}")
        else:
            table.update({"text": "'updated'", "flag": "true"},
                         predicate=f"id % 3 = {self.random.randint(0, 2)}")

    def write(self, commits: int) -> str:
        self.append()
        while DeltaTable(self.uri).version() < commits - 1:
            self.step()
        return self.uri


def rows(uri: str, columns: list[str], version: int | None = None) -> Counter:
    """The oracle: a Delta table's rows (named columns, in that order) through DataFusion;
    columns added after ``version`` read null."""
    table = DeltaTable(uri, version=version)
    present = table.schema().to_arrow().names
    names = ", ".join(f'"{c}"' if c in present else f'null as "{c}"' for c in columns)
    result = QueryBuilder().register("t", table).execute(f"select {names} from t").read_all()
    return Counter(zip(*(result.column(i).to_pylist() for i in range(result.num_columns))))


def columns_of(uri: str) -> list[str]:
    return sorted(DeltaTable(uri).schema().to_arrow().names)


def spec_of(source: str, target: str, start: int, end: int | None, keys=("id",),
            **options) -> JobSpec:
    """The job spec the operator submits for versions ``start..end`` (or a snapshot); a change
    feed goes to a merge sink on ``keys``."""
    sink_kind = "delta-merge" if options.get("change_feed") else "delta"
    operator = DeltaIncrementalOperator(
        task_id="load", table_uri=source, target=target, conn_id="no_spark_needed",
        sink=sink_kind, merge_keys=list(keys) if sink_kind == "delta-merge" else (),
        change_feed=bool(options.get("change_feed")),
        sink_options={"mergeSchema": "true"})
    if start is None:
        return JobSpec(table_uri=source, start=LoadStart("snapshot", end),
                       sink=operator.sink_spec(), **options)
    return JobSpec(table_uri=source, start=LoadStart("changes", start),
                   sink=operator.sink_spec(), end_version=end, **options)


class _Crash(Exception):
    """A driver that dies right before its sink commits."""


def crashing_run(spark, spec: JobSpec, monkeypatch) -> None:
    """``run_job`` whose first commit never happens (the staged files stay behind)."""
    with monkeypatch.context() as patch:
        def die(*args, **kwargs):
            raise _Crash
        patch.setattr(DeltaAppendSink, "_commit", die)
        patch.setattr(DeltaMergeSink, "_merge", die)
        with pytest.raises(_Crash):
            run_job(spark, spec)


def random_cuts(chooser: random.Random, latest: int) -> list[int]:
    """Random run boundaries: each run loads ``cuts[i] + 1 .. cuts[i + 1]``."""
    inner = sorted(chooser.sample(range(0, latest), k=min(latest, chooser.randint(1, 3))))
    return [*dict.fromkeys([*inner, latest])]


def load_in_pieces(spark, source: str, target: str, seed: int, monkeypatch, **options) -> None:
    """A first snapshot at a random version, then the later versions in random runs with
    random batch limits; one run crashes before committing, one re-runs a loaded range."""
    chooser = random.Random(seed * 7919)
    latest = DeltaTable(source).version()
    first = chooser.randint(0, latest)
    spec = spec_of(source, target, None, first, **options)
    run_job(spark, spec)
    loaded = first
    for end in [c for c in random_cuts(chooser, latest) if c > first] or [latest]:
        if end <= loaded:
            continue
        limits = {"max_files": chooser.choice([None, 1, 2]),
                  "max_bytes": chooser.choice([None, 1, 4000])}
        spec = spec_of(source, target, loaded + 1, end, **options, **limits)
        if chooser.random() < 0.5:
            crashing_run(spark, spec, monkeypatch)
        run_job(spark, spec)
        loaded = end
    assert run_job(spark, spec).batches == ()  # a re-run of the last range writes nothing


@pytest.mark.parametrize("seed", SEEDS)
def test_appends_load_every_row_exactly_once(spark, tmp_path, monkeypatch, seed):
    source = Source(tmp_path / "source", seed, changes=False).write(commits=8)
    target = str(tmp_path / "target")

    load_in_pieces(spark, source, target, seed, monkeypatch)

    assert columns_of(target) == columns_of(source)
    assert rows(target, columns_of(source)) == rows(source, columns_of(source))


@pytest.mark.parametrize("seed", SEEDS)
def test_change_feed_merge_keeps_the_target_equal_to_the_source(spark, tmp_path, monkeypatch,
                                                                seed):
    source = Source(tmp_path / "source", 100 + seed, changes=True).write(commits=9)
    target = str(tmp_path / "target")

    load_in_pieces(spark, source, target, seed, monkeypatch, change_feed=True)

    assert columns_of(target) == columns_of(source)
    assert rows(target, columns_of(source)) == rows(source, columns_of(source))


class RichSource(Source):
    """A source whose rows change the ways tables do: MERGE with inserts, updates and deletes in
    one commit, whole-partition deletes and overwrites, updates that move rows to another
    partition, keys deleted and inserted again, RESTORE, CDF switched off and on."""

    def __init__(self, path: Path, seed: int):
        super().__init__(path, seed, changes=True)
        self.partition_by = ["_part"] if self.random.random() < 0.7 else []
        self.restorable_from = 0  # no RESTORE across a schema change

    def rows(self, count: int) -> pa.Table:
        # Plain partition values: deltalake's load_cdf (the oracle) cannot find the change
        # data files of a partition value with a space (it encodes their path twice).
        table = super().rows(count)
        return table.set_column(5, "_part", pa.array(
            [self.random.choice(["a", "b", "c", None]) for _ in range(count)], pa.string()))

    def live_ids(self) -> list[int]:
        return sorted(id_ for id_, in rows(self.uri, ["id"]).elements())

    def rows_with_ids(self, ids: list[int]) -> pa.Table:
        table = self.rows(len(ids))
        return table.set_column(0, "id", pa.array(ids, pa.int64()))

    def step(self) -> None:
        kinds = ["append", "merge", "merge", "delete_partition", "move_partition", "reuse",
                 "toggle_cdf", "restore", "overwrite_partition", "add_column", "optimize"]
        kind = self.random.choice(kinds)
        table, live = DeltaTable(self.uri), self.live_ids()
        gone = sorted(set(range(self.next_id)) - set(live))
        if kind == "append" or (kind in ("merge", "reuse", "restore") and not live):
            self.append()
        elif kind == "merge":
            changed = self.random.sample(live, min(len(live), 3))
            incoming = self.rows_with_ids(changed + gone[:1] + [self.next_id + 1])
            (table.merge(incoming, "t.id = s.id", source_alias="s", target_alias="t")
             .when_matched_delete(f"s.id = {changed[0]}").when_matched_update_all()
             .when_not_matched_insert_all().execute())
        elif kind == "delete_partition":
            table.delete(f"_part = '{self.random.choice('abc')}' or _part is null")
        elif kind == "move_partition":
            table.update({"_part": "'d'"}, predicate=f"id % 3 = {self.random.randint(0, 2)}")
        elif kind == "reuse":
            write_deltalake(self.uri, self.rows_with_ids(gone[-2:] or [self.next_id]),
                            mode="append")
        elif kind == "toggle_cdf":
            switched = {"true": "false"}.get(table.metadata().configuration.get(
                "delta.enableChangeDataFeed", "false"), "true")
            table.alter.set_table_properties({"delta.enableChangeDataFeed": switched})
        elif kind == "restore" and table.version() > self.restorable_from:
            table.restore(self.random.randint(self.restorable_from, table.version() - 1))
        elif kind == "overwrite_partition":
            replacing = self.rows(2).set_column(5, "_part", pa.array(["e", "e"]))
            write_deltalake(self.uri, replacing, mode="overwrite", predicate="_part = 'e'")
        elif kind == "add_column":
            self.extra_columns.append(f"added {len(self.extra_columns)}")
            self.append(schema_mode="merge")
            self.restorable_from = DeltaTable(self.uri).version()
        else:
            table.optimize.compact()


def change_feed_on_ranges(uri: str) -> list[tuple[int, int]]:
    """The longest version ranges with CDF on throughout and one schema."""
    ranges, start, previous = [], None, None
    for version in range(DeltaTable(uri).version() + 1):
        table = DeltaTable(uri, version=version)
        on = table.metadata().configuration.get("delta.enableChangeDataFeed") == "true"
        schema = table.schema().to_json()
        if start is not None and (not on or schema != previous):
            ranges.append((start, version - 1))
            start = None
        if on and start is None:
            start = version
        previous = schema
    return ranges + ([(start, version)] if start is not None else [])


@pytest.mark.parametrize("seed", SEEDS)
def test_change_feed_merge_on_rich_histories(spark, tmp_path, monkeypatch, seed):
    """Target == source after loads in pieces (``max_files=1`` included); on ranges where CDF
    is on, the feed == deltalake's load_cdf (data columns, change type, version)."""
    source = RichSource(tmp_path / "source", 549 + seed).write(commits=8)
    target = str(tmp_path / "target")

    load_in_pieces(spark, source, target, seed, monkeypatch, change_feed=True)

    assert columns_of(target) == columns_of(source)
    assert rows(target, columns_of(source)) == rows(source, columns_of(source))
    for start, end in change_feed_on_ranges(source):
        compared = [*columns_of(source), "_change_type", "_commit_version"]
        ours = read_change_feed(spark, source, start, end).select(*compared).toArrow()
        theirs = pa.table(DeltaTable(source).load_cdf(starting_version=start,
                                                      ending_version=end)).select(compared)
        assert table_rows(ours) == table_rows(theirs), (start, end)


def commit_actions(uri: str, version: int) -> set[str]:
    """The kinds of data-changing file actions of one commit, read from its JSON."""
    text = (Path(uri) / "_delta_log" / f"{version:020d}.json").read_text()
    kinds = set()
    for line in filter(None, text.splitlines()):
        action = json.loads(line)
        for kind in ("add", "remove"):
            if kind in action and action[kind].get("dataChange", True):
                kinds.add(kind)
    return kinds


def streamed_rows(uri: str, columns: list[str], start: int, end: int, option: str) -> Counter:
    """What Delta's streaming source gives for ``start..end`` with ``ignoreDeletes`` or
    ``skipChangeCommits``: each kept commit adds snapshot(v) - snapshot(v - 1)."""
    expected = Counter()
    for version in range(start, end + 1):
        kinds = commit_actions(uri, version)
        if "remove" in kinds:
            if option == "ignore_deletes" and "add" in kinds:
                return None  # a rewrite: Delta fails the stream
            continue
        expected += rows(uri, columns, version) - rows(uri, columns, version - 1)
    return expected


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("option", ["ignore_deletes", "skip_change_commits"])
def test_streaming_options_skip_what_delta_skips(spark, tmp_path, seed, option):
    source = Source(tmp_path / "source", 200 + seed, changes=True,
                    rewrites=option == "skip_change_commits").write(commits=8)
    target = str(tmp_path / "target")
    start = random.Random(seed).randint(1, 4)
    latest = DeltaTable(source).version()
    expected = streamed_rows(source, columns_of(source), start, latest, option)
    spec = spec_of(source, target, start, latest, **{option: True})

    if expected is None:
        with pytest.raises(DeltaProviderError):
            run_job(spark, spec)
        return
    run_job(spark, spec)

    got = rows(target, columns_of(source)) if DeltaTable.is_deltatable(target) else Counter()
    assert got == expected


@pytest.mark.parametrize("seed", SEEDS)
def test_time_travel_picks_the_last_commit_at_or_before_the_timestamp(tmp_path, seed):
    chooser = random.Random(seed)
    source = Source(tmp_path / "source", 300 + seed, changes=False).write(commits=6)
    log = Path(source) / "_delta_log"
    base = 1_700_000_000
    for version in range(6):  # file times that repeat and go back, as object stores give
        stamp = base + chooser.choice([0, 1, 2, 5]) * version - chooser.randint(0, 3)
        os.utime(log / f"{version:020d}.json", (stamp, stamp))
    adjusted = []  # Delta's rule: each time raised to one ms past its predecessor
    for version in range(6):
        millis = os.stat(log / f"{version:020d}.json").st_mtime_ns // 1_000_000
        adjusted.append(max(millis, adjusted[-1] + 1) if adjusted else millis)

    for _ in range(10):
        wanted = chooser.randint(adjusted[0], adjusted[-1])
        at = dt.datetime.fromtimestamp(wanted / 1000, UTC)
        operator = DeltaTimeTravelOperator(task_id="travel", table_uri=source, timestamp=at,
                                           target=str(tmp_path / "t"), sink="delta",
                                           conn_id="no_spark_needed")
        assert operator.resolve_version() == max(v for v, t in enumerate(adjusted)
                                                  if t <= wanted), at


def ict_version_at(wanted_ms: int, enabled_at: int, icts: dict[int, int],
                   file_times: list[int]) -> int | None:
    """Delta's rule on a table with in-commit timestamps from ``enabled_at``: a time at or
    after the enablement commit's ICT is searched among the ICT commits only, an earlier one
    among the commits before it by their file times (which may be later: a copied table)."""
    if wanted_ms >= icts[enabled_at]:
        found = [v for v, ict in icts.items() if ict <= wanted_ms]
        return max(found) if wanted_ms <= max(icts.values()) else None
    found = [v for v in range(enabled_at) if file_times[v] <= wanted_ms]
    return max(found) if found else None


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("copied", [False, True], ids=["file-times-before", "copied-later"])
def test_time_travel_on_in_commit_timestamp_tables(tmp_path, seed, copied):
    """In-commit timestamps enabled mid-history; the older commits' file times are earlier
    than the ICTs, or later (the table was copied, which resets file times)."""
    chooser = random.Random(seed)
    history = Source(tmp_path / "source", 400 + seed, changes=False)
    for _ in range(6):  # appends only: a later metaData would drop the ICT properties below
        history.append()
    source = history.uri
    enabled_at = chooser.randint(1, 4)
    icts, at = {}, 1_700_000_000_000
    for version in range(enabled_at, 6):
        at += chooser.choice([1, 1000, 60_000])
        icts[version] = at
    _enable_in_commit_timestamps(source, enabled_at, icts)
    base = 1_750_000_000 if copied else 1_690_000_000
    for version in range(6):
        stamp = base + chooser.choice([0, 1, 5]) * version
        os.utime(Path(source, "_delta_log", f"{version:020d}.json"), (stamp, stamp))
    file_times = [stamp * 1000 for stamp in
                  (os.stat(Path(source, "_delta_log", f"{v:020d}.json")).st_mtime for v in range(6))]
    for v in range(1, 6):  # Delta's rule: each raised to one ms past its predecessor
        file_times[v] = max(file_times[v], file_times[v - 1] + 1)

    for wanted in sorted({t + d for t in [*icts.values(), *file_times] for d in (-1, 0, 1)}):
        expected = ict_version_at(wanted, enabled_at, icts, file_times)
        at = dt.datetime.fromtimestamp(wanted / 1000, dt.timezone(dt.timedelta(hours=5, minutes=30)))
        operator = DeltaTimeTravelOperator(task_id="travel", table_uri=source,
                                           timestamp=at.isoformat(), target=str(tmp_path / "t"),
                                           sink="delta", conn_id="no_spark_needed")
        if expected is None:
            with pytest.raises(DeltaProviderError, match="timestamp"):
                operator.resolve_version()
        else:
            assert operator.resolve_version() == expected, at


@pytest.mark.parametrize("column", ["_change_type", "_commit_version", "_Commit_Timestamp"])
def test_a_source_column_named_like_a_feed_column_is_refused(spark, tmp_path, column):
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    write_deltalake(source, pa.table({"id": [1, 2], column: pa.array([5, 6], pa.int64())}),
                    configuration={"delta.enableChangeDataFeed": "true"})

    with pytest.raises(InvalidParameterError) as error:
        run_job(spark, spec_of(source, target, None, 0, change_feed=True))

    assert f"['{column}'] at version 0" in str(error.value)
    assert source in str(error.value) and "without change_feed" in str(error.value)
    assert not DeltaTable.is_deltatable(target)


def test_a_merge_batch_that_changes_no_target_row_is_recorded(spark, tmp_path):
    """A key inserted and deleted inside one batch: deltalake's MERGE matches nothing and
    commits nothing, yet the batch must be recorded, or a retry loads it again."""
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    write_deltalake(source, pa.table({"id": [1]}),
                    configuration={"delta.enableChangeDataFeed": "true"})
    write_deltalake(source, pa.table({"id": [2]}), mode="append")
    DeltaTable(source).delete("id = 2")
    run_job(spark, spec_of(source, target, None, 0, change_feed=True))

    spec = spec_of(source, target, 1, 2, change_feed=True)
    run_job(spark, spec)

    assert DeltaTable(target).transaction_version(spec.sink.app_id) == 2
    assert run_job(spark, spec).batches == ()
    assert rows(target, ["id"]) == rows(source, ["id"])


def test_a_merge_batch_adds_the_columns_the_source_gained(spark, tmp_path):
    """With mergeSchema the merge sink adds a new source column to the target, as the append
    sink does, rather than MERGE silently dropping its values."""
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    write_deltalake(source, pa.table({"id": [1, 2]}),
                    configuration={"delta.enableChangeDataFeed": "true"})
    run_job(spark, spec_of(source, target, None, 0, change_feed=True))
    write_deltalake(source, pa.table({"id": [3], "added": ["new"]}), mode="append",
                    schema_mode="merge")
    DeltaTable(source).update({"added": "'updated'"}, predicate="id = 1")

    run_job(spark, spec_of(source, target, 1, 2, change_feed=True))

    assert columns_of(target) == columns_of(source)
    assert rows(target, ["id", "added"]) == Counter({(1, "updated"): 1, (2, None): 1,
                                                     (3, "new"): 1})
