"""read_change_feed against deltalake's load_cdf (CDF on) and against snapshots (CDF on or off).

Where load_cdf departs from Delta's CDF reader, Delta's rule wins and the test says so.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql.types import VariantType

from airflow_provider_delta.errors import SchemaChangeError
from airflow_provider_delta.spark import change_feed, read_change_feed
from tests.core.conftest import append_unchanged_merge
from tests.spark.conftest import oracle_table, table_rows
from tests.spark.test_variant import _as_json, _expected_json, variant_table

CDF_ON = {"delta.enableChangeDataFeed": "true"}
COMPARED = ["_change_type", "_commit_version"]  # load_cdf's timestamps are commitInfo's
OLD_IMAGES = ["delete", "update_preimage"]


def _merge(table: DeltaTable, rows: pa.Table):
    return table.merge(rows, "t.id = s.id", source_alias="s", target_alias="t")


def write_changes(path: str, configuration: dict | None = None) -> None:
    """v0 create, v1 update, v2 delete, v3 merge (update, insert, delete), v4 append,
    v5 an update that sets a value it already has."""
    rows = pa.table({"id": pa.array(range(20), pa.int64()), "v": [f"v{i}" for i in range(20)]})
    write_deltalake(path, rows, configuration=configuration)
    table = DeltaTable(path)
    table.update(updates={"v": "'updated'"}, predicate="id < 3")
    table.delete("id = 9")
    source = pa.table({"id": pa.array([1, 4, 30], pa.int64()), "v": ["m1", "m4", "m30"]})
    (_merge(table, source).when_matched_delete("s.id = 4").when_matched_update_all()
     .when_not_matched_insert_all().execute())
    write_deltalake(path, pa.table({"id": pa.array([40, 41], pa.int64()), "v": ["a", "b"]}),
                    mode="append")
    table = DeltaTable(path)
    table.update(updates={"v": "'v12'"}, predicate="id = 12")


@pytest.fixture(scope="module")
def cdf_on_table(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("cdf-on") / "t")
    write_changes(path, CDF_ON)
    return path


@pytest.fixture(scope="module")
def cdf_off_table(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("cdf-off") / "t")
    write_changes(path)
    return path


@pytest.fixture(params=["one task", "shuffled"])
def netting(request, monkeypatch) -> str:
    """Rewrites netted in one task (small ones, as in these tests), or after a shuffle (big
    ones)."""
    if request.param == "shuffled":
        monkeypatch.setattr(change_feed, "_ONE_TASK_BYTES", -1)
    return request.param


def _feed_rows(df, columns: list[str]) -> Counter:
    return table_rows(df.select(*columns).toArrow())


def _load_cdf_rows(path: str, start: int, end: int | None, columns: list[str]) -> Counter:
    cdf = pa.table(DeltaTable(path).load_cdf(starting_version=start, ending_version=end))
    return table_rows(cdf.select(columns))


def _data_columns(path: str) -> list[str]:
    return [f.name for f in DeltaTable(path).schema().fields]


@pytest.mark.parametrize("start, end", [(0, None), (1, 3), (3, 3), (4, 5)])
def test_written_cdf_table_matches_load_cdf(spark, cdf_on_table, assert_same_rows, start, end):
    columns = _data_columns(cdf_on_table) + COMPARED
    got = _feed_rows(read_change_feed(spark, cdf_on_table, start, end), columns)
    assert_same_rows(got, _load_cdf_rows(cdf_on_table, start, end, columns))


@pytest.mark.parametrize("name", ["delta-rs/cdf-table", "delta-rs/simple_table_with_cdc",
                                  "delta-golden/commit-info-containing-arbitrary-operationParams-types"])
def test_shared_cdf_tables_match_load_cdf(spark, shared_table, assert_same_rows, name):
    path = shared_table(name)
    columns = _data_columns(path) + COMPARED
    got = _feed_rows(read_change_feed(spark, path, 0), columns)
    assert_same_rows(got, _load_cdf_rows(path, 0, None, columns))


def test_feed_columns_and_types_are_deltas(spark, shared_table):
    df = read_change_feed(spark, shared_table("delta-rs/cdf-table"), 1, 1)
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("id", "int"), ("name", "string"), ("birthday", "date"), ("_change_type", "string"),
        ("_commit_version", "bigint"), ("_commit_timestamp", "timestamp")]


def test_commit_timestamp_is_the_commit_file_time_not_commit_info(spark, shared_table):
    """Delta: file modification time (or in-commit timestamp); load_cdf: commitInfo.timestamp."""
    path = shared_table("delta-rs/cdf-table")
    commit = os.path.join(path, "_delta_log", f"{3:020d}.json")
    os.utime(commit, (1_800_000_000, 1_800_000_000))
    row = read_change_feed(spark, path, 3).select("_commit_timestamp").toArrow().to_pylist()
    assert [r["_commit_timestamp"].timestamp() for r in row] == [1_800_000_000.0]
    theirs = pa.table(DeltaTable(path).load_cdf(starting_version=3))["_commit_timestamp"]
    assert theirs.cast(pa.int64()).to_pylist() == [1704559499570]  # commitInfo.timestamp


def test_partition_columns_keep_their_schema_position(spark, tmp_path):
    """Delta keeps the table's column order; load_cdf moves partition columns last."""
    path = str(tmp_path / "t")
    rows = pa.table({"region": ["eu", "us"], "id": pa.array([1, 2], pa.int64())})
    write_deltalake(path, rows, partition_by=["region"], configuration=CDF_ON)
    DeltaTable(path).delete("id = 2")
    df = read_change_feed(spark, path, 0)
    assert df.columns[:2] == ["region", "id"]
    assert pa.table(DeltaTable(path).load_cdf(starting_version=0)).column_names[:2] == [
        "id", "region"]
    assert table_rows(df.select("region", "id", *COMPARED).toArrow()) == Counter(
        {("eu", 1, "insert", 0): 1, ("us", 2, "insert", 0): 1, ("us", 2, "delete", 1): 1})


