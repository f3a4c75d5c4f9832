"""A small change feed batch read on the driver with Arrow, for the ``delta-merge`` sink.

The sink takes its batch on the driver anyway (deltalake's MERGE runs there). For a small batch
a Spark job (the scan, the broadcast of the files' tags, the collect) costs far more than
reading the few files the batch holds, so those are read here directly.

Only batches that this reader reads exactly as the Spark reader does are taken: change data
files and whole added or removed files, without deletion vectors, column mapping, commits to
net (copy-on-write without the Change Data Feed) or VARIANT columns, and Parquet columns whose
types are the table's or widen to it losslessly (wider integers, float to double, string and
binary encodings, millisecond timestamps). Files Spark would rebase (INT96, or written with
Spark's legacy calendar) are left to Spark too. For any other batch, and one above
:data:`MAX_BYTES`, :func:`read_feed_on_driver` returns None and the caller reads it with Spark.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import Schema

from airflow_provider_delta.core.change_feed import CDC, DELETE, INSERT, ChangeFeedPlan
from airflow_provider_delta.errors import MissingDataFileError
from airflow_provider_delta.core.change_feed import CHANGE_TYPE, COMMIT_TIMESTAMP, COMMIT_VERSION
from airflow_provider_delta.storage import read_range

MAX_BYTES = 256 * 2**20
_FEED_FIELDS = (pa.field(CHANGE_TYPE, pa.string()), pa.field(COMMIT_VERSION, pa.int64()),
                pa.field(COMMIT_TIMESTAMP, pa.timestamp("us", tz="UTC")))
_SPARK_LEGACY_CALENDAR_KEYS = (b"org.apache.spark.legacyDateTime", b"org.apache.spark.legacyINT96")
_DATE_TIME_TYPES = ("DATE", "TIMESTAMP", "TIMESTAMP_MILLIS", "TIMESTAMP_MICROS")


class _NeedsSpark(Exception):
    """A file this reader cannot read exactly as Spark does."""


def read_feed_on_driver(feed: ChangeFeedPlan, *, storage_options: dict[str, str] | None = None
                        ) -> pa.Table | None:
    """The feed's rows as Spark's ``read_feed`` gives them (data columns, ``_change_type``,
    ``_commit_version``, ``_commit_timestamp``), or None where Spark must read it."""
    if not _plain(feed):
        return None
    pieces = []
    try:
        schema = pa.schema([*_data_schema(feed), *_FEED_FIELDS])
        stamps = {commit.version: dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
                  + dt.timedelta(milliseconds=commit.timestamp_ms) for commit in feed.commits}
        for file in feed.file_table.to_pylist():  # a small batch: a few files
            constants = {**file["partition_values"], COMMIT_VERSION: file["version"],
                         COMMIT_TIMESTAMP: stamps[file["version"]]}
            if file["kind"] != CDC:  # change data files hold it as a column
                constants[CHANGE_TYPE] = file["kind"]
            pieces.append(_file_rows(feed, file, schema, constants, storage_options))
    except _NeedsSpark:
        return None
    return pa.concat_tables(pieces) if pieces else schema.empty_table()


def _plain(feed: ChangeFeedPlan) -> bool:
    """No deletion vectors, netting, column mapping or VARIANT; small enough."""
    return (feed.total_bytes <= MAX_BYTES and feed.metadata.column_mapping_mode == "none"
            and not _holds_variant(feed.metadata.schema)
            and all(not commit.net for commit in feed.commits)
            and pc.all(pc.is_in(feed.file_table.column("kind"),
                                value_set=pa.array([CDC, INSERT, DELETE]))).as_py() is not False
            and feed.file_table.column("deletion_vector").null_count == len(feed))


def _holds_variant(delta_type: Any) -> bool:
    if isinstance(delta_type, str):
        return delta_type == "variant"
    nested = {"struct": lambda t: [f["type"] for f in t["fields"]],
              "array": lambda t: [t["elementType"]],
              "map": lambda t: [t["keyType"], t["valueType"]]}[delta_type["type"]]
    return any(_holds_variant(inner) for inner in nested(delta_type))


def _data_schema(feed: ChangeFeedPlan) -> pa.Schema:
    """The feed schema's data columns as Arrow types (deltalake's mapping), all nullable."""
    try:
        arrow = pa.schema(Schema.from_json(json.dumps(dict(feed.metadata.schema))).to_arrow())
    except ValueError:  # a type deltalake does not map: Spark's reader says what is wrong
        raise _NeedsSpark from None
    return pa.schema([field.with_nullable(True) for field in arrow])


def _file_rows(feed: ChangeFeedPlan, file: dict[str, Any], schema: pa.Schema,
               constants: dict[str, Any], storage_options: dict[str, str] | None) -> pa.Table:
    """The rows of a file (a row of the feed's file table) in ``schema``: its columns cast,
    ``constants`` (partition values and tags) repeated, and nulls for columns the file
    predates."""
    try:
        data = read_range(file["path"], 0, file["size"], feed.table_uri, storage_options)
    except FileNotFoundError:
        raise MissingDataFileError(feed.table_uri, file["version"], file["path"]) from None
    parquet = pq.ParquetFile(pa.BufferReader(data))
    _refuse_rebased(parquet)
    table = parquet.read()
    # Spark matches Parquet columns to the table's by name, ignoring case.
    by_name = {name.lower(): name for name in table.column_names}
    if len(by_name) < table.num_columns:
        raise _NeedsSpark
    columns = {}
    for field in schema:
        name = by_name.get(field.name.lower())
        if field.name in constants or name is None:
            value = constants.get(field.name)
            columns[field.name] = pa.repeat(pa.scalar(value, field.type), table.num_rows)
        else:
            columns[field.name] = _widened(table.column(name), field.type)
    return pa.table(columns, schema=schema)


def _refuse_rebased(parquet: pq.ParquetFile) -> None:
    """Spark's reader rebases INT96 values, and dates and timestamps of files written with its
    legacy calendar (Spark before 3, or flagged)."""
    kv = parquet.metadata.metadata or {}
    legacy = (any(key in kv for key in _SPARK_LEGACY_CALENDAR_KEYS)
              or kv.get(b"org.apache.spark.version", b"3")[:1] in (b"1", b"2"))
    rebased = {"INT96", *(_DATE_TIME_TYPES if legacy else ())}
    for column in parquet.schema:  # the leaf columns
        if rebased & {column.physical_type, column.logical_type.type, column.converted_type}:
            raise _NeedsSpark


def _widened(column: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    if not _widens_to(column.type, target):
        raise _NeedsSpark
    return column if column.type == target else column.cast(target)


def _widens_to(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether Spark's Parquet reader gives ``source`` values unchanged as ``target``."""
    if source == target:
        return True
    types = pa.types
    if types.is_struct(source) and types.is_struct(target):
        return (source.names == target.names
                and all(_widens_to(source.field(i).type, target.field(i).type)
                        for i in range(source.num_fields)))
    if _is_list(source) and types.is_list(target):
        return _widens_to(source.value_type, target.value_type)
    if types.is_map(source) and types.is_map(target):
        return (_widens_to(source.key_type, target.key_type)
                and _widens_to(source.item_type, target.item_type))
    if types.is_signed_integer(source) and types.is_signed_integer(target):
        return source.bit_width <= target.bit_width
    if types.is_timestamp(source) and types.is_timestamp(target):
        # UTC-adjusted Parquet timestamps carry a time zone in Arrow; Spark refuses nanoseconds
        return source.unit in ("ms", "us") and (source.tz is None) == (target.tz is None)
    return ((types.is_string(target) and source in (pa.large_string(), pa.string_view()))
            or (types.is_binary(target) and source in (pa.large_binary(), pa.binary_view()))
            or (source, target) == (pa.float32(), pa.float64()))


def _is_list(data_type: pa.DataType) -> bool:
    return (pa.types.is_list(data_type) or pa.types.is_large_list(data_type)
            or pa.types.is_list_view(data_type) or pa.types.is_large_list_view(data_type))
