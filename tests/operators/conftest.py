"""Helpers for the operator tests: the deltalake/DataFusion oracle and Delta tables to load."""

from __future__ import annotations

from collections import Counter

from deltalake import DeltaTable, QueryBuilder


def delta_rows(table_uri: str, version: int | None = None) -> Counter:
    """The rows of a Delta table as a multiset of tuples, read by deltalake through DataFusion."""
    table = DeltaTable(table_uri, version=version)
    result = QueryBuilder().register("t", table).execute("select * from t").read_all()
    columns = [result.column(i).to_pylist() for i in range(result.num_columns)]
    return Counter(zip(*columns))
