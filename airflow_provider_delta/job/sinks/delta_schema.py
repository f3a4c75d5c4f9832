"""The rows' schema against a Delta target's, for both Delta sinks: what is refused, and the
columns ``mergeSchema`` adds to the target before a batch is written."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from deltalake import DeltaTable, Field, Schema

from airflow_provider_delta.errors import SinkSchemaMismatchError
from airflow_provider_delta.job.spec import SinkSpec
from airflow_provider_delta.storage import to_uri

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

MERGE_SCHEMA_OPTION = "mergeSchema"  # as Delta's writer option


def arrow_schema(df: DataFrame) -> pa.Schema:
    """The rows' Arrow schema, timestamps in UTC (as Spark writes them to Parquet)."""
    import inspect

    from pyspark.sql.pandas.types import to_arrow_schema

    if "timezone" in inspect.signature(to_arrow_schema).parameters:
        return to_arrow_schema(df.schema, timezone="UTC")
    return to_arrow_schema(df.schema)  # pyspark < 4.2: timestamps are always UTC


def delta_schema(df: DataFrame) -> Schema:
    return Schema.from_arrow(arrow_schema(df))


def check_rows(spec: SinkSpec, table: DeltaTable | None, df: DataFrame) -> None:
    """Refuse rows the target (``table``, None: not created yet) cannot take."""
    _refuse_variants(to_uri(spec.path), df)
    check_schema(spec, table, delta_schema(df))


def _refuse_variants(uri: str, df: DataFrame) -> None:
    """deltalake would commit a VARIANT as a plain struct of two binaries."""
    variants = [f.name for f in df.schema.fields if _holds_variant(f.dataType)]
    if variants:
        raise SinkSchemaMismatchError(
            uri, f"column(s) {variants} hold VARIANT values, which this sink cannot "
            "commit; turn them into strings with to_json(...) in the sql or transform, or "
            "use sink='delta-spark' where the cluster has the Delta jars")


def check_schema(spec: SinkSpec, table: DeltaTable | None, rows: Schema) -> None:
    """Compare the rows' names and types (a Delta schema) with the target's, if it exists."""
    uri = to_uri(spec.path)
    names = [f.name for f in rows.fields]
    missing = [c for c in spec.partition_by if c not in names]
    if missing:
        raise SinkSchemaMismatchError(uri, f"partition columns {missing} not in the rows")
    if table is None:
        return
    new_columns(spec, table, rows)
    existing = tuple(table.metadata().partition_columns)
    if spec.partition_by and tuple(spec.partition_by) != existing:
        raise SinkSchemaMismatchError(
            uri, f"target is partitioned by {list(existing)}, "
            f"partition_by asks for {list(spec.partition_by)}"
        )


def new_columns(spec: SinkSpec, table: DeltaTable, rows: Schema) -> list[Field]:
    """Columns of the rows that the target lacks, when ``mergeSchema`` lets them in.

    Columns match by name, as Delta reads them; any other difference is refused.
    """
    uri = to_uri(spec.path)
    wanted = dict(_field_types(table.schema()))
    got = dict(_field_types(rows))
    added = [f for f in rows.fields if f.name not in wanted]
    differs = any(got.get(name) != kind for name, kind in wanted.items())
    if differs:
        raise SinkSchemaMismatchError(uri, f"target has {wanted}, rows have {got}")
    if added and not _merge_schema(spec):
        names = [f.name for f in added]
        raise SinkSchemaMismatchError(
            uri, f"the rows add column(s) {names}; set sink_options="
            f"{{'{MERGE_SCHEMA_OPTION}': 'true'}} to add them to the target, older rows "
            "reading null")
    return [Field(f.name, f.type, nullable=True) for f in added]


def add_new_columns(spec: SinkSpec, table: DeltaTable | None, rows: Schema) -> None:
    """Evolve the target before a batch is written: a run killed after this commit finds the
    columns in place and writes its rows, so the rows still land once."""
    added = [] if table is None else new_columns(spec, table, rows)
    if added:
        table.alter.add_columns(added)
        log.info("%s: added column(s) %s (mergeSchema)", to_uri(spec.path),
                 [f.name for f in added])


def _merge_schema(spec: SinkSpec) -> bool:
    return str(spec.options.get(MERGE_SCHEMA_OPTION, "false")).lower() == "true"


def _holds_variant(kind: Any) -> bool:
    from pyspark.sql.types import ArrayType, MapType, StructType, VariantType

    if isinstance(kind, StructType):
        return any(_holds_variant(f.dataType) for f in kind.fields)
    if isinstance(kind, ArrayType):
        return _holds_variant(kind.elementType)
    if isinstance(kind, MapType):
        return _holds_variant(kind.keyType) or _holds_variant(kind.valueType)
    return isinstance(kind, VariantType)


def _field_types(schema: Schema) -> list[tuple[str, Any]]:
    """(name, type) per column, ignoring nullability and field metadata."""
    return [(f["name"], f["type"]) for f in json.loads(schema.to_json())["fields"]]
