"""A plan's files handed to Spark as one scan's file index, with no call per file.

Given explicit paths, Spark's ``InMemoryFileIndex`` checks that each exists and lists it (a
``stat`` per file, or a listing job above
``spark.sql.sources.parallelPartitionDiscovery.threshold``): about 15 s for 100,000 local files.
A folder holding a ``_spark_metadata`` log, as Spark's streaming file sink writes it, is read
through ``MetadataLogFileIndex`` instead, which takes each file's path and size from the log and
touches no data file (Delta's own reader likewise trusts the log's ``size``). So the plan's files
become such a log, built column-wise with Arrow in a temporary folder on the driver: batch file
``0``, the line ``v1``, then one JSON object per file (``path`` as a URI spelled the way Spark
spells it, ``size``, ``isDir``, ``modificationTime``, ``blockReplication``, ``blockSize``,
``action``). The index reads the log once, when the DataFrame is created, so the folder goes at
once. Reading the log costs Spark about 5 microseconds a file on one thread, so a plan of many
files becomes a few such scans, built side by side.

``recursiveFileLookup`` turns partition discovery off (partition values come from the Delta log:
folder names such as ``p=1`` must not add columns) and makes the index serve every file of the
log, not only those inside the log's own folder. Spark skips files named ``_*`` or ``.*``
(:func:`hidden_files`) and files of size 0 here, as it does for explicit paths.
"""

from __future__ import annotations

import json
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, DataFrameReader

from airflow_provider_delta.storage import split_folders

_LOG_FOLDER = "_spark_metadata"
_ENTRY_END = (',"isDir":false,"modificationTime":0,"blockReplication":1,'
              '"blockSize":33554432,"action":"add"}')
PART_FILES = 10_000  # below this, a second scan costs more than its share of the log saves
_MAX_PARTS = 4


def scan_files(reader: DataFrameReader, spark_paths: pa.Array, sizes: pa.Array
               ) -> list[DataFrame]:
    """``reader``'s Parquet scans of the files ``spark_paths`` (as Spark spells them,
    :func:`~airflow_provider_delta.spark.paths.spark_file_paths`) of ``sizes`` bytes: one, or a
    few for many files. Select ``_metadata`` columns of each before a union (a union has none)."""
    reader = reader.option("recursiveFileLookup", "true")
    parts = max(1, min(len(spark_paths) // PART_FILES, _MAX_PARTS, os.cpu_count() or 1))
    bounds = [len(spark_paths) * part // parts for part in range(parts + 1)]
    slices = [(spark_paths[start:end], sizes[start:end])
              for start, end in zip(bounds, bounds[1:])]
    if parts == 1:
        return [_scan(reader, *slices[0])]
    with ThreadPoolExecutor(parts, thread_name_prefix="delta-provider-scan") as pool:
        return list(pool.map(lambda part: _scan(reader, *part), slices))


def hidden_files(paths: pa.Array) -> pa.Array:
    """Which of ``paths`` a Spark file scan skips by their name (Spark's
    ``PartitioningAwareFileIndex.isDataPath``: names starting with ``.``, or with ``_`` and
    holding no ``=``); string tests on the names, not a regular expression per path."""
    names = split_folders(paths)[1]
    underscored = pc.and_(pc.starts_with(names, "_"), pc.invert(pc.match_substring(names, "=")))
    return pc.or_(pc.starts_with(names, "."), underscored)


def _scan(reader: DataFrameReader, spark_paths: pa.Array, sizes: pa.Array) -> DataFrame:
    with tempfile.TemporaryDirectory(prefix="delta-provider-files-") as folder:
        os.mkdir(os.path.join(folder, _LOG_FOLDER))
        with open(os.path.join(folder, _LOG_FOLDER, "0"), "wb") as log:
            log.write(b"v1\n")
            log.write(_log_entries(spark_paths, sizes))
        return reader.parquet(Path(folder).as_uri())


def _log_entries(spark_paths: pa.Array, sizes: pa.Array) -> pa.Buffer:
    entries = pc.binary_join_element_wise(
        '{"path":"', _json_string_content(spark_paths), '","size":', pc.cast(sizes, pa.string()),
        _ENTRY_END, "")
    joined = pc.binary_join(pa.ListArray.from_arrays([0, len(entries)], entries), "\n")
    return joined[0].as_buffer()


def _json_string_content(values: pa.Array) -> pa.Array:
    """``values`` escaped for a JSON string; only values that need escaping go through Python
    (Spark's spelling quotes them in the path, so only an odd authority can)."""
    special = pc.match_substring_regex(values, r'[\x00-\x1f"\\]')
    if not pc.any(special).as_py():
        return values
    escaped = [json.dumps(value)[1:-1] for value in values.filter(special).to_pylist()]
    return pc.replace_with_mask(values, special, pa.array(escaped, pa.string()))
