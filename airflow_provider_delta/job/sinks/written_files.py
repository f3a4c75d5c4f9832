"""The Parquet files a Spark write left in a folder, and their row counts from the footers."""

from __future__ import annotations

import struct
from typing import Any

import obstore
import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_delta.storage import list_files, open_store

# Spark's default INT96 timestamps are deprecated in Parquet and misread at the extremes
# (0001-01-01, 9999-12-31) by other readers; set per write, so the session keeps its own conf.
PARQUET_TIMESTAMPS = {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS"}


def written_parquet_files(root: str, folder: str, storage_options: dict[str, str] | None
                          ) -> list[tuple[dict[str, Any], str, int]]:
    """(obstore metadata, path inside ``folder``, row count) of each data file Spark wrote."""
    store = open_store(root, storage_options)
    files = []
    for meta in list_files(root, folder, storage_options):
        relative = meta["path"][len(folder) + 1:]
        if _is_data_file(relative):
            files.append((meta, relative, _parquet_num_rows(store, meta["path"], meta["size"])))
    return files


def _is_data_file(relative_path: str) -> bool:
    """False for what Spark's committers write beside the data: markers, checksums, scratch.

    Folders are ``key=value`` partitions (whatever their names start with); anything else
    (``_temporary/``, ``.spark-staging-*/``) is a committer's scratch space.
    """
    *folders, name = relative_path.split("/")
    if not all("=" in folder for folder in folders):
        return False
    marker = name == "_SUCCESS" or name.startswith(("_committed_", "_started_"))
    checksum = name.startswith(".") and name.endswith(".crc")
    return not (marker or checksum)


def _parquet_num_rows(store: Any, path: str, size: int) -> int:
    """Row count from a Parquet footer, fetched with two ranged reads instead of the file."""
    tail = bytes(obstore.get_range(store, path, start=size - 8, end=size))
    footer_length = struct.unpack("<I", tail[:4])[0]
    footer = bytes(obstore.get_range(store, path, start=size - 8 - footer_length, end=size))
    return pq.read_metadata(pa.BufferReader(b"PAR1" + footer)).num_rows
