"""Plans as Arrow tables: the file table's columns, and checkpoints read row group by row group."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_provider_delta.core import file_table, plan_changes, plan_snapshot, replay
from airflow_provider_delta.core.arrow import nulls
from tests.core.conftest import data_change_adds


def test_snapshot_plan_is_an_arrow_table_typed_by_the_delta_schema(shared_table):
    plan = plan_snapshot(shared_table("delta-golden/data-reader-partition-values"))
    table = plan.file_table
    assert table.num_rows == len(plan) == 3
    assert table.schema.field("version").type == pa.int64()
    assert table.schema.field("size").type == pa.int64()
    # the partition types of the table's schema (MANIFEST.tsv), as Arrow types
    assert dict(zip(table.schema.field("partition_values").type.names,
                    (f.type for f in table.schema.field("partition_values").type))) == {
        "as_int": pa.int32(), "as_long": pa.int64(), "as_byte": pa.int8(),
        "as_short": pa.int16(), "as_boolean": pa.bool_(), "as_float": pa.float32(),
        "as_double": pa.float64(), "as_string": pa.string(), "as_string_lit_null": pa.string(),
        "as_date": pa.date32(), "as_timestamp": pa.timestamp("us", tz="UTC"),
        "as_big_decimal": pa.decimal128(1, 0)}
    values = table.column("partition_values").to_pylist()
    assert sum(all(v is None for v in row.values()) for row in values) == 1  # the all-null row


@pytest.mark.parametrize("chunk", [1 << 16, 2])  # 2: row groups read in several chunks
def test_checkpoint_in_small_row_groups_then_commits_give_deltalakes_files(tmp_path, monkeypatch,
                                                                           chunk):
    monkeypatch.setattr(replay, "CHUNK_ROWS", chunk)
    monkeypatch.setattr(file_table, "CHUNK_ROWS", chunk)
    path = str(tmp_path / "t")
    for day in range(12):
        rows = pa.table({"id": list(range(day * 5, day * 5 + 5)), "day": [f"d {day}"] * 5})
        write_deltalake(path, rows, mode="append", partition_by=["day"])
    DeltaTable(path).create_checkpoint()
    _rewrite_in_row_groups_of(Path(path) / "_delta_log" / f"{11:020d}.checkpoint.parquet", 3)
    write_deltalake(path, pa.table({"id": [100], "day": ["d 0"]}), mode="append",
                    partition_by=["day"])
    DeltaTable(path).delete("day = 'd 3'")

    plan = plan_snapshot(path)
    expected = DeltaTable(path).get_add_actions(flatten=True)
    ours = Counter(p[len(f"file://{path}/"):] for p in plan.file_table.column("path").to_pylist())
    theirs = Counter(unquote(p) for p in pa.table(expected).column("path").to_pylist())
    assert ours == theirs and all((Path(path) / p).is_file() for p in ours)
    assert sorted(plan.file_table.column("num_records").to_pylist()) == sorted(
        pa.table(expected).column("num_records").to_pylist())
    assert plan.file_table.column("deletion_vector").null_count == len(plan)
    assert {v["day"] for v in plan.file_table.column("partition_values").to_pylist()} == {
        f"d {day}" for day in range(12)} - {"d 3"}
    assert len(plan_changes(path, 12, 12)) == 1


def _rewrite_in_row_groups_of(checkpoint: Path, rows: int) -> None:
    table = pq.read_table(checkpoint)
    assert table.num_rows > 3 * rows  # several groups hold only adds, one the metadata
    pq.write_table(table, checkpoint, row_group_size=rows)
    assert pq.ParquetFile(checkpoint).metadata.num_row_groups > 3


def test_commits_with_blank_lines_and_other_spacing_plan_as_written(tmp_path):
    # file actions are parsed by Arrow many commits at a time; a commit whose lines do not
    # start as `{"add":` or that holds blank lines must still give each file its own version
    path = str(tmp_path / "t")
    for day in range(4):
        write_deltalake(path, pa.table({"id": [day], "day": [f"d {day}"]}), mode="append",
                        partition_by=["day"])
    DeltaTable(path).delete("day = 'd 0'")
    commit = Path(path) / "_delta_log" / f"{2:020d}.json"
    actions = [json.loads(line) for line in commit.read_text().splitlines()]
    commit.write_text("\n \n".join(json.dumps(a, separators=(", ", " : ")) for a in actions))

    changes = plan_changes(path, 0, 3)
    assert [(v, p) for v, p in zip(changes.file_table.column("version").to_pylist(),
                                   changes.file_table.column("path").to_pylist())] == [
        (v, p) for v in range(4) for p in data_change_adds(path, v)]
    snapshot = plan_snapshot(path)
    assert sorted(snapshot.file_table.column("path").to_pylist()) == sorted(
        p for v in (1, 2, 3) for p in data_change_adds(path, v))


def test_num_records_wherever_the_statistics_put_it(tmp_path):
    # most writers put numRecords first (read by an anchored match); any other place, spacing
    # or no statistics at all must read as written
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"id": [1]}))
    commit = Path(path) / "_delta_log" / f"{0:020d}.json"
    lines = commit.read_text().splitlines()
    add = next(json.loads(line) for line in lines if line.startswith('{"add"'))
    stats = ['{"numRecords":5,"minValues":{"id":1}}', '{ "numRecords" : 7 }',
             '{"minValues":{"numRecords":1},"numRecords":3}', None]
    adds = [json.dumps({"add": {**add["add"], "path": f"f{i}.parquet", "stats": s}})
            for i, s in enumerate(stats)]
    commit.write_text("\n".join([line for line in lines if not line.startswith('{"add"')] + adds))
    assert plan_snapshot(path).file_table.column("num_records").to_pylist() == [5, 7, 3, None]


def test_nulls_of_nested_types_are_whole_arrays():
    kind = pa.struct([("s", pa.string()), ("i", pa.int64()), ("b", pa.bool_()),
                      ("inner", pa.struct([("f", pa.float32())])), ("d", pa.date32())])
    array = nulls(kind, 1000)
    array.validate(full=True)
    assert array.equals(pa.nulls(1000, kind)) and array.null_count == 1000
    assert pa.concat_arrays([array.slice(10, 5), pa.nulls(2, kind)]).to_pylist() == [None] * 7


def test_big_commits_parsed_alone_between_small_ones_keep_their_versions(tmp_path, monkeypatch):
    # a commit of _ALONE_BYTES or more is parsed on its own (its lines need no counting), runs
    # of smaller ones together: each file must still carry its own version, in log order
    path = str(tmp_path / "t")
    for value in range(6):
        write_deltalake(path, pa.table({"id": [value]}), mode="append")
    big = Path(path) / "_delta_log" / f"{3:020d}.json"
    lines = big.read_text().splitlines()
    add = next(json.loads(line) for line in lines if line.startswith('{"add"'))
    lines += [json.dumps({"add": {**add["add"], "path": f"more-{i}.parquet"}}) for i in range(40)]
    big.write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(file_table, "_ALONE_BYTES", len(big.read_bytes()) // 2)

    changes = plan_changes(path, 1, 5)
    assert [(v, p) for v, p in zip(changes.file_table.column("version").to_pylist(),
                                   changes.file_table.column("path").to_pylist())] == [
        (v, p) for v in range(1, 6) for p in data_change_adds(path, v)]
    assert changes.file_table.column("partition_values").to_pylist() == [{}] * 45


def test_a_deletion_vector_the_protocol_does_not_allow_is_still_read(tmp_path):
    # without the deletionVectors feature a range's adds are read with one field of their
    # vectors (cheaper for Arrow); a vector there anyway must still reach the plan in full
    path = str(tmp_path / "t")
    for value in range(3):
        write_deltalake(path, pa.table({"id": [value]}), mode="append")
    commit = Path(path) / "_delta_log" / f"{1:020d}.json"
    vector = {"storageType": "i", "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f",
              "offset": None, "sizeInBytes": 36, "cardinality": 1}
    lines = [json.loads(line) for line in commit.read_text().splitlines()]
    for action in lines:
        if "add" in action:
            action["add"]["deletionVector"] = vector
    commit.write_text("\n".join(json.dumps(a) for a in lines) + "\n")

    vectors = plan_changes(path, 1, 2).file_table.column("deletion_vector").to_pylist()
    assert vectors[0] == {"storage_type": "i", "path_or_inline_dv": vector["pathOrInlineDv"],
                          "size_in_bytes": 36, "cardinality": 1, "offset": None}
    assert vectors[1:] == [None]