def test_rows_get_their_own_files_commit(spark, tmp_path):
    """Each file's commit is a partition value of the scan's file index, not a lookup by
    size, path or position (v0 and v1 write files of equal size)."""
    path = str(tmp_path / "t")
    batches = [[1, 2], [3, 4], list(range(10, 40))]
    for ids in batches:
        write_deltalake(path, pa.table({"id": pa.array(ids, pa.int64())}), mode="append")
    expected = Counter({(i, "insert", v): 1 for v, ids in enumerate(batches) for i in ids})
    for start in (0, 1):
        df = read_change_feed(spark, path, start).select("id", *COMPARED)
        assert table_rows(df.toArrow()) == Counter(
            {row: n for row, n in expected.items() if row[2] >= start})
        plan = df._jdf.queryExecution().optimizedPlan().toString()
        assert "__delta_provider_constant__commit_version" in plan
        assert "file_modification_time" not in plan and "file_path" not in plan


def test_unchanged_merge_is_skipped_as_delta_does(spark, tmp_path):
    """A MERGE commit without cdc files whose metrics report no change gives nothing in
    Delta; load_cdf reports every copied row as deleted and inserted."""
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"id": pa.array([1, 2], pa.int64())}), configuration=CDF_ON)
    version = append_unchanged_merge(path)
    assert read_change_feed(spark, path, version).count() == 0
    assert pa.table(DeltaTable(path).load_cdf(starting_version=version)).num_rows == 4


def test_range_across_a_dropped_column_is_refused(spark, tmp_path):
    """Delta checks the range's data against the read schema; load_cdf drops the column."""
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"id": [1], "v": ["a"]}), configuration=CDF_ON)
    write_deltalake(path, pa.table({"id": [2]}), mode="overwrite", schema_mode="overwrite")
    with pytest.raises(SchemaChangeError, match="'v' was dropped"):
        read_change_feed(spark, path, 0)
    assert "v" not in pa.table(DeltaTable(path).load_cdf(starting_version=0)).column_names


def _feed_by_version(spark, path: str) -> dict[int, tuple[Counter, Counter]]:
    """(deleted rows, inserted rows) per version; pre/post images count as delete/insert."""
    columns = _data_columns(path)
    feed = read_change_feed(spark, path, 0).toArrow()
    by_version: dict[int, tuple[Counter, Counter]] = {}
    for version in set(feed["_commit_version"].to_pylist()):
        rows = feed.filter(pc.equal(feed["_commit_version"], version))
        old_image = pc.is_in(rows["_change_type"], pa.array(OLD_IMAGES))
        by_version[version] = (table_rows(rows.filter(old_image).select(columns)),
                               table_rows(rows.filter(pc.invert(old_image)).select(columns)))
    return by_version


