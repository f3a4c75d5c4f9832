"""The changes of copy-on-write commits on a table with row tracking, told by row id.

Each row of a removed file and of an added file gets its stable row id and row commit version
(the materialized columns where not null, else the file's ``baseRowId`` plus the row's position
and its ``defaultRowCommitVersion``; PROTOCOL.md, "Row Tracking"). An added row whose row
version is its commit's was written by it: an ``insert`` where its id is fresh (not
materialized), else an ``update_postimage``; the others were only copied. A removed row whose id
the commit did not copy is a ``delete``, or the ``update_preimage`` of an updated id. These are
the rows Delta's CDF reader gives for such commits; nothing is compared column by column, and
only the narrow (version, id) keys are joined to find the removed rows to report.
"""

from __future__ import annotations

from dataclasses import replace
from functools import reduce
from itertools import groupby

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from airflow_provider_delta.core.change_feed import (
    CHANGE_TYPE, COMMIT_VERSION, DELETE, INSERT, VECTOR, CommitChanges,
)
from airflow_provider_delta.core.model import TableMetadata
from airflow_provider_delta.core.row_tracking import (
    BASE_ROW_ID, DEFAULT_ROW_COMMIT_VERSION, MaterializedColumns,
)
from airflow_provider_delta.spark.schema import quoted

UPDATE_PREIMAGE, UPDATE_POSTIMAGE = "update_preimage", "update_postimage"
_ROW_ID, _ROW_VERSION = "__delta_provider_row_id", "__delta_provider_row_commit_version"
_ROW_INDEX = "__delta_provider_row_position"
_PAIRED = "__delta_provider_paired"
_FILE_TAGS = (BASE_ROW_ID, DEFAULT_ROW_COMMIT_VERSION)
_LONG = {"type": "long", "nullable": True, "metadata": {}}
_MAX_COLLECTED = 1 << 20  # removed rows to report (16 bytes each) picked by a broadcast


def row_id_changes(reader, commits: list[CommitChanges], feed_columns: list[str]) -> DataFrame:
    """The changes of ``commits`` (copy-on-write, read by row id) as rows of ``feed_columns``,
    read by the feed's ``reader`` (a ``spark.change_feed._FeedReader``)."""
    frames = []
    by_columns = sorted(commits, key=lambda c: (c.row_tracking.row_id, c.version))
    for columns, group in groupby(by_columns, key=lambda c: c.row_tracking):
        rows = _keyed_rows(reader, list(group), columns)
        frames.append(_typed_changes(reader.spark, rows, columns).select(
            *(quoted(n) for n in feed_columns)))
    return _union(frames)


def _keyed_rows(reader, commits: list[CommitChanges], columns: MaterializedColumns
                ) -> DataFrame:
    """Every row of the commits' removed (``delete``) and added (``insert``) sides, with its
    row id and row commit version."""
    files, metadata = reader.tagged_files(commits)
    files = _with_file_tags(files)
    kind = files.column("kind")
    whole = files.filter(pc.is_in(kind, value_set=pa.array([INSERT, DELETE])))
    vectors, vector_rows = reader.vector_changes(files.filter(pc.equal(kind, VECTOR)))
    metadata = _with_row_columns(metadata, columns)
    sides = [reader.read_files(part, metadata, list(metadata.partition_columns),
                               only_rows=rows, row_index=_ROW_INDEX)
             for part, rows in ((whole, None), (vectors, vector_rows)) if len(part)]
    rows = _union(sides)
    return rows.select(
        "*",
        F.coalesce(F.col(quoted(columns.row_id)),
                   F.col(BASE_ROW_ID) + F.col(_ROW_INDEX)).alias(_ROW_ID),
        F.coalesce(F.col(quoted(columns.row_commit_version)),
                   F.col(DEFAULT_ROW_COMMIT_VERSION)).alias(_ROW_VERSION),
    )


def _typed_changes(spark, rows: DataFrame, columns: MaterializedColumns) -> DataFrame:
    """The reported rows, typed (see the module docstring).

    An added row is reported when its row version is the commit's: new (a fresh id, not
    materialized: ``insert``) or updated (a preserved id: ``update_postimage``); the others
    were copied. A removed row is reported unless its id was copied: these ids (few: the
    deleted and updated rows) come from the narrow keys alone and are handed back to Spark
    as a small table, so the full rows are never shuffled."""
    removed = F.col(CHANGE_TYPE) == DELETE
    current = F.col(_ROW_VERSION) == F.col(COMMIT_VERSION)
    key = [COMMIT_VERSION, _ROW_ID]
    added = rows.where(~removed & current).withColumn(CHANGE_TYPE, F.when(
        F.col(quoted(columns.row_id)).isNull(), F.lit(INSERT)).otherwise(UPDATE_POSTIMAGE))
    updated = (rows.where(~removed & current & F.col(quoted(columns.row_id)).isNotNull())
               .select(*key, F.lit(True).alias(_PAIRED)))
    gone = (rows.where(removed).select(*key)
            .join(rows.where(~removed & ~current).select(*key), key, "left_anti")
            .join(updated, key, "left"))
    removed_rows = rows.where(removed).join(_small_table(spark, gone), key).withColumn(
        CHANGE_TYPE, F.when(F.col(_PAIRED), F.lit(UPDATE_PREIMAGE)).otherwise(F.lit(DELETE)))
    return removed_rows.drop(_PAIRED).unionByName(added)


def _small_table(spark, keys: DataFrame) -> DataFrame:
    """The keys computed now and handed back to Spark as a broadcast Arrow table, so the
    full rows they pick are not shuffled; left to Spark's join if they are many."""
    table = keys.limit(_MAX_COLLECTED + 1).toArrow()
    if table.num_rows > _MAX_COLLECTED:
        return keys
    return F.broadcast(spark.createDataFrame(table, schema=keys.schema))


def _with_file_tags(files: pa.Table) -> pa.Table:
    """The files with their row-tracking fields among their partition values, which the
    reader attaches to their rows."""
    values = files.column("partition_values").combine_chunks()
    names = [*values.type.names, *_FILE_TAGS]
    return files.set_column(
        files.schema.get_field_index("partition_values"), "partition_values",
        pa.StructArray.from_arrays([*(values.field(n) for n in values.type.names),
                                    *(files.column(n).combine_chunks() for n in _FILE_TAGS)],
                                   names=names))


def _with_row_columns(metadata: TableMetadata, columns: MaterializedColumns) -> TableMetadata:
    """The feed's read metadata plus the hidden materialized columns (read by their physical
    names; null in files without them) and the files' row-tracking fields as tags."""
    mapped = {"delta.columnMapping.physicalName": None} if (
        metadata.column_mapping_mode != "none") else {}
    hidden = [{"name": name, **_LONG, "metadata": {k: name for k in mapped}}
              for name in (columns.row_id, columns.row_commit_version)]
    tags = [{"name": name, **_LONG} for name in _FILE_TAGS]
    schema = {**metadata.schema, "fields": [*metadata.schema["fields"], *hidden, *tags]}
    return replace(metadata, schema=schema,
                   partition_columns=(*metadata.partition_columns, *_FILE_TAGS))


def _union(frames: list[DataFrame]) -> DataFrame:
    return reduce(DataFrame.unionByName, frames)
