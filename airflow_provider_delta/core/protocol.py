"""What this provider can read: the reader protocol and schema evolution inside a range."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from airflow_provider_delta.core.model import TableMetadata
from airflow_provider_delta.errors import SchemaChangeError, UnsupportedFeatureError

MAX_READER_VERSION = 3
# Reader features the core plans and the Spark layer reads. inCommitTimestamp is a writer
# feature, but some writers list it for readers too; rowTracking and domainMetadata need
# nothing from a reader. VARIANT columns are unshredded structs of binaries that Spark 4's
# Parquet reader turns into its VariantType (shredding is a separate feature, not read here).
SUPPORTED_READER_FEATURES = frozenset({
    "columnMapping", "deletionVectors", "timestampNtz", "v2Checkpoint", "vacuumProtocolCheck",
    "domainMetadata", "rowTracking", "inCommitTimestamp", "variantType", "variantType-preview",
    "typeWidening", "typeWidening-preview",
})
_CATALOG_FEATURES = {"catalogManaged", "catalogOwned-preview", "catalogOwned"}
_CATALOG_HINT = (
    "The table is catalog-managed: its newest commits live in the catalog, not in _delta_log, "
    "so reading the log alone would miss data. Read it through its catalog with Delta Spark."
)
# Type widening (Delta 4.0's list): integers to wider integers, double or a decimal with enough
# integer digits; float to double; decimal(p, s) to decimal(p + k1, s + k2), k1 >= k2 >= 0;
# date to timestamp_ntz.
_INTEGER_WIDTHS = {"byte": 1, "short": 2, "integer": 4, "long": 8}
_DECIMAL_INTEGER_DIGITS = {"byte": 10, "short": 10, "integer": 10, "long": 20}
_DECIMAL = re.compile(r"decimal\((\d+),\s*(\d+)\)")
# The one mode change Delta reads across: existing files keep their (logical) column names.
_NAME_MODE_UPGRADE = ("none", "name")


def bool_property(properties: Mapping[str, Any], key: str, default: bool = False) -> bool:
    """A boolean table property (or commit tag) as Delta reads it: ``true`` in any case."""
    value = properties.get(key)
    return default if value is None else str(value).lower() == "true"


def check_protocol(table_uri: str, protocol: Mapping[str, Any], version: int | None) -> None:
    """Refuse a protocol this provider cannot read, naming the feature."""
    reader_version = int(protocol.get("minReaderVersion", 1))
    if reader_version > MAX_READER_VERSION:
        raise UnsupportedFeatureError(
            table_uri, f"minReaderVersion={reader_version}", version,
            hint=f"This provider reads reader versions up to {MAX_READER_VERSION}; upgrade it "
                 "or read the table with an engine that supports that protocol.",
        )
    features = protocol.get("readerFeatures") or ()
    if reader_version < 3:
        features = ()  # feature lists only bind readers at reader version 3
    for feature in features:
        if feature in _CATALOG_FEATURES:
            raise UnsupportedFeatureError(table_uri, feature, version, hint=_CATALOG_HINT)
        if feature not in SUPPORTED_READER_FEATURES:
            raise UnsupportedFeatureError(table_uri, feature, version)


def check_additive(table_uri: str, version: int, old: TableMetadata, new: TableMetadata) -> None:
    """Raise SchemaChangeError unless ``new`` only adds nullable columns to ``old``.

    Drops, renames (including column-mapping renames: the physical name changes meaning),
    type changes other than Delta's type widenings, nullability tightening,
    partition-column changes and column-mapping mode changes other than the upgrade from
    ``none`` to ``name`` are non-additive.
    """
    if tuple(old.partition_columns) != tuple(new.partition_columns):
        raise SchemaChangeError(
            table_uri, version,
            f"partition columns {list(old.partition_columns)} -> {list(new.partition_columns)}",
        )
    modes = (old.column_mapping_mode, new.column_mapping_mode)
    if modes[0] != modes[1] and modes != _NAME_MODE_UPGRADE:
        raise SchemaChangeError(
            table_uri, version, f"column mapping mode {modes[0]} -> {modes[1]}")
    problem = _struct_problem(old.schema, new.schema, "", modes == _NAME_MODE_UPGRADE)
    if problem:
        raise SchemaChangeError(table_uri, version, problem)


def _struct_problem(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str,
                    upgrading: bool) -> str | None:
    new_fields = {f["name"]: f for f in new.get("fields", [])}
    old_names = {f["name"] for f in old.get("fields", [])}
    for field in old.get("fields", []):
        name = prefix + field["name"]
        counterpart = new_fields.get(field["name"])
        if counterpart is None:
            return f"column {name!r} was dropped or renamed"
        if not _same_physical_column(field, counterpart, upgrading):
            return f"column {name!r} maps to a different physical column"
        if field.get("nullable", True) and not counterpart.get("nullable", True):
            return f"column {name!r} became NOT NULL"
        problem = _type_problem(field["type"], counterpart["type"], name, upgrading)
        if problem:
            return problem
    for name, field in new_fields.items():
        if name not in old_names and not field.get("nullable", True):
            return f"new column {prefix + name!r} is NOT NULL"
    return None


def _type_problem(old: Any, new: Any, name: str, upgrading: bool) -> str | None:
    if isinstance(old, str) or isinstance(new, str):
        if old == new or is_type_widening(old, new):
            return None
        return f"column {name!r} changed type {_show(old)} -> {_show(new)}"
    if old.get("type") != new.get("type"):
        return f"column {name!r} changed type {_show(old)} -> {_show(new)}"
    kind = old["type"]
    if kind == "struct":
        return _struct_problem(old, new, name + ".", upgrading)
    if kind == "array":
        return _type_problem(old["elementType"], new["elementType"], name + ".element",
                             upgrading)
    if kind == "map":
        return (_type_problem(old["keyType"], new["keyType"], name + ".key", upgrading)
                or _type_problem(old["valueType"], new["valueType"], name + ".value",
                                 upgrading))
    return None


def _same_physical_column(old: Mapping[str, Any], new: Mapping[str, Any],
                          upgrading: bool) -> bool:
    """Whether files written under ``old`` hold the column where ``new`` reads it.

    On the upgrade to name mode Delta gives each existing field its logical name as physical
    name, which is what the files written before it use.
    """
    if upgrading:
        return _physical(new)[0] == old["name"]
    return _physical(old) == _physical(new)


def is_type_widening(old: Any, new: Any) -> bool:
    """Whether Delta's type widening allows primitive type ``old`` to become ``new``."""
    if not (isinstance(old, str) and isinstance(new, str)):
        return False
    if old in _INTEGER_WIDTHS:
        if new in _INTEGER_WIDTHS:
            return _INTEGER_WIDTHS[new] > _INTEGER_WIDTHS[old]
        if new == "double":
            return old != "long"
        wide = _DECIMAL.fullmatch(new)
        return bool(wide) and int(wide[1]) - int(wide[2]) >= _DECIMAL_INTEGER_DIGITS[old]
    narrow, wide = _DECIMAL.fullmatch(old), _DECIMAL.fullmatch(new)
    if narrow and wide:
        extra_precision, extra_scale = int(wide[1]) - int(narrow[1]), int(wide[2]) - int(narrow[2])
        return extra_precision >= extra_scale >= 0
    return (old, new) in {("float", "double"), ("date", "timestamp_ntz")}


def _physical(field: Mapping[str, Any]) -> tuple[Any, Any]:
    meta = field.get("metadata") or {}
    return meta.get("delta.columnMapping.physicalName"), meta.get("delta.columnMapping.id")


def _show(data_type: Any) -> str:
    return data_type if isinstance(data_type, str) else data_type.get("type", "?")
