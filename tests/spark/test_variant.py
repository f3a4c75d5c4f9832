"""``variantType`` tables (issue 15.1): deltalake's deletion-vector tables, which list the feature
without a VARIANT column, and a VARIANT column with deletion vectors, built as Delta's
DeletionVectorsSuite streams one ("VARIANT + DV"). deltalake cannot write VARIANT, so that table's
Parquet and log are written here as PROTOCOL.md ("Variant Data Type") describes: an unshredded
struct of ``metadata`` and ``value`` binaries in the Variant binary encoding.
"""

from __future__ import annotations

import json
import struct
import uuid
from collections import Counter
from itertools import accumulate
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import functions as F
from pyspark.sql.types import VariantType

from airflow_provider_delta.spark import read_changes, read_snapshot
from tests.spark.conftest import (
    inline_deletion_vector,
    oracle_rows,
    spark_rows,
    table_rows,
    write_commit,
)

_VARIANT_PARQUET = pa.struct([pa.field("metadata", pa.binary(), False),
                              pa.field("value", pa.binary(), False)])
_OBJECT, _ARRAY = 0x0E, 0x0F  # basic type 2/3 with 4-byte offsets and 1-byte field ids


def encode_variant(value: Any) -> dict[str, bytes]:
    """A JSON-like value in the Variant binary encoding: sorted key dictionary, int64 integers,
    doubles, short strings, arrays and objects."""
    keys = sorted(_keys(value))
    names = [key.encode() for key in keys]
    offsets = [0, *accumulate(map(len, names))]
    metadata = bytes([0x11, len(names), *offsets]) + b"".join(names)  # version 1, sorted
    return {"metadata": metadata, "value": _value(value, {k: i for i, k in enumerate(keys)})}


def _keys(value: Any) -> set[str]:
    """Every object key in a JSON-like value, at any depth."""
    if isinstance(value, dict):
        return set(value).union(*map(_keys, value.values()))
    if isinstance(value, list):
        return set().union(*map(_keys, value))
    return set()


def _value(value: Any, ids: dict[str, int]) -> bytes:
    if value is None:
        return b"\x00"
    if isinstance(value, bool):
        return b"\x04" if value else b"\x08"
    if isinstance(value, int):
        return b"\x18" + struct.pack("<q", value)
    if isinstance(value, float):
        return b"\x1c" + struct.pack("<d", value)
    if isinstance(value, str):
        raw = value.encode()
        return bytes([len(raw) << 2 | 1]) + raw
    if isinstance(value, list):
        return _container(_ARRAY, b"", [_value(v, ids) for v in value])
    keys = sorted(value)
    return _container(_OBJECT, bytes(ids[k] for k in keys), [_value(value[k], ids) for k in keys])


def _container(header: int, field_ids: bytes, children: list[bytes]) -> bytes:
    offsets = [0, *accumulate(map(len, children))]
    return (bytes([header, len(children)]) + field_ids
            + struct.pack(f"<{len(offsets)}I", *offsets) + b"".join(children))


FIRST = {0: {"a": 1, "b": [1, "x", None]}, 1: 7, 2: None, 3: "plain",
         4: {"nested": {"z": 2.5, "y": True}}, 5: [], 6: {}}
SECOND = {10: {"k": "v"}, 11: [{"a": -3}], 12: False}
DELETED_BY_VECTOR = [1, 3]  # row indexes of the first file


def _write_file(table: Path, name: str, rows: dict[int, Any]) -> dict:
    data = pa.table({"id": pa.array(list(rows), pa.int64()),
                     "v": pa.array([encode_variant(v) for v in rows.values()], _VARIANT_PARQUET)})
    pq.write_table(data, table / name)
    return {"path": name, "partitionValues": {}, "size": (table / name).stat().st_size,
            "modificationTime": 0, "dataChange": True,
            "stats": json.dumps({"numRecords": len(rows)})}


