"""Handing many strings and expressions to Spark in a few calls.

On a classic session every argument crosses Py4J, and a Python list crosses it one element per
round trip. Here the strings (select expressions) travel as one newline-joined string, built
column-wise from an Arrow array, and the JVM splits it into a ``Seq`` in three calls. Spark
Connect sends one protobuf message anyway. A plan's files reach Spark as a file index
(``file_index.py``), not as paths.

Per-file constants (partition values, a change feed's commit and change type) are attached to a
scan's rows by a lookup on ``_metadata.file_path`` written as SQL text, for plans of a few files:
one ``selectExpr`` instead of a broadcast join (and the frame of files it needs).
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import BinaryType, DataType, StructField

_SEPARATOR = "\n"
LOOKUP_MAX_FILES = 64  # beyond this a per-row lookup costs more than the join


def java_strings(spark: SparkSession, values: pa.Array) -> object | None:
    """``values`` as a JVM ``Seq[String]`` made in three Py4J calls; None on Spark Connect, or
    when a value is empty or holds the separator (the tokenizer would lose it): then pass a
    Python list."""
    jvm = getattr(spark, "_jvm", None)
    if (jvm is None or not len(values) or pc.any(pc.equal(values, "")).as_py()
            or pc.any(pc.match_substring(values, _SEPARATOR)).as_py()):
        return None
    # classes by their full names: one Py4J call each, not one per package segment
    tokens = getattr(jvm, "java.util.StringTokenizer")(joined(values, _SEPARATOR).as_py(),
                                                         _SEPARATOR)
    return jvm.PythonUtils.toSeq(getattr(jvm, "java.util.Collections").list(tokens))


def joined(values: pa.Array, separator: str) -> pa.Scalar:
    """``values`` joined by ``separator`` into one string, column-wise."""
    return pc.binary_join(pa.ListArray.from_arrays([0, len(values)], values), separator)[0]


def select_sql(spark: SparkSession, df: DataFrame, expressions: list[str]) -> DataFrame:
    """``df.selectExpr(*expressions)`` without a call per expression."""
    seq = java_strings(spark, pa.array(expressions, pa.string()))
    if seq is None:
        return df.selectExpr(*expressions)
    return DataFrame(df._jdf.selectExpr(seq), df.sparkSession)


def file_index_sql(spark_paths: pa.Array, message: str) -> str:
    """SQL for each row's file position (0-based) among ``spark_paths`` (as Spark spells them),
    failing the query with ``message`` and the path for a file not among them."""
    entries = ", ".join(f"{string_literal(path)}, {position}"
                        for position, path in enumerate(spark_paths.to_pylist()))
    return (f"coalesce(element_at(map({entries}), _metadata.file_path), raise_error(concat("
            f"{string_literal(message)}, _metadata.file_path)))")


def constant_sql(values: list, field: StructField, index: str) -> str | None:
    """SQL for the value of ``field`` at each row's file position ``index`` among ``values``
    (one per file), or None if a value has no literal here."""
    literals = [literal(value, field.dataType) for value in [None, *values]]
    if None in literals:
        return None
    # the leading NULL keeps the column nullable, as every result column is (an array of
    # non-null literals would make it NOT NULL, and a sink would then refuse later nulls)
    return f"element_at(array({', '.join(literals)}), {index} + 2)"


def literal(value: object, data_type: DataType) -> str | None:
    """A SQL literal of ``value`` typed ``data_type`` (constant-folded by Spark's optimizer)."""
    type_name = data_type.simpleString()
    if value is None:
        return f"CAST(NULL AS {type_name})"
    if isinstance(data_type, BinaryType):
        return f"X'{bytes(value).hex()}'" if isinstance(value, (bytes, bytearray)) else None
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, dt.datetime):
        text = value.isoformat(sep=" ")  # carries +00:00 when aware: no session zone involved
    elif isinstance(value, (str, int, float, Decimal, dt.date)):
        text = repr(value) if isinstance(value, float) else str(value)
    else:
        return None
    return f"CAST({string_literal(text)} AS {type_name})"


def string_literal(text: str) -> str:
    """A Spark SQL string literal (backslash escapes, Spark's default)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