SNAPSHOT_TABLES = [
    "delta-golden/basic-with-inserts-merge", "delta-golden/basic-with-inserts-updates",
    "delta-golden/basic-with-inserts-deletes-checkpoint", "delta-golden/only-checkpoint-files",
    "delta-golden/snapshot-repartitioned", "delta-rs/simple_table",
    "delta-golden/dv-partitioned-with-checkpoint", "delta-kernel/basic-dv-no-checkpoint",
    "delta-rs/table-with-dv-small", "delta-rs/cdf-table",
]


def _check_versions(spark, path: str, *, cdf_off: bool) -> None:
    by_version = _feed_by_version(spark, path)
    columns = _data_columns(path)
    previous = Counter()
    for version in range(DeltaTable(path).version() + 1):
        deletes, inserts = by_version.get(version, (Counter(), Counter()))
        snapshot = table_rows(oracle_table(path, version).select(columns))
        assert not deletes - previous, f"v{version} deletes rows that were not there"
        assert previous - deletes + inserts == snapshot, f"v{version} does not add up"
        if cdf_off:
            assert not deletes & inserts, f"v{version} deletes and re-inserts unchanged rows"
        previous = snapshot


@pytest.mark.parametrize("name", SNAPSHOT_TABLES)
def test_feed_turns_each_snapshot_into_the_next_shared(spark, shared_table, name):
    path = shared_table(name)
    _check_versions(spark, path, cdf_off=name != "delta-rs/cdf-table")


@pytest.mark.parametrize("fixture", ["cdf_off_table", "cdf_on_table"])
def test_feed_turns_each_snapshot_into_the_next_written(spark, request, fixture):
    path = request.getfixturevalue(fixture)
    _check_versions(spark, path, cdf_off=fixture == "cdf_off_table")


def test_cdf_off_update_reports_only_changed_rows(spark, cdf_off_table):
    """v1 updates 3 of 20 rows copy-on-write: 3 old images deleted, 3 new inserted, the 17
    copied rows not reported; v5 sets a value a row already had: nothing."""
    rows = read_change_feed(spark, cdf_off_table, 1, 1).select("id", "v", "_change_type")
    assert table_rows(rows.toArrow()) == Counter(
        {(i, f"v{i}", "delete"): 1 for i in range(3)}
        | {(i, "updated", "insert"): 1 for i in range(3)})
    assert read_change_feed(spark, cdf_off_table, 5, 5).count() == 0


def test_a_feed_of_netted_commits_alone_has_deltas_column_order(spark, cdf_off_table):
    """Netting puts ``_change_type`` after the other columns; the feed puts it back."""
    assert read_change_feed(spark, cdf_off_table, 1, 2).columns == [
        "id", "v", "_change_type", "_commit_version", "_commit_timestamp"]


def test_cdf_off_rewrite_of_a_table_with_map_columns(spark, tmp_path, assert_same_rows):
    """Copy-on-write commits are netted by row, rows holding maps too (Spark cannot group by
    maps, or, in 4.3, does so but turns their null values into 0)."""
    path = str(tmp_path / "t")
    tags = pa.map_(pa.string(), pa.int64())
    nested = pa.struct([("scores", pa.map_(pa.string(), pa.list_(pa.int64())))])
    write_deltalake(path, pa.table({
        "id": pa.array(range(6), pa.int64()),
        "tags": pa.array([[("a", i), ("b", None)] for i in range(6)], tags),
        "info": pa.array([{"scores": [("x", [i, i])]} for i in range(6)], nested),
    }))
    DeltaTable(path).update(updates={"id": "id + 10"}, predicate="id < 2")
    DeltaTable(path).delete("id = 5")
    _check_versions(spark, path, cdf_off=True)
    changed = read_change_feed(spark, path, 1, 1).select("id", "_change_type")
    assert_same_rows(table_rows(changed.toArrow()), Counter(
        {(0, "delete"): 1, (1, "delete"): 1, (10, "insert"): 1, (11, "insert"): 1}))


