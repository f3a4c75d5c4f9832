"""Delta schemas as Spark types: the logical schema a result has, and the physical schema to scan.

Delta serialises schemas in Spark's own JSON format (PROTOCOL.md, "Schema Serialization Format"),
so PySpark's parser does the type mapping. What Delta adds is column mapping: with
``delta.columnMapping.mode`` = ``name`` or ``id`` the Parquet files use *physical* field names
(and, in id mode, Parquet field ids), at every nesting level.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, MapType, StructField, StructType

from airflow_provider_delta.core.actions import physical_name
from airflow_provider_delta.core.model import TableMetadata

FIELD_ID_KEY = "delta.columnMapping.id"
PARQUET_FIELD_ID_KEY = "parquet.field.id"  # what Spark's Parquet reader matches ids by


def delta_to_spark_schema(schema: Mapping[str, Any]) -> StructType:
    """Parse a Delta schema (the parsed ``schemaString``) into a Spark ``StructType``."""
    return StructType.fromJson(dict(schema))


def logical_schema(metadata: TableMetadata) -> StructType:
    """The columns a result has: the table's logical names, order and types.

    Every field is nullable, as Spark makes every file-source column nullable.
    """
    return as_nullable(delta_to_spark_schema(metadata.schema))


def data_schema(metadata: TableMetadata) -> StructType:
    """The logical schema without the partition columns (those come from the log)."""
    partitions = set(metadata.partition_columns)
    return StructType(
        [f for f in logical_schema(metadata).fields if f.name not in partitions]
    )


def physical_read_schema(metadata: TableMetadata) -> StructType:
    """The schema to hand Spark's Parquet reader for the table's data columns.

    Same shape as :func:`data_schema`, but every field carries its physical name, and in id
    mode its Parquet field id, so files written under column mapping resolve correctly.
    """
    mode = metadata.column_mapping_mode
    if mode == "none":
        return data_schema(metadata)
    table_fields = {f.name: f for f in delta_to_spark_schema(metadata.schema).fields}
    return StructType(
        [_physical_field(table_fields[f.name], mode) for f in data_schema(metadata).fields]
    )


def to_logical_columns(metadata: TableMetadata) -> dict[str, Column]:
    """Expressions that turn scanned physical data columns into logical ones, keyed by name.

    A cast to the logical type renames nested fields, since Spark casts structs by position.
    """
    mode = metadata.column_mapping_mode
    physical = {f.name: f for f in physical_read_schema(metadata).fields}
    columns = {}
    for logical, table_field in zip(
        data_schema(metadata).fields, _data_fields(metadata), strict=True
    ):
        source = physical[physical_name(table_field.jsonValue(), mode)]
        column = F.col(quoted(source.name))
        if source.dataType.simpleString() != logical.dataType.simpleString():
            column = column.cast(logical.dataType)
        columns[logical.name] = column.alias(logical.name)
    return columns


def to_logical_sql(metadata: TableMetadata) -> list[str] | None:
    """:func:`to_logical_columns` as SQL text, in the logical order; None where a cast is
    needed (column mapping renames nested fields through a cast to the logical type)."""
    mode = metadata.column_mapping_mode
    physical = {f.name: f for f in physical_read_schema(metadata).fields}
    expressions = []
    for logical, table_field in zip(
        data_schema(metadata).fields, _data_fields(metadata), strict=True
    ):
        source = physical[physical_name(table_field.jsonValue(), mode)]
        if source.dataType.simpleString() != logical.dataType.simpleString():
            return None
        expressions.append(quoted(source.name) if source.name == logical.name
                           else f"{quoted(source.name)} AS {quoted(logical.name)}")
    return expressions


def as_nullable(data_type: DataType) -> Any:
    """A copy of ``data_type`` with every field, element and value nullable.

    Column-mapping metadata is dropped: it describes the files, not the result.
    """
    if isinstance(data_type, StructType):
        return StructType(
            [
                StructField(f.name, as_nullable(f.dataType), True, _public_metadata(f))
                for f in data_type
            ]
        )
    if isinstance(data_type, ArrayType):
        return ArrayType(as_nullable(data_type.elementType), True)
    if isinstance(data_type, MapType):
        return MapType(as_nullable(data_type.keyType), as_nullable(data_type.valueType), True)
    return data_type


def _public_metadata(field: StructField) -> dict[str, Any]:
    return {k: v for k, v in field.metadata.items() if not k.startswith("delta.columnMapping.")}


def _data_fields(metadata: TableMetadata) -> list[StructField]:
    partitions = set(metadata.partition_columns)
    return [
        f for f in delta_to_spark_schema(metadata.schema).fields if f.name not in partitions
    ]


def _physical_field(field: StructField, mode: str) -> StructField:
    metadata = {}
    if mode == "id" and FIELD_ID_KEY in field.metadata:
        metadata[PARQUET_FIELD_ID_KEY] = int(field.metadata[FIELD_ID_KEY])
    return StructField(
        physical_name(field.jsonValue(), mode), _physical_type(field.dataType, mode), True,
        metadata
    )


def _physical_type(data_type: DataType, mode: str) -> DataType:
    if isinstance(data_type, StructType):
        return StructType([_physical_field(f, mode) for f in data_type])
    if isinstance(data_type, ArrayType):
        return ArrayType(_physical_type(data_type.elementType, mode), True)
    if isinstance(data_type, MapType):
        return MapType(
            _physical_type(data_type.keyType, mode),
            _physical_type(data_type.valueType, mode),
            True,
        )
    return data_type


def quoted(name: str) -> str:
    """Quote a top-level column name so dots and spaces are not read as nesting."""
    return "`" + name.replace("`", "``") + "`"


def union_by_name(frames: Sequence[DataFrame]) -> DataFrame:
    """The rows of ``frames`` (at least one), columns matched by name."""
    return reduce(DataFrame.unionByName, frames)
