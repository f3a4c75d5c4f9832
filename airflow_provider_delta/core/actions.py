"""Turning raw log actions into the plan's data model: metadata and typed partition values."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Iterator, Mapping
from decimal import Decimal
from typing import Any

from airflow_provider_delta.core.model import TableMetadata

_INTEGER_TYPES = {"byte", "short", "integer", "long"}
_FLOAT_TYPES = {"float", "double"}


def parse_commit(raw: bytes) -> Iterator[dict[str, Any]]:
    """The actions of one commit file (newline-delimited JSON), skipping blank lines."""
    for line in raw.splitlines():
        if line.strip():
            yield json.loads(line)


def changes_data(actions: Iterable[Mapping[str, Any]]) -> bool:
    """Whether a commit changes the table's rows: an ``add`` or ``remove`` with
    ``dataChange=true`` (the default where the flag is missing), or ``cdc`` files.

    OPTIMIZE and other rewrites flag their files ``dataChange=false``; VACUUM commits hold only
    ``commitInfo``; property and schema changes hold ``metaData``: none of them change rows.
    """
    for action in actions:
        if "cdc" in action:
            return True
        for kind in ("add", "remove"):
            file_action = action.get(kind)
            if isinstance(file_action, Mapping) and file_action.get("dataChange", True):
                return True
    return False


def table_metadata(meta_action: Mapping[str, Any], protocol: Mapping[str, Any]) -> TableMetadata:
    """A ``metaData`` action plus the ``protocol`` in force, as :class:`TableMetadata`."""
    schema = meta_action.get("schemaString")
    return TableMetadata(
        table_id=meta_action.get("id", ""),
        schema=json.loads(schema) if isinstance(schema, str) else (schema or {}),
        partition_columns=tuple(meta_action.get("partitionColumns") or ()),
        configuration=dict(meta_action.get("configuration") or {}),
        min_reader_version=int(protocol.get("minReaderVersion", 1)),
        reader_features=tuple(protocol.get("readerFeatures") or ()),
    )


def physical_name(field: Mapping[str, Any], mode: str) -> str:
    """The name a column has in data files and in ``partitionValues`` under column mapping."""
    if mode in ("name", "id"):
        return field.get("metadata", {}).get("delta.columnMapping.physicalName", field["name"])
    return field["name"]


def parse_partition_value(raw: str | None, type_name: str) -> Any:
    """A serialized partition value (PROTOCOL.md "Partition Value Serialization") as Python.

    ``None`` and ``""`` are null for every type. ``timestamp`` values without an offset are
    UTC and come back tz-aware; ``timestamp_ntz`` values come back naive.
    """
    if raw is None or raw == "":
        return None
    if type_name == "string":
        return raw
    if type_name in _INTEGER_TYPES:
        return int(raw)
    if type_name in _FLOAT_TYPES:
        return float(raw)
    if type_name.startswith("decimal"):
        return Decimal(raw)
    if type_name == "boolean":
        return raw.lower() == "true"
    if type_name == "binary":
        return raw.encode("utf-8")
    if type_name == "date":
        return dt.date.fromisoformat(raw)
    if type_name == "timestamp":
        value = parse_datetime(raw)
        return value.replace(tzinfo=dt.timezone.utc) if value.tzinfo is None else value.astimezone(
            dt.timezone.utc)
    if type_name == "timestamp_ntz":
        return parse_datetime(raw).replace(tzinfo=None)
    raise ValueError(f"partition column type {type_name!r} is not a primitive type")


def widen_partition_value(value: Any, type_name: str) -> Any:
    """A partition value parsed under a narrower type, as a value of the widened ``type_name``.

    Files written before a type widening keep the value typed as it was then.
    """
    if value is None:
        return None
    if type_name == "double":
        return float(value)
    if type_name.startswith("decimal"):
        return Decimal(value)
    if type_name == "timestamp_ntz" and not isinstance(value, dt.datetime):
        return dt.datetime.combine(value, dt.time())
    return value


def parse_datetime(raw: str) -> dt.datetime:
    """Both timestamp serialisations: ``2021-01-01 10:00:00[.ffffff]`` and ISO-8601 with ``Z``.

    Fractions beyond microseconds are cut, as Python's datetime cannot hold nanoseconds.
    """
    text = raw.strip()
    if text.endswith("Z"):  # Python 3.10's fromisoformat does not read "Z"
        text = text[:-1] + "+00:00"
    if "." in text:
        head, _, rest = text.partition(".")
        digits = len(rest) - len(rest.lstrip("0123456789"))
        text = head + "." + rest[:min(digits, 6)].ljust(6, "0") + rest[digits:]
    return dt.datetime.fromisoformat(text)


def partition_keys(metadata: TableMetadata) -> list[tuple[str, str, str]]:
    """(logical name, physical key in partitionValues, type name) per partition column."""
    mode = metadata.column_mapping_mode
    fields = {f["name"]: f for f in metadata.schema.get("fields", [])}
    keys = []
    for column in metadata.partition_columns:
        field = fields.get(column) or _case_insensitive(fields, column)
        type_name = field["type"] if isinstance(field["type"], str) else "struct"
        keys.append((field["name"], physical_name(field, mode), type_name))
    return keys


def _case_insensitive(fields: Mapping[str, Any], column: str) -> Mapping[str, Any]:
    for name, field in fields.items():
        if name.lower() == column.lower():
            return field
    raise KeyError(f"partition column {column!r} is not in the table schema")
