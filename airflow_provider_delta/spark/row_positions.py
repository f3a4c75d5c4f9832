"""Rows of a scan picked (or dropped) by their position in their file, with no join.

The rows a change feed reports from a removed file, and the rows a deletion vector masks, are
known on the driver by position. Joining every scanned row to them costs more than reading it
(a broadcast join on the file, then one on file and position). Here they become a bitmap: per
file the words (64 rows each) from the first to the last word holding a row, after, per file,
where its words start and its first and last word, all in one array literal indexed by the
file's position in the scan's file index (``_metadata.file_modification_time``,
:data:`~airflow_provider_delta.spark.file_index.FILE_POSITION_SQL`). Each row then costs a few
array lookups in Spark's generated code. The literal crosses Py4J as one byte array and the
filter as SQL text (a Column per operation would cost Py4J calls each), so a classic session
is needed; beyond :data:`MAX_WORDS` the caller joins instead.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from pyspark.sql import DataFrame, SparkSession

MAX_WORDS = 1 << 21  # the literal's 64-bit values (16 MiB), else the rows are joined
_BITMAP = "__delta_provider_position_bitmap"  # the literal's column, gone after the filter


def position_bitmap(rows: Mapping[int, np.ndarray], files: int) -> np.ndarray | None:
    """The literal's values for ``rows`` (file position among ``files`` -> row positions in
    it): per file where its words start in it, its first word and its end, then the words;
    None where they would exceed :data:`MAX_WORDS`."""
    rows = {p: np.asarray(r).astype(np.int64) for p, r in rows.items() if len(r)}
    low, high = np.zeros(files, np.int64), np.zeros(files, np.int64)  # a file's words
    for position, picked in rows.items():
        low[position], high[position] = int(picked.min()) >> 6, (int(picked.max()) >> 6) + 1
    words = int((high - low).sum())
    if words + 3 * files > MAX_WORDS:
        return None
    starts = np.cumsum(high - low) - high  # word w of a file is the words' starts + w
    bitmap = np.zeros(words * 64, bool)
    for position, picked in rows.items():
        bitmap[starts[position] * 64 + picked] = True
    packed = np.packbits(bitmap, bitorder="little").view("<i8")
    return np.concatenate([starts + 3 * files, low, high, packed])


def where_positions(spark: SparkSession, frame: DataFrame, bitmap: np.ndarray, files: int,
                    file: str, row: str, *, keep: bool) -> DataFrame:
    """The rows of ``frame`` whose ``row`` (SQL: the row's position in its file) is among
    (``keep``) or not among the rows of ``bitmap`` (:func:`position_bitmap`) for their
    ``file`` (SQL: the file's position among ``files``), on a classic session; with one more
    column, the literal's, for the caller's select to leave out (a drop costs a Py4J call)."""
    slot, word = f"CAST({file} AS INT) + 1", f"shiftright({row}, 6)"
    at_word = f"CAST(element_at({_BITMAP}, {slot}) + {word} + 1 AS INT)"
    listed = (f"CASE WHEN {word} >= element_at({_BITMAP}, {slot} + {files}) AND {word} < "
              f"element_at({_BITMAP}, {slot} + {2 * files}) THEN getbit(element_at("
              f"{_BITMAP}, {at_word}), CAST({row} & 63 AS INT)) = 1 ELSE false END")
    # the optimizer puts the literal into the filter and prunes its column
    with_bitmap = frame.withColumn(_BITMAP, _literal(spark, bitmap))
    return with_bitmap.where(listed if keep else f"NOT ({listed})")


def _literal(spark: SparkSession, values: np.ndarray):
    """An ``array<bigint>`` literal Column of ``values``, sent as one byte array (not a call
    per value) and read into a JVM ``long[]``."""
    from pyspark.sql.classic.column import Column as ClassicColumn  # not on Spark Connect

    jvm, gateway = spark._jvm, spark.sparkContext._gateway
    longs = gateway.new_array(jvm.long, len(values))
    # classes by their full names: one Py4J call each, not one per package
    buffer = getattr(jvm, "java.nio.ByteBuffer").wrap(
        np.ascontiguousarray(values, "<i8").tobytes())
    buffer.order(getattr(jvm, "java.nio.ByteOrder").LITTLE_ENDIAN).asLongBuffer().get(longs)
    return ClassicColumn(getattr(jvm, "org.apache.spark.sql.functions").lit(longs))