def _enable_in_commit_timestamps(path: str, version: int, times_ms: dict[int, int]) -> None:
    """Rewrite the log as if Delta had enabled in-commit timestamps at ``version``: that
    commit upgrades the protocol and sets the properties; ``times_ms`` go into commitInfo."""
    log = Path(path, "_delta_log")
    lines = [json.loads(line) for line in (log / f"{0:020d}.json").read_text().splitlines()]
    metadata = next(a["metaData"] for a in lines if "metaData" in a)
    metadata["configuration"] = {
        **metadata["configuration"], "delta.enableInCommitTimestamps": "true",
        "delta.inCommitTimestampEnablementVersion": str(version),
        "delta.inCommitTimestampEnablementTimestamp": str(times_ms[version])}
    upgrade = [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 7,
                             "writerFeatures": ["changeDataFeed", "inCommitTimestamp"]}},
               {"metaData": metadata}]
    for number, ict in times_ms.items():
        commit = log / f"{number:020d}.json"
        info, *actions = [json.loads(line) for line in commit.read_text().splitlines()]
        info["commitInfo"]["inCommitTimestamp"] = ict  # commitInfo stays the first action
        actions = (upgrade if number == version else []) + actions
        commit.write_text("".join(json.dumps(a) + "\n" for a in [info, *actions]))


def test_commit_timestamp_is_the_in_commit_timestamp_where_enabled(spark, tmp_path):
    """In-commit timestamps enabled at v2: v0 and v1 take their commit files' times, v2 and
    v3 their inCommitTimestamp, though their files are dated later and commitInfo.timestamp
    says otherwise."""
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"id": pa.array(range(4), pa.int64())}), configuration=CDF_ON)
    DeltaTable(path).update(updates={"id": "id + 10"}, predicate="id = 1")
    DeltaTable(path).delete("id = 2")
    write_deltalake(path, pa.table({"id": pa.array([20], pa.int64())}), mode="append")
    _enable_in_commit_timestamps(path, 2, {2: 1_800_000_000_123, 3: 1_800_000_060_456})
    for version, seconds in enumerate([1_700_000_000, 1_700_000_100, 1_900_000_000,
                                       1_900_000_100]):
        os.utime(Path(path, "_delta_log", f"{version:020d}.json"), (seconds, seconds))
    expected_ms = {0: 1_700_000_000_000, 1: 1_700_000_100_000, 2: 1_800_000_000_123,
                   3: 1_800_000_060_456}
    for start, end in [(0, None), (3, 3), (0, 1)]:
        rows = read_change_feed(spark, path, start, end).select(
            "_commit_version", "_commit_timestamp").toArrow()
        times = pc.cast(rows["_commit_timestamp"], pa.int64()).to_pylist()  # microseconds
        got = dict(zip(rows["_commit_version"].to_pylist(), times))
        assert got == {v: ms * 1000 for v, ms in expected_ms.items()
                       if start <= v <= (3 if end is None else end)}


def test_cdf_off_rewrite_of_a_table_with_a_variant_column(spark, tmp_path):
    """Spark cannot group by VARIANT: a copy-on-write DELETE is netted on the values' JSON."""
    path = variant_table(tmp_path / "variant")
    feed = read_change_feed(spark, path, 3, 3)
    assert feed.schema["v"].dataType == VariantType()
    assert _as_json(feed.where("_change_type = 'delete'")) == _expected_json({10: {"k": "v"}})
    assert feed.where("_change_type != 'delete'").count() == 0


def _rows_table(rows: list[tuple]) -> pa.Table:
    info = pa.struct([("tags", pa.map_(pa.string(), pa.int64())), ("xs", pa.list_(pa.float64()))])
    ids, names, scores, infos = zip(*rows)
    return pa.table({"id": pa.array(ids, pa.int64()), "name": pa.array(names, pa.string()),
                     "score": pa.array(scores, pa.float64()), "info": pa.array(infos, info)})


def _overwrite_and_back(path: str, before: pa.Table, after: pa.Table) -> tuple[Counter, Counter]:
    """``before`` written, overwritten by ``after`` (v1), then by ``before`` again (v2); the
    rows v1 deletes and inserts."""
    write_deltalake(path, before)
    write_deltalake(path, after, mode="overwrite")
    write_deltalake(path, before, mode="overwrite")
    old, new = table_rows(before), table_rows(after)
    return old - new, new - old


def _overwritten_and_back(deleted: Counter, inserted: Counter) -> Counter:
    """The feed of v1 (deleting ``deleted``, inserting ``inserted``) and of v2 (the reverse)."""
    return Counter({(*row, "delete", 1): n for row, n in deleted.items()}
                   | {(*row, "insert", 1): n for row, n in inserted.items()}
                   | {(*row, "insert", 2): n for row, n in deleted.items()}
                   | {(*row, "delete", 2): n for row, n in inserted.items()})


