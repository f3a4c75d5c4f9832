"""Log-only Delta tables of many commits for the core benchmarks.

Each table starts as a one-row table written by deltalake (protocol, metadata, a real
checkpoint to copy the layout from). Every later commit overwrites the table: it removes
the previous file and adds a new one, as ``mode="overwrite"`` does, and every 10th version
gets a checkpoint as Delta writes them (``delta.checkpointInterval=10``). Overwrites keep
the live set at one file, so generating 100,000 commits with 10,000 checkpoints is linear;
tombstones are not kept because ``delta.deletedFileRetentionDuration`` is zero. The
AddFiles point at files that are not written: both benchmarks only read the log.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake

CHECKPOINT_INTERVAL = 10
_CONFIG = {
    "delta.checkpointInterval": str(CHECKPOINT_INTERVAL),
    "delta.deletedFileRetentionDuration": "interval 0 seconds",
}


def build_table(path: Path, commits: int, checkpoint_interval: int = CHECKPOINT_INTERVAL) -> Path:
    """Create (or reuse, when complete) a table at ``path`` with versions 0..commits-1 and a
    checkpoint every ``checkpoint_interval`` versions."""
    marker = path / "_delta_log" / f"{commits - 1:020d}.json"
    if marker.exists() and not (path / "_delta_log" / f"{commits:020d}.json").exists():
        return path
    shutil.rmtree(path, ignore_errors=True)
    write_deltalake(str(path), pa.table({"id": pa.array([0], pa.int64())}), configuration=_CONFIG)
    DeltaTable(str(path)).create_checkpoint()
    template = pq.read_table(path / "_delta_log" / f"{0:020d}.checkpoint.parquet")
    previous = _first_add_path(template)
    for version in range(1, commits):
        current = f"part-{version:07d}.parquet"
        _write_commit(path, version, previous, current)
        if version % checkpoint_interval == 0:
            _write_checkpoint(path, version, template, current)
        previous = current
    return path


# What OPTIMIZE, VACUUM and SET TBLPROPERTIES commit (as deltalake writes them): no data change.
MAINTENANCE = ("OPTIMIZE", "VACUUM START", "VACUUM END", "SET TBLPROPERTIES")


def build_maintained_table(path: Path, commits: int) -> Path:
    """A table of versions 0..commits-1 whose last commits are :data:`MAINTENANCE`, with one
    checkpoint, just below them (cheap to write: one small JSON file per other commit)."""
    base = commits - len(MAINTENANCE)
    shutil.rmtree(path, ignore_errors=True)
    build_table(path, base, checkpoint_interval=max(base - 1, 1))
    log_dir = path / "_delta_log"
    metadata = next(a for a in map(json.loads, (log_dir / f"{0:020d}.json").read_text()
                                   .splitlines()) if "metaData" in a)
    metadata["metaData"]["configuration"]["delta.logRetentionDuration"] = "interval 60 days"
    millis = 1_700_000_000_000 + base
    live = f"part-{base - 1:07d}.parquet"
    file_actions = [
        {"remove": {"path": live, "deletionTimestamp": millis, "dataChange": False,
                    "partitionValues": {}, "size": 500}},
        {"add": {"path": "part-optimized.parquet", "partitionValues": {}, "size": 500,
                 "modificationTime": millis, "dataChange": False}},
    ]
    extra = {"OPTIMIZE": file_actions, "SET TBLPROPERTIES": [metadata]}
    for version, operation in enumerate(MAINTENANCE, base):
        actions = [{"commitInfo": {"timestamp": millis, "operation": operation}},
                   *extra.get(operation, [])]
        (log_dir / f"{version:020d}.json").write_text(
            "\n".join(json.dumps(a) for a in actions) + "\n")
    return path


def append_data_commit(path: Path, version: int) -> None:
    """Commit ``version``: one file added with dataChange=true (an append)."""
    add = {"add": {"path": f"part-{version:07d}.parquet", "partitionValues": {}, "size": 500,
                   "modificationTime": 1_700_000_000_000 + version, "dataChange": True}}
    (path / "_delta_log" / f"{version:020d}.json").write_text(json.dumps(add) + "\n")


def _first_add_path(checkpoint: pa.Table) -> str:
    return next(a["path"] for a in checkpoint.column("add").to_pylist() if a)


def _write_commit(path: Path, version: int, removed: str, added: str) -> None:
    millis = 1_700_000_000_000 + version
    actions = [
        {"commitInfo": {"timestamp": millis, "operation": "WRITE",
                        "operationParameters": {"mode": "Overwrite"}}},
        {"remove": {"path": removed, "deletionTimestamp": millis, "dataChange": True,
                    "extendedFileMetadata": True, "partitionValues": {}, "size": 500}},
        {"add": {"path": added, "partitionValues": {}, "size": 500, "modificationTime": millis,
                 "dataChange": True, "stats": "{\"numRecords\":1}"}},
    ]
    text = "\n".join(json.dumps(a) for a in actions) + "\n"
    (path / "_delta_log" / f"{version:020d}.json").write_text(text)


def _write_checkpoint(path: Path, version: int, template: pa.Table, added: str) -> None:
    """The template checkpoint with its one AddFile pointing at ``added``."""
    adds = template.column("add").to_pylist()
    adds = [dict(a, path=added) if a else None for a in adds]
    index = template.schema.get_field_index("add")
    column = pa.array(adds, type=template.schema.field("add").type)
    table = template.set_column(index, template.schema.field("add"), column)
    log_dir = path / "_delta_log"
    pq.write_table(table, log_dir / f"{version:020d}.checkpoint.parquet")
    (log_dir / "_last_checkpoint").write_text(json.dumps({"version": version, "size": len(table)}))


def build_wide_table(path: Path, files: int) -> Path:
    """A two-version table whose snapshot holds ``files`` files, in a deltalake checkpoint.

    Version 0 is a one-row table written by deltalake; version 1 appends ``files`` AddFiles
    (log only) in one commit; deltalake then writes the checkpoint at version 1.
    """
    checkpoint = path / "_delta_log" / f"{1:020d}.checkpoint.parquet"
    if checkpoint.exists() and len(DeltaTable(str(path)).file_uris()) == files + 1:
        return path
    shutil.rmtree(path, ignore_errors=True)
    write_deltalake(str(path), pa.table({"id": pa.array([0], pa.int64())}))
    lines = [json.dumps({"commitInfo": {"timestamp": 1_700_000_000_000, "operation": "WRITE",
                                        "operationParameters": {"mode": "Append"}}})]
    lines += [json.dumps({"add": {
        "path": f"part-{i:07d}.parquet", "partitionValues": {}, "size": 500,
        "modificationTime": 1_700_000_000_000, "dataChange": True,
        "stats": json.dumps({"numRecords": 1, "minValues": {"id": i}, "maxValues": {"id": i},
                             "nullCount": {"id": 0}}),
    }}) for i in range(files)]
    (path / "_delta_log" / f"{1:020d}.json").write_text("\n".join(lines) + "\n")
    DeltaTable(str(path)).create_checkpoint()
    return path


# -- the shape of a big production table ----------------------------------------------------

STATS_KINDS = ("json", "struct", "none")
_STATS_SCHEMA = pa.schema([("id", pa.int64()), ("value", pa.float64()), ("name", pa.string()),
                           ("ts", pa.timestamp("us", tz="UTC")), ("part", pa.string())])


def build_stats_table(path: Path, files: int, partitions: int = 50, stats: str = "json") -> Path:
    """A table of ``files`` live files over ``partitions`` partitions, in deltalake's checkpoint.

    Version 0 is an empty table written by deltalake (``id``, ``value``, ``name``, ``ts``,
    partitioned by ``part``); version 1 adds ``files`` AddFiles (log only) in one commit,
    each with the statistics JSON Spark and deltalake write (``numRecords``, min/max and null
    counts of the four data columns) unless ``stats="none"``; deltalake then writes the
    checkpoint at version 1, with ``stats_parsed`` too when ``stats="struct"``
    (``delta.checkpoint.writeStatsAsStruct``).
    """
    assert stats in STATS_KINDS, stats
    checkpoint = path / "_delta_log" / f"{1:020d}.checkpoint.parquet"
    done = path / "_delta_log" / "_complete"
    if checkpoint.exists() and done.exists():
        return path
    shutil.rmtree(path, ignore_errors=True)
    config = {"delta.checkpoint.writeStatsAsStruct": "true"} if stats == "struct" else None
    write_deltalake(str(path), _STATS_SCHEMA.empty_table(), partition_by=["part"],
                    configuration=config)
    lines = [json.dumps({"commitInfo": {"timestamp": 1_700_000_000_000, "operation": "WRITE",
                                        "operationParameters": {"mode": "Append"}}})]
    with_stats = stats != "none"
    lines += [_stats_add_line(i, partitions, with_stats) for i in range(files)]
    (path / "_delta_log" / f"{1:020d}.json").write_text("\n".join(lines) + "\n")
    del lines
    DeltaTable(str(path)).create_checkpoint()
    done.touch()
    return path


def _stats_add_line(i: int, partitions: int, with_stats: bool) -> str:
    part = f"p{i % partitions:02d}"
    add = {"path": f"part={part}/part-{i % 1000:05d}-{i:08x}-4d2c-9a1e-{i * 7919 % 10**12:012d}"
                   f"-c000.snappy.parquet",
           "partitionValues": {"part": part}, "size": 100_000 + (i * 7919) % 900_000,
           "modificationTime": 1_700_000_000_000 + i, "dataChange": True}
    if with_stats:
        low, day = i * 1000, 1 + i % 28
        add["stats"] = (
            f'{{"numRecords":{1000 + i % 100},'
            f'"minValues":{{"id":{low},"value":{i % 97}.25,"name":"a{i:07d}",'
            f'"ts":"2024-02-{day:02d}T00:00:00.000Z"}},'
            f'"maxValues":{{"id":{low + 999},"value":{i % 97 + 900}.75,"name":"z{i:07d}",'
            f'"ts":"2024-02-{day:02d}T23:59:59.999Z"}},'
            f'"nullCount":{{"id":0,"value":{i % 3},"name":{i % 5},"ts":0}}}}')
    return json.dumps({"add": add})
