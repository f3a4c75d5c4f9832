"""Rows of a scan picked (or dropped) by their position in their file, with no join.

The rows a change feed reports from a removed file, and the rows a deletion vector masks, are
known on the driver by position. Joining every scanned row to them costs more than reading it
(a broadcast join on the file, then one on file and position). Here they become a bitmap: per
file the words (64 rows each) from the first to the last word holding a row, all files' words in
one array literal, and per file where its words start, as three more literals indexed by the
file's position in the scan's file index (``_metadata.file_modification_time``,
:data:`~airflow_provider_delta.spark.file_index.FILE_POSITION_SQL`). Each row then costs a few
array lookups in Spark's generated code. The literals cross Py4J as one byte array each, so a
classic session is needed; beyond :data:`MAX_WORDS` the caller joins instead.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

MAX_WORDS = 1 << 21  # the literals' 64-bit values (16 MiB), else the rows are joined


def position_filter(spark: SparkSession, rows: Mapping[int, np.ndarray], files: int,
                    file: Column, row: Column) -> Column | None:
    """A boolean column, true where ``row`` (a row's position in its file) is among
    ``rows[file]`` (``file``: the row's file position among ``files``); None where the
    bitmap would exceed :data:`MAX_WORDS` or the session is not a classic one."""
    jvm = getattr(spark, "_jvm", None)
    rows = {p: np.asarray(r).astype(np.int64) for p, r in rows.items() if len(r)}
    if jvm is None or not rows:
        return None
    low, high = np.zeros(files, np.int64), np.zeros(files, np.int64)  # a file's words
    for position, picked in rows.items():
        low[position], high[position] = int(picked.min()) >> 6, (int(picked.max()) >> 6) + 1
    words = int((high - low).sum())
    if words + 3 * files > MAX_WORDS:
        return None
    starts = np.cumsum(high - low) - high  # word w of a file is the bitmap's starts + w
    bitmap = np.zeros(words * 64, bool)
    for position, picked in rows.items():
        bitmap[starts[position] * 64 + picked] = True
    packed = np.packbits(bitmap, bitorder="little").view("<i8")
    slot = (file + F.lit(1)).cast("int")
    word = F.shiftright(row, 6)
    at_word = (F.element_at(_literal(spark, starts), slot) + word + F.lit(1)).cast("int")
    bit = F.getbit(F.element_at(_literal(spark, packed), at_word), row.bitwiseAND(63).cast("int"))
    inside = ((word >= F.element_at(_literal(spark, low), slot))
              & (word < F.element_at(_literal(spark, high), slot)))
    return F.when(inside, bit == 1).otherwise(F.lit(False))


def _literal(spark: SparkSession, values: np.ndarray) -> Column:
    """An ``array<bigint>`` literal of ``values``, sent as one byte array (not a call per
    value) and read into a JVM ``long[]``."""
    from pyspark.sql.classic.column import Column as ClassicColumn  # not on Spark Connect

    jvm, gateway = spark._jvm, spark.sparkContext._gateway
    longs = gateway.new_array(jvm.long, len(values))
    buffer = jvm.java.nio.ByteBuffer.wrap(np.ascontiguousarray(values, "<i8").tobytes())
    buffer.order(jvm.java.nio.ByteOrder.LITTLE_ENDIAN).asLongBuffer().get(longs)
    return ClassicColumn(jvm.org.apache.spark.sql.functions.lit(longs))
