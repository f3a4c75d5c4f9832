"""Targets with a long history, built in seconds: other writers' appends written as commit files
(one small Parquet file each, with statistics), a checkpoint every 100 versions made by
deltalake where its writers leave them (versions 99, 199, ...). Used by the long-history tests and
``benchmarks/bench_target_history.py``."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

CHECKPOINT_INTERVAL = 100


def grow_with_foreign_appends(target: Path, until_version: int, rows: pa.Table, *,
                              checkpoints: str = "all") -> None:
    """Commit other writers' appends of ``rows`` (in the target's schema) to the local Delta
    table ``target`` up to version ``until_version``, checkpointing every 100 versions
    (``checkpoints="newest"``: only at ``until_version``, what readers use; much faster)."""
    log = target / "_delta_log"
    first = DeltaTable(str(target)).version() + 1
    data = _parquet_bytes(rows)
    stats = json.dumps(_stats(rows))
    now = int(time.time() * 1000)
    for version in range(first, until_version + 1):
        name = f"part-00000-other-writer-{version:08d}.snappy.parquet"
        (target / name).write_bytes(data)
        actions = [
            {"commitInfo": {"timestamp": now, "operation": "WRITE", "clientVersion": "other",
                            "operationParameters": {"mode": "Append"}}},
            {"add": {"path": name, "partitionValues": {}, "size": len(data),
                     "modificationTime": now, "dataChange": True, "stats": stats}},
        ]
        (log / f"{version:020d}.json").write_text("\n".join(map(json.dumps, actions)) + "\n")
        if (version + 1) % CHECKPOINT_INTERVAL == 0 and checkpoints == "all":  # as deltalake
            DeltaTable(str(target), version=version).create_checkpoint()
    if checkpoints == "newest":
        DeltaTable(str(target), version=until_version).create_checkpoint()


def _parquet_bytes(rows: pa.Table) -> bytes:
    out = io.BytesIO()
    pq.write_table(rows, out)
    return out.getvalue()


def _stats(rows: pa.Table) -> dict:
    import pyarrow.compute as pc

    minimum, maximum = {}, {}
    for name in rows.column_names:
        if pa.types.is_integer(rows[name].type) or pa.types.is_string(rows[name].type):
            bounds = pc.min_max(rows[name]).as_py()
            minimum[name], maximum[name] = bounds["min"], bounds["max"]
    return {"numRecords": rows.num_rows, "minValues": minimum, "maxValues": maximum,
            "nullCount": {name: rows[name].null_count for name in rows.column_names}}
