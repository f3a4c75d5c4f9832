"""Rows picked by position with a bitmap literal (spark/row_positions.py): every position of
every file, across the 64-row words' edges, files without rows, the literal folded into the
filter, and the size cap."""

from __future__ import annotations

import numpy as np
from pyspark.sql import functions as F

from airflow_provider_delta.spark import row_positions
from airflow_provider_delta.spark.row_positions import position_bitmap, where_positions

FILES, ROWS = 4, 300


def _frame(spark):
    return spark.range(FILES * ROWS).select((F.col("id") % FILES).cast("int").alias("f"),
                                            F.floor(F.col("id") / FILES).cast("long").alias("r"))


def test_the_listed_positions_and_no_others(spark):
    rows = {0: np.array([0, 63, 64, 127, 299], np.uint64),  # words' edges; a vector's dtype
            2: np.array([130, 131, 200]), 3: np.array([5])}  # file 1 has none
    bitmap = position_bitmap(rows, FILES)
    picked = where_positions(spark, _frame(spark), bitmap, FILES, "f", "r", keep=True)
    got = {(row.f, row.r) for row in picked.select("f", "r").collect()}
    assert got == {(f, int(r)) for f, listed in rows.items() for r in listed}
    kept = where_positions(spark, _frame(spark), bitmap, FILES, "f", "r", keep=False)
    assert kept.count() == FILES * ROWS - len(got)
    # the literal's column is folded into the filter, not carried by every row
    optimized = picked.select("f", "r")._jdf.queryExecution().optimizedPlan().toString()
    assert row_positions._BITMAP not in optimized


def test_too_big_a_bitmap_is_refused(monkeypatch):
    monkeypatch.setattr(row_positions, "MAX_WORDS", 8)
    assert position_bitmap({0: np.array([0, 64 * 8])}, 1) is None
