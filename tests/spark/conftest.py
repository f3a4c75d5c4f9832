"""Helpers for the Spark reader tests: rows as comparable multisets, the oracles, and
deletion vectors encoded with pyroaring."""

from __future__ import annotations

import base64
import datetime as dt
import json
import struct
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, QueryBuilder
from pyroaring import BitMap64

from airflow_provider_delta.core.model import DeletionVectorDescriptor, Plan
from airflow_provider_delta.spark.deletion_vectors import MAGIC_NUMBER


def _hashable(value: Any) -> Any:
    """Nested lists/dicts as tuples; aware datetimes as naive UTC; NaN comparable."""
    if isinstance(value, dict):
        return tuple((k, _hashable(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    if isinstance(value, float) and value != value:
        return "NaN"
    if isinstance(value, Decimal):
        return value.normalize()
    return value


def table_rows(table: Any) -> Counter:
    """Rows of any Arrow table (pyarrow or arro3) as a multiset of tuples, by column order."""
    table = pa.table(table)
    return Counter(tuple(_hashable(v) for v in row.values()) for row in table.to_pylist())


def spark_rows(df) -> Counter:
    """A DataFrame's rows as a multiset (through Arrow: maps with array keys survive)."""
    return table_rows(df.toArrow())


def oracle_table(path: str, version: int | None = None) -> pa.Table:
    """deltalake's DataFusion read of the table at ``version``: the reference answer."""
    table = DeltaTable(path, version=version) if version is not None else DeltaTable(path)
    return pa.table(QueryBuilder().register("t", table).execute("select * from t").read_all())


def oracle_rows(path: str, version: int | None = None) -> Counter:
    return table_rows(oracle_table(path, version))


def plan_rows(plan: Plan) -> Counter:
    """Second oracle: each planned file read with pyarrow, its partition values from the plan,
    its deletion vector from deltalake (``deletion_vectors()`` of the snapshot at the file's
    version). For tables without column mapping.
    """
    columns = [f["name"] for f in plan.metadata.schema["fields"]]
    rows: Counter = Counter()
    keep_masks: dict[int, dict[str, list[bool]]] = {}
    for file in plan.files:
        table = pq.read_table(file.path.removeprefix("file://"))
        if file.deletion_vector is not None:
            masks = keep_masks.setdefault(file.version, _selection_vectors(plan, file.version))
            mask = masks[file.path] + [True] * (table.num_rows - len(masks[file.path]))
            table = table.filter(pa.array(mask))
        for name in plan.metadata.partition_columns:
            value = file.partition_values[name]
            table = table.append_column(name, pa.array([value] * table.num_rows))
        for row in table.to_pylist():
            rows[tuple(_hashable(row.get(c)) for c in columns)] += 1
    return rows


def _selection_vectors(plan: Plan, version: int) -> dict[str, list[bool]]:
    reader = DeltaTable(plan.table_uri, version=version).deletion_vectors()
    table = pa.table(reader)
    return {
        "file://" + path.removeprefix("file://"): mask
        for path, mask in zip(
            pc.cast(table["filepath"], pa.string()).to_pylist(),
            table["selection_vector"].to_pylist(),
        )
    }


def write_commit(table: str | Path, version: int, actions: list[dict]) -> None:
    """Write commit ``version`` of a table's log by hand: a commitInfo, then ``actions``."""
    lines = [{"commitInfo": {"timestamp": 1_700_000_000_000 + version, "operation": "TEST"}}]
    Path(table, "_delta_log", f"{version:020d}.json").write_text(
        "".join(json.dumps(a) + "\n" for a in lines + actions))


@pytest.fixture
def assert_same_rows():
    """Compare two multisets, showing a few differing rows on failure."""

    def check(got: Counter, expected: Counter) -> None:
        missing = list((expected - got).items())[:5]
        extra = list((got - expected).items())[:5]
        assert got == expected, f"missing rows {missing}, unexpected rows {extra}"

    return check


_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_B85 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"


def z85_encode(data: bytes) -> str:
    """Z85 (ZeroMQ RFC 32): base64's b85 code over another alphabet."""
    return base64.b85encode(data).decode().translate(str.maketrans(_B85, _Z85))


def bitmap_bytes(rows: list[int], optimize_runs: bool = True) -> bytes:
    bitmap = BitMap64(rows)
    if optimize_runs:
        bitmap.run_optimize()
    return struct.pack("<i", MAGIC_NUMBER) + bitmap.serialize()


def inline_deletion_vector(rows: list[int]) -> DeletionVectorDescriptor:
    """An inline (storage type ``i``) vector deleting ``rows``, encoded with pyroaring."""
    data = bitmap_bytes(rows)
    padded = data + b"\0" * (-len(data) % 4)  # Z85 encodes 4-byte groups
    return DeletionVectorDescriptor("i", z85_encode(padded), len(data), len(rows))
