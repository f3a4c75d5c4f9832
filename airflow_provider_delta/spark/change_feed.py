"""Change feeds as Spark DataFrames: the table's columns plus Delta's three CDF columns.

The feed plan's files are read with the reader's machinery (one scan per group of files,
partition values and deletion vectors from the log, column mapping). What a file's rows mean
is attached the way partition values are: ``_commit_version``, ``_commit_timestamp`` and, for
files that are not change data files, ``_change_type`` are per-file constants joined to the
rows by file. Change data files carry ``_change_type`` as a column of their own.

Commits without the Change Data Feed that rewrite files are netted: per commit, every distinct
row is counted +1 per removed copy and -1 per added copy, and what remains is reported as that
many ``delete`` (positive) or ``insert`` (negative) rows. An unchanged copied row nets to zero;
an updated row is a ``delete`` of its old image and an ``insert`` of its new one (we do not
pair them into update pre/post images: without keys the pairing is a guess).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import replace
from functools import reduce

import numpy as np
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, MapType, StructType, VariantType

from airflow_provider_delta.core import plan_change_feed
from airflow_provider_delta.core.change_feed import (
    DELETE, INSERT, ChangeFeedPlan, ChangeFile, CommitChanges,
)
from airflow_provider_delta.core.file_table import objects_file_table
from airflow_provider_delta.core.model import Plan, PlannedFile, TableMetadata
from airflow_provider_delta.core.storage import TableLocation
from airflow_provider_delta.spark.deletion_vectors import deleted_rows
from airflow_provider_delta.spark.reader import read_plan
from airflow_provider_delta.spark.schema import logical_schema, quoted

CHANGE_TYPE = "_change_type"
COMMIT_VERSION = "_commit_version"
COMMIT_TIMESTAMP = "_commit_timestamp"
_CDF_FIELDS = (
    {"name": CHANGE_TYPE, "type": "string", "nullable": True, "metadata": {}},
    {"name": COMMIT_VERSION, "type": "long", "nullable": True, "metadata": {}},
    {"name": COMMIT_TIMESTAMP, "type": "timestamp", "nullable": True, "metadata": {}},
)
_BALANCE = "__delta_provider_balance"
_KEY = "__delta_provider_comparable_"


def read_change_feed(
    spark: SparkSession,
    table_uri: str,
    start_version: int,
    end_version: int | None = None,
    *,
    storage_options: dict[str, str] | None = None,
) -> DataFrame:
    """The row changes of versions ``start_version..end_version`` (inclusive; latest if None).

    Columns: the table's (see :func:`~airflow_provider_delta.core.plan_change_feed` for which
    schema), then ``_change_type`` (``insert``, ``delete``, ``update_preimage``,
    ``update_postimage``), ``_commit_version`` (long) and ``_commit_timestamp`` (timestamp),
    as Delta's Change Data Feed has them.
    """
    feed = plan_change_feed(table_uri, start_version, end_version, storage_options=storage_options)
    return read_feed(spark, feed, storage_options=storage_options)


def read_feed(
    spark: SparkSession, feed: ChangeFeedPlan, *, storage_options: dict[str, str] | None = None
) -> DataFrame:
    """The rows of a change feed plan (see :func:`read_change_feed`)."""
    reader = _FeedReader(spark, feed, storage_options)
    frames = reader.frames([c for c in feed.commits if not c.net])
    netted = reader.frames([c for c in feed.commits if c.net])
    if netted:
        frames.append(_net_changes(_union(netted)))
    schema = logical_schema(_with_cdf_columns(feed.metadata, tagged=()))
    if not frames:
        return spark.createDataFrame([], schema)
    return _union(frames).select(*[F.col(quoted(name)) for name in schema.names])


def snapshot_as_inserts(df: DataFrame, version: int, timestamp_ms: int) -> DataFrame:
    """A snapshot's rows as a change feed of inserts at ``version`` (a first full load)."""
    return df.select(
        "*", F.lit(INSERT).alias(CHANGE_TYPE), F.lit(version).cast("long").alias(COMMIT_VERSION),
        F.lit(_utc(timestamp_ms)).alias(COMMIT_TIMESTAMP),
    )