def variant_table(table: Path) -> str:
    """v0 adds FIRST, v1 adds SECOND, v2 deletes rows of the first file by an inline deletion
    vector; then deltalake's DELETE (a copy-on-write rewrite) removes id 10 at v3."""
    (table / "_delta_log").mkdir(parents=True)
    schema = {"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "v", "type": "variant", "nullable": True, "metadata": {}}]}
    features = ["variantType", "deletionVectors"]
    first = _write_file(table, "first.parquet", FIRST)
    write_commit(table, 0, [
        {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                      "readerFeatures": features, "writerFeatures": features}},
        {"metaData": {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
                      "schemaString": json.dumps(schema), "partitionColumns": [],
                      "configuration": {"delta.enableDeletionVectors": "true"},
                      "createdTime": 0}},
        {"add": first}])
    write_commit(table, 1, [{"add": _write_file(table, "second.parquet", SECOND)}])
    vector = inline_deletion_vector(DELETED_BY_VECTOR)
    descriptor = {"storageType": "i", "pathOrInlineDv": vector.path_or_inline_dv,
                  "sizeInBytes": vector.size_in_bytes, "cardinality": vector.cardinality}
    write_commit(table, 2, [
        {"remove": {"path": "first.parquet", "dataChange": True, "deletionTimestamp": 1}},
        {"add": dict(first, deletionVector=descriptor)}])
    DeltaTable(str(table)).delete("id = 10")
    return str(table)


def _as_json(df) -> Counter:
    """Rows as (id, parsed JSON of the variant); SQL NULL stays None."""
    rows = df.select("id", F.to_json("v").alias("v")).collect()
    return Counter((r.id, json.dumps(json.loads(r.v), sort_keys=True) if r.v else r.v)
                   for r in rows)


def _expected_json(rows: dict[int, Any]) -> Counter:
    return Counter((i, json.dumps(v, sort_keys=True)) for i, v in rows.items())


def _variant_rows(df) -> Counter:
    """Rows with each variant as the (metadata, value) binaries DataFusion shows for it."""
    return Counter(
        (r.id, None if r.v is None else (("metadata", bytes(r.v.metadata)),
                                         ("value", bytes(r.v.value))))
        for r in df.collect())


def test_variant_column_with_deletion_vectors(spark, tmp_path, assert_same_rows):
    path = variant_table(tmp_path / "variant")
    after_vector = {i: v for i, v in FIRST.items() if i not in DELETED_BY_VECTOR}
    snapshot = read_snapshot(spark, path)
    assert snapshot.schema["v"].dataType == VariantType()
    assert _as_json(snapshot) == _expected_json(
        after_vector | {i: v for i, v in SECOND.items() if i != 10})
    for version in range(4):
        assert_same_rows(_variant_rows(read_snapshot(spark, path, version=version)),
                         oracle_rows(path, version))
    assert _as_json(read_changes(spark, path, 0, 1)) == _expected_json(FIRST | SECOND)
    assert _as_json(read_changes(spark, path, 2, 2, ignore_changes=True)) == _expected_json(
        after_vector)


def test_deltalake_deletion_vector_table_without_variant_column(spark, tmp_path,
                                                                assert_same_rows):
    """deltalake lists variantType for every table created with deletion vectors enabled."""
    path = str(tmp_path / "dv")
    write_deltalake(path, pa.table({"id": list(range(10)), "name": list("abcdefghij")}),
                    configuration={"delta.enableDeletionVectors": "true"})
    write_deltalake(path, pa.table({"id": [10, 11], "name": ["k", "l"]}), mode="append")
    DeltaTable(path).delete("id % 3 = 0")
    appended = pa.table({"id": [12, 13], "name": ["m", "n"]})
    write_deltalake(path, appended, mode="append")
    assert "variantType" in DeltaTable(path).protocol().reader_features
    for version in range(4):
        assert_same_rows(spark_rows(read_snapshot(spark, path, version=version)),
                         oracle_rows(path, version))
    assert_same_rows(spark_rows(read_changes(spark, path, 3, 3)), table_rows(appended))
    assert_same_rows(spark_rows(read_changes(spark, path, 0, 1)), oracle_rows(path, 1))