def test_cdf_off_rewrite_nets_rows_exactly_as_multisets(spark, tmp_path, assert_same_rows,
                                                        netting):
    """Overwrites (copy-on-write commits removing every file) give removed minus added rows as
    multisets: duplicates counted, rows differing only in a null, a NaN or a nested value told
    apart, copies of each netted away; two commits in one range are netted apart."""
    nan = float("nan")
    a, b = (1, "a", 1.0, {"tags": [("k", 1)], "xs": [1.0]}), (2, "b", nan, None)
    named, unnamed = (3, "c", 0.5, None), (3, None, 0.5, None)
    zero_tag, null_tag = [(4, "d", 1.0, {"tags": [("k", t)], "xs": [nan, None]}) for t in (0, None)]
    shorter = (5, "e", 1.0, {"tags": [], "xs": [1.0]})
    longer = (5, "e", 1.0, {"tags": [], "xs": [1.0, 1.0]})
    before = [a, a, a, b, b, unnamed, null_tag, shorter, named]
    after = [a, b, b, b, named, zero_tag, longer, named, (6, "new", -0.0, None)]
    path = str(tmp_path / "t")
    deleted, inserted = _overwrite_and_back(path, _rows_table(before), _rows_table(after))
    assert sum(deleted.values()) == 5 and sum(inserted.values()) == 5  # the test has teeth
    feed = read_change_feed(spark, path, 1, 2).select(
        "id", "name", "score", "info", "_change_type", "_commit_version").toArrow()
    assert_same_rows(table_rows(feed), _overwritten_and_back(deleted, inserted))


def test_cdf_off_partial_rewrite_nets_only_the_rewritten_files(spark, tmp_path, assert_same_rows):
    """A DELETE rewrites the one file holding its rows: duplicates in it and in an untouched
    file are counted apart, the rewritten file's other rows net away."""
    path = str(tmp_path / "t")
    first = pa.table({"id": pa.array([1, 2, 2, 3], pa.int64()), "v": ["x", "y", "y", None]})
    write_deltalake(path, first)
    write_deltalake(path, pa.table({"id": pa.array([1, 3], pa.int64()), "v": ["x", None]}),
                    mode="append")
    DeltaTable(path).delete("id = 2")
    assert DeltaTable(path).history(1)[0]["operationMetrics"]["num_removed_files"] == 1
    feed = read_change_feed(spark, path, 2, 2).select("id", "v", "_change_type").toArrow()
    assert_same_rows(table_rows(feed), Counter({(2, "y", "delete"): 2}))
    _check_versions(spark, path, cdf_off=True)


def test_cdf_off_rewrite_of_exact_types_counts_groups_without_a_window(spark, tmp_path,
                                                                        assert_same_rows, netting):
    """Where grouping gives back each row's own values (no floats, maps, VARIANT or collated
    strings), the netting counts the groups instead of windowing over them: duplicates, nulls
    and nested-only differences still count apart, and two commits in a range net apart."""
    item = pa.struct([("tags", pa.list_(pa.string())), ("at", pa.date32())])
    a, b = (1, "a", {"tags": ["k"], "at": None}), (2, None, None)
    short, long = [(3, "c", {"tags": tags, "at": None}) for tags in (["k"], ["k", None])]
    before = [a, a, a, b, short, (4, "d", None)]
    after = [a, b, b, long, (4, "d", None), (5, "e", {"tags": [], "at": None})]
    path = str(tmp_path / "t")

    def rows(values):
        ids, names, items = zip(*values)
        return pa.table({"id": pa.array(ids, pa.int64()), "name": pa.array(names, pa.string()),
                         "item": pa.array(items, item)})
    deleted, inserted = _overwrite_and_back(path, rows(before), rows(after))
    assert sum(deleted.values()) == 3 and sum(inserted.values()) == 3  # the test has teeth
    feed = read_change_feed(spark, path, 1, 2)
    plan = feed._jdf.queryExecution().optimizedPlan().toString()
    assert "Aggregate" in plan and "Window" not in plan
    assert ("RepartitionByExpression" in plan) == (netting == "shuffled")
    assert_same_rows(table_rows(feed.select("id", "name", "item", "_change_type",
                                            "_commit_version").toArrow()),
                     _overwritten_and_back(deleted, inserted))
    floats = str(tmp_path / "floats")
    write_deltalake(floats, pa.table({"x": [0.0, 1.0]}))
    write_deltalake(floats, pa.table({"x": [-0.0]}), mode="overwrite")
    assert "Window" in read_change_feed(spark, floats, 1)._jdf.queryExecution(
        ).optimizedPlan().toString()