class _FeedReader:
    """Reads groups of a feed's files, each row tagged with its commit and change type."""

    def __init__(
        self, spark: SparkSession, feed: ChangeFeedPlan, storage_options: dict[str, str] | None
    ):
        self.spark = spark
        self.feed = feed
        self.storage_options = storage_options
        self.root = TableLocation(feed.table_uri, storage_options).root_uri

    def frames(self, commits: Iterable[CommitChanges]) -> list[DataFrame]:
        """One DataFrame per kind of file present: change data, whole files, vector changes."""
        cdc, whole, vectors, vector_rows = [], [], [], {}
        for commit in commits:
            tags = {
                COMMIT_VERSION: commit.version,
                COMMIT_TIMESTAMP: _utc(commit.timestamp_ms),
            }
            for change in commit.files:
                if change.kind == "cdc":
                    cdc.append(_tagged(change.file, tags))
                elif change.kind in (INSERT, DELETE):
                    whole.append(_tagged(change.file, {**tags, CHANGE_TYPE: change.kind}))
                else:
                    for kind, rows in self._vector_changes(commit.version, change):
                        vector_rows[len(vectors)] = rows
                        untouched = replace(change.file, deletion_vector=None)
                        vectors.append(_tagged(untouched, {**tags, CHANGE_TYPE: kind}))
        frames = []
        if cdc:
            frames.append(self._read(cdc, tagged=(COMMIT_VERSION, COMMIT_TIMESTAMP)))
        if whole:
            frames.append(self._read(whole))
        if vectors:
            frames.append(self._read(vectors, only_rows=vector_rows))
        return frames

    def _read(self, files, *, tagged=(CHANGE_TYPE, COMMIT_VERSION, COMMIT_TIMESTAMP),
              only_rows=None) -> DataFrame:
        metadata = _with_cdf_columns(self.feed.metadata, tagged)
        plan = Plan(
            table_uri=self.feed.table_uri, start_version=self.feed.start_version,
            end_version=self.feed.end_version, file_table=objects_file_table(files, metadata),
            metadata=metadata,
        )
        return read_plan(self.spark, plan, storage_options=self.storage_options,
                         only_rows=only_rows)

    def _vector_changes(self, version: int, change: ChangeFile) -> list[tuple[str, np.ndarray]]:
        """Rows the new vector masks and the old did not (deleted), and the reverse (restored)."""
        new = self._masked(change.file.deletion_vector, version)
        old = self._masked(change.previous_vector, version)
        differences = ((DELETE, np.setdiff1d(new, old)), (INSERT, np.setdiff1d(old, new)))
        return [(kind, rows) for kind, rows in differences if len(rows)]

    def _masked(self, vector, version: int) -> np.ndarray:
        if vector is None or vector.cardinality == 0:
            return np.array([], dtype=np.uint64)
        return deleted_rows(vector, table_root_uri=self.root, table_uri=self.feed.table_uri,
                            version=version, storage_options=self.storage_options)


def _utc(epoch_ms: int) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(milliseconds=epoch_ms)


def _tagged(file: PlannedFile, tags: dict) -> PlannedFile:
    return replace(file, partition_values={**file.partition_values, **tags})


def _with_cdf_columns(metadata: TableMetadata, tagged: tuple[str, ...]) -> TableMetadata:
    """The table's metadata with the CDF columns appended; ``tagged`` ones come per file."""
    schema = {**metadata.schema, "fields": [*metadata.schema.get("fields", []), *_CDF_FIELDS]}
    return replace(metadata, schema=schema,
                   partition_columns=(*metadata.partition_columns, *tagged))


def _net_changes(rows: DataFrame) -> DataFrame:
    """Removed minus added rows, per commit, as multisets (see the module docstring)."""
    plain, keyed = [], {}
    for field in rows.schema.fields:
        if field.name == CHANGE_TYPE:
            continue
        if not _groupable(field.dataType):
            keyed[field.name] = _comparable(F.col(quoted(field.name)), field.dataType)
        else:
            plain.append(F.col(quoted(field.name)))
    keys = [key.alias(f"{_KEY}{number}") for number, key in enumerate(keyed.values())]
    sign = F.when(F.col(CHANGE_TYPE) == DELETE, 1).otherwise(-1)
    balances = rows.groupBy(*plain, *keys).agg(
        F.sum(sign).alias(_BALANCE), *[F.first(quoted(name)).alias(name) for name in keyed])
    balance = F.col(_BALANCE)
    return (
        balances.where(balance != 0)
        .select(*[F.col(quoted(f.name)) for f in rows.schema.fields if f.name != CHANGE_TYPE],
                F.when(balance > 0, DELETE).otherwise(INSERT).alias(CHANGE_TYPE),
                F.explode(F.sequence(F.lit(1).cast("long"), F.abs(balance))).alias(_BALANCE))
        .drop(_BALANCE)
    )


def _groupable(data_type: DataType) -> bool:
    """Whether Spark groups values of this type faithfully (no maps, no VARIANT inside)."""
    if isinstance(data_type, (MapType, VariantType)):
        return False
    if isinstance(data_type, ArrayType):
        return _groupable(data_type.elementType)
    if isinstance(data_type, StructType):
        return all(_groupable(f.dataType) for f in data_type.fields)
    return True


def _comparable(column: Column, data_type: DataType) -> Column:
    """A value to group by in place of one Spark cannot group: each map as its entries sorted
    by key, each VARIANT as its JSON.

    Spark cannot group by maps (older versions) or loses their null values when it does
    (4.3 sorts them with ``mapsort``, null values coming out as 0); arrays of structs group.
    """
    if isinstance(data_type, VariantType):
        return F.to_json(column)
    if isinstance(data_type, MapType):
        entries = F.array_sort(F.map_entries(column), _by_key)
        return F.transform(entries, lambda entry: F.struct(
            entry["key"].alias("key"),
            _comparable(entry["value"], data_type.valueType).alias("value")))
    if isinstance(data_type, ArrayType) and not _groupable(data_type.elementType):
        return F.transform(column, lambda element: _comparable(element, data_type.elementType))
    if isinstance(data_type, StructType) and not _groupable(data_type):
        fields = [_comparable(column[f.name], f.dataType).alias(f.name) for f in data_type.fields]
        return F.when(column.isNotNull(), F.struct(*fields))
    return column


def _by_key(left: Column, right: Column) -> Column:
    return (F.when(left["key"] < right["key"], -1)
            .when(left["key"] > right["key"], 1).otherwise(0))


def _union(frames: list[DataFrame]) -> DataFrame:
    return reduce(DataFrame.unionByName, frames)
