"""Rows picked by position with a bitmap literal (spark/row_positions.py): every position of
every file, across the 64-row words' edges, files without rows, and the size cap."""

from __future__ import annotations

import numpy as np
from pyspark.sql import functions as F

from airflow_provider_delta.spark import row_positions
from airflow_provider_delta.spark.row_positions import position_filter

FILES, ROWS = 4, 300


def _frame(spark):
    return spark.range(FILES * ROWS).select((F.col("id") % FILES).cast("int").alias("f"),
                                            F.floor(F.col("id") / FILES).cast("long").alias("r"))


def test_the_listed_positions_and_no_others(spark):
    rows = {0: np.array([0, 63, 64, 127, 299], np.uint64),  # words' edges; a vector's dtype
            2: np.array([130, 131, 200]), 3: np.array([5])}  # file 1 has none
    picked = position_filter(spark, rows, FILES, F.col("f"), F.col("r"))
    got = {(row.f, row.r) for row in _frame(spark).where(picked).collect()}
    assert got == {(f, int(r)) for f, listed in rows.items() for r in listed}
    kept = _frame(spark).where(~picked).count()
    assert kept == FILES * ROWS - len(got)


def test_too_big_a_bitmap_is_refused(spark, monkeypatch):
    monkeypatch.setattr(row_positions, "MAX_WORDS", 8)
    assert position_filter(spark, {0: np.array([0, 64 * 8])}, 1, F.col("f"), F.col("r")) is None