def test_cdf_off_small_rewrite_is_netted_in_one_task_without_a_shuffle(spark, tmp_path,
                                                                       assert_same_rows):
    """A copy-on-write DELETE whose files fit one task is netted where they are read: the
    feed's plan has no exchange (none for the grouping, none for the window), and rows read
    in many splits of their files still net exactly."""
    ids = pa.array(range(3000), pa.int64())
    spark.conf.set("spark.sql.files.maxPartitionBytes", "1024")  # many splits of each file
    try:
        for kind, values in (("counted", pc.cast(ids, pa.string())),
                             ("windowed", pc.cast(ids, pa.float64()))):
            path = str(tmp_path / kind)
            write_deltalake(path, pa.table({"id": ids, "v": values}))
            DeltaTable(path).delete("id % 1000 = 7")
            assert spark.read.parquet(path).rdd.getNumPartitions() > 1
            feed = read_change_feed(spark, path, 1)
            plan = feed._jdf.queryExecution().executedPlan().toString()
            assert "Exchange" not in plan and ("Window" in plan) == (kind == "windowed"), plan
            rows = table_rows(feed.select("id", "_change_type", "_commit_version").toArrow())
            assert_same_rows(rows, Counter({(i, "delete", 1): 1 for i in (7, 1007, 2007)}))
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")


def test_netted_rows_do_not_make_the_feeds_union_copy_the_appended_rows(spark, tmp_path,
                                                                       netting):
    """The netting repeats rows (a group's balance as that many rows): in the union's
    generated stage that would make Spark copy every row of every other frame. The netted
    frame is compiled apart, so the stage that reads the appends copies none."""
    path = str(tmp_path / "t")
    ids = pa.array(range(100), pa.int64())
    write_deltalake(path, pa.table({"id": ids, "v": pc.cast(ids, pa.string())}))
    write_deltalake(path, pa.table({"id": ids, "v": pc.cast(ids, pa.string())}), mode="append")
    DeltaTable(path).delete("id = 7")
    feed = read_change_feed(spark, path, 0)
    spark.conf.set("spark.sql.adaptive.enabled", "false")  # the stages, planned up front
    try:
        stages = feed._jdf.queryExecution().debug().codegenToSeq()
    finally:
        spark.conf.unset("spark.sql.adaptive.enabled")
    code = {stages.apply(i)._1(): stages.apply(i)._2() for i in range(stages.size())}
    union = [text for plan, text in code.items() if "Union" in plan.splitlines()[0]]
    assert union and not any(".copy()" in text for text in union), list(code)
    rows = table_rows(feed.select("id", "_change_type").toArrow())
    assert rows == Counter({**{(i, "insert"): 2 for i in range(100)}, (7, "delete"): 2})


@pytest.mark.parametrize("kind", ["counted", "windowed"])
def test_cdf_off_rewrite_of_one_commit_is_netted_without_its_version(spark, tmp_path,
                                                                     assert_same_rows, netting,
                                                                     kind):
    """The netted rows of one commit all hold its version and time: the grouping (or window)
    leaves them out and the rows get them back as the commit's, the time its file's."""
    ids = pa.array([1, 2, 2, 3], pa.int64())
    values = pc.cast(ids, pa.string() if kind == "counted" else pa.float64())
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"id": ids, "v": values}))
    DeltaTable(path).delete("id = 2")
    os.utime(Path(path, "_delta_log", f"{1:020d}.json"), (1_800_000_000, 1_800_000_000))
    feed = read_change_feed(spark, path, 1, 1)
    plan = feed._jdf.queryExecution().optimizedPlan().toString()
    grouping = [line for line in plan.splitlines() if "Aggregate [" in line or "Window [" in line]
    assert grouping and not any("_commit_" in line for line in grouping), plan
    assert [(f.name, f.dataType.simpleString()) for f in feed.schema.fields][2:] == [
        ("_change_type", "string"), ("_commit_version", "bigint"),
        ("_commit_timestamp", "timestamp")]
    rows = feed.toArrow()
    assert [t.timestamp() for t in rows["_commit_timestamp"].to_pylist()] == [1_800_000_000] * 2
    assert_same_rows(table_rows(rows.select(["id", "_change_type", "_commit_version"])),
                     Counter({(2, "delete", 1): 2}))
