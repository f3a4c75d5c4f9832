"""The changes of copy-on-write commits on a table with row tracking, paired by row id.

Each row of a removed file and of an added file gets its stable row id and row commit version
(the materialized columns where not null, else the file's ``baseRowId`` plus the row's position
and its ``defaultRowCommitVersion``; PROTOCOL.md, "Row Tracking"). Within a commit, an id and
version found on both sides is a row the rewrite only copied: not reported. What remains is
typed by its id alone: on both sides it is an update (``update_preimage`` the removed image,
``update_postimage`` the added one), else a ``delete`` or an ``insert``, as Delta's CDF reader
reports these commits. Only the narrow (version, id, row version) keys are grouped; the rows
themselves are then picked by a join with the changed keys, which are few.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from itertools import groupby

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from airflow_provider_delta.core.change_feed import (
    CHANGE_TYPE, COMMIT_VERSION, DELETE, INSERT, VECTOR, CommitChanges,
)
from airflow_provider_delta.core.file_table import PLAN_COLUMNS
from airflow_provider_delta.core.model import Plan, TableMetadata
from airflow_provider_delta.core.row_tracking import (
    BASE_ROW_ID, DEFAULT_ROW_COMMIT_VERSION, MaterializedColumns,
)
from airflow_provider_delta.spark.reader import read_plan
from airflow_provider_delta.spark.schema import quoted

UPDATE_PREIMAGE, UPDATE_POSTIMAGE = "update_preimage", "update_postimage"
_ROW_ID, _ROW_VERSION = "__delta_provider_row_id", "__delta_provider_row_commit_version"
_ROW_INDEX = "__delta_provider_row_position"
_PAIRED = "__delta_provider_paired"
_FILE_TAGS = (BASE_ROW_ID, DEFAULT_ROW_COMMIT_VERSION)
_LONG = {"type": "long", "nullable": True, "metadata": {}}


def row_id_changes(reader, commits: list[CommitChanges], feed_columns: list[str]) -> DataFrame:
    """The changes of ``commits`` (copy-on-write, read by row id) as rows of ``feed_columns``,
    read by the feed's ``reader`` (a ``spark.change_feed._FeedReader``)."""
    frames = []
    by_columns = sorted(commits, key=lambda c: (c.row_tracking.row_id, c.version))
    for columns, group in groupby(by_columns, key=lambda c: c.row_tracking):
        rows = _keyed_rows(reader, list(group), columns)
        frames.append(_typed_changes(reader.spark, rows, columns).select(
            *(quoted(n) for n in feed_columns)))
    return frames[0] if len(frames) == 1 else _union(frames)


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
    sides = [_read(reader, metadata, part, rows) for part, rows in
             ((whole, None), (vectors, vector_rows)) if len(part)]
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
    changed = _small_table(spark, gone)
    removed_rows = rows.where(removed).join(F.broadcast(changed), key).withColumn(
        CHANGE_TYPE, F.when(F.col(_PAIRED), F.lit(UPDATE_PREIMAGE)).otherwise(F.lit(DELETE)))
    return removed_rows.drop(_PAIRED).unionByName(added)


def _small_table(spark, keys: DataFrame) -> DataFrame:
    """The keys computed now and handed back to Spark as an Arrow table."""
    table = keys.toArrow()
    return spark.createDataFrame(table.cast(pa.schema(
        [pa.field(f.name, f.type) for f in table.schema])), schema=keys.schema)


def _read(reader, metadata: TableMetadata, files: pa.Table, only_rows) -> DataFrame:
    """A group of the files (tags among their partition values), each row with its
    position in its file."""
    values = files.column("partition_values").combine_chunks()
    names = [*metadata.partition_columns]
    plan = Plan(
        table_uri=reader.feed.table_uri, start_version=reader.feed.start_version,
        end_version=reader.feed.end_version, metadata=metadata,
        file_table=files.select(PLAN_COLUMNS).set_column(
            PLAN_COLUMNS.index("partition_values"), "partition_values",
            pa.StructArray.from_arrays([values.field(n) for n in names], names=names)),
    )
    return read_plan(reader.spark, plan, storage_options=reader.storage_options,
                     only_rows=only_rows, row_index=_ROW_INDEX)


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


def _union(frames: Iterable[DataFrame]) -> DataFrame:
    frames = list(frames)
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result
