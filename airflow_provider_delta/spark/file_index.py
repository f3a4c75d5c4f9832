"""A plan's files handed to Spark as one scan's file index, with no call per file.

Given explicit paths, Spark's ``InMemoryFileIndex`` checks that each exists and lists it (a
``stat`` per file, or a listing job above
``spark.sql.sources.parallelPartitionDiscovery.threshold``): about 15 s for 100,000 local files.
Delta's own reader instead trusts the log's paths and sizes and touches no data file; so does
this module, two ways:

* ``PlanFileIndex`` (``PlanFileIndex.java``, compiled once per JVM by Janino, which Spark ships
  for its own code generation): the paths as Spark spells them (Arrow's bytes as they are,
  with their offsets) and the sizes as int64s go to the driver's JVM as files, which it turns
  into strings and Hadoop file statuses on every core (about 1 microsecond a file). The scan
  is a ``HadoopFsRelation`` over that index with the Parquet format, as ``spark.read.parquet``
  builds it, so ``_metadata`` columns are there.
* Where Janino cannot compile it, a ``_spark_metadata`` log, as Spark's streaming file sink
  writes it, read through ``MetadataLogFileIndex``: batch file ``0``, the line ``v1``, then one
  JSON object per file (``path``, ``size``, ``isDir``, ``modificationTime``,
  ``blockReplication``, ``blockSize``, ``action``), built column-wise with Arrow in a temporary
  folder. Spark parses it with json4s at about 9 microseconds a file, so a plan of many files
  becomes a few such scans, built side by side. ``recursiveFileLookup`` turns partition
  discovery off (partition values come from the Delta log: folder names such as ``p=1`` must not
  add columns) and makes the index serve every file of the log, not only those inside the log's
  own folder.

Spark skips files named ``_*`` or ``.*`` (:func:`hidden_files`) and files of size 0, as it does
for explicit paths; both routes do the same. Both give each file its position among the files
(in milliseconds) as its modification time, which Spark hands to each row as
``_metadata.file_modification_time`` (:data:`FILE_POSITION_SQL`): a row's file is known without
comparing its path.

Per-file constants (a table's partition values, a change feed's commit and change type, a row
tracking file's base row id) go into ``PlanFileIndex`` as partition values
(:func:`constant_scan`): its files grouped by equal values, one partition directory per group,
so Spark fills them per file as constant columns, as it reads a partitioned table, with no
lookup per row. The groups' values reach the JVM as files too (an int64 or bytes per value);
filters on them are applied by the index (Spark does not apply them again after the scan).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from py4j.protocol import Py4JError
from pyspark.sql import DataFrame, DataFrameReader, SparkSession
from pyspark.sql.types import (
    BinaryType, BooleanType, ByteType, DataType, DateType, DecimalType, DoubleType, FloatType,
    IntegerType, LongType, ShortType, StringType, StructField, StructType, TimestampNTZType,
    TimestampType,
)

from airflow_provider_delta.core.arrow import to_numpy
from airflow_provider_delta.spark.handoff import joined
from airflow_provider_delta.storage import split_folders

log = logging.getLogger(__name__)

_LOG_FOLDER = "_spark_metadata"
_ENTRY_END = ',"blockReplication":1,"blockSize":33554432,"action":"add"}'
# each row's file: its position among the files given to scan_files
FILE_POSITION_SQL = "CAST(unix_millis(_metadata.file_modification_time) AS INT)"
PART_FILES = 10_000  # below this, a second scan costs more than its share of the log saves
_MAX_PARTS = 4
CONSTANT_PREFIX = "__delta_provider_constant_"  # keeps constants apart from the files' columns
MAX_CONSTANT_ROWS = 1024  # distinct rows of constants a scan takes (each a JVM row)
_TEXT_TYPES = (StringType, BinaryType, DecimalType)  # constants PlanFileIndex reads as bytes
_INTEGRAL_TYPES = (LongType, IntegerType, ShortType, ByteType, BooleanType)
# Delta's partition types: the ones _encoded hands PlanFileIndex as an int64 or bytes
_PER_FILE_CONSTANT_TYPES = (*_TEXT_TYPES, *_INTEGRAL_TYPES, DateType, TimestampType,
                            TimestampNTZType, FloatType, DoubleType)


_INDEX_CLASSES: dict[object, object | None] = {}  # PlanFileIndex's class by Py4J gateway


def scan_files(spark: SparkSession, schema: StructType, spark_paths: pa.Array, sizes: pa.Array,
               root: str) -> list[DataFrame]:
    """Parquet scans in ``schema`` of the files ``spark_paths`` (as Spark spells them,
    :func:`~airflow_provider_delta.spark.paths.spark_file_paths`) of ``sizes`` bytes, of a table
    at ``root``, on a classic session: one through ``PlanFileIndex``, else (:func:`log_scans`)
    one or a few. Select ``_metadata`` columns of each before a union (a union has none)."""
    index_class = _index_class(spark)
    if index_class is None:
        return log_scans(spark.read.schema(schema), spark_paths, sizes)
    return [index_scan(spark, index_class, schema, spark_paths, sizes, root)]


def constant_column(name: str) -> str:
    """The column in which a scan of :func:`constant_scan` carries the constant ``name``."""
    return CONSTANT_PREFIX + name


def constant_scan(spark: SparkSession, schema: StructType, spark_paths: pa.Array,
                  sizes: pa.Array, root: str, fields: list[StructField], values: pa.StructArray
                  ) -> DataFrame | None:
    """One Parquet scan as :func:`scan_files` makes, whose rows also carry their file's
    ``values`` (a row per file; a field of the struct per entry of ``fields``, typed as it) as
    partition values, each in the column :func:`constant_column` of its name; None where they
    cannot be: on Spark Connect, where ``PlanFileIndex`` does not compile, for a type other
    than Delta's partition types, or more than :data:`MAX_CONSTANT_ROWS` distinct rows."""
    if (getattr(spark, "_jvm", None) is None or not fields
            or not all(isinstance(f.dataType, _PER_FILE_CONSTANT_TYPES) for f in fields)
            or (index_class := _index_class(spark)) is None):
        return None
    columns = [pc.struct_field(values, field.name) for field in fields]
    groups, firsts = _groups(columns)
    if not 0 < len(firsts) <= MAX_CONSTANT_ROWS:
        return None
    constant_schema = StructType([StructField(constant_column(field.name), field.dataType, True)
                                  for field in fields])
    taken = pa.array(firsts)
    return index_scan(spark, index_class, schema, spark_paths, sizes, root,
                      (constant_schema, groups, [c.take(taken) for c in columns]))


def _groups(columns: list[pa.Array]) -> tuple[np.ndarray, np.ndarray]:
    """Each row's group (rows equal in every column, nulls equal) and each group's first row."""
    key = np.zeros(len(columns[0]) if columns else 0, np.int64)
    for column in columns:
        codes = _codes(column)
        key = np.unique(key * (codes.max(initial=0) + 1) + codes, return_inverse=True)[1]
    _, firsts, groups = np.unique(key, return_index=True, return_inverse=True)
    return groups, firsts


def _codes(column: pa.Array) -> np.ndarray:
    """Each value's code among the column's distinct values, nulls one of them; floats by their
    bits (-0.0 and 0.0 are different values)."""
    if pa.types.is_floating(column.type):
        bits = to_numpy(pc.fill_null(column, 0)).astype(np.float64).view(np.int64)
        codes = np.unique(bits, return_inverse=True)[1] + 1
        return np.where(to_numpy(pc.is_null(column)), 0, codes)
    return to_numpy(pc.dictionary_encode(column, null_encoding="encode").indices).astype(np.int64)


def _write_constants(folder: str, fields: list[StructField], columns: list[pa.Array]) -> None:
    """The groups' rows (``columns`` of values, typed as ``fields``) as ``PlanFileIndex``
    reads them: each group's values one after another, in files ``numbers``, ``text`` and
    ``ends``, ``nulls``."""
    order = pa.array((np.arange(len(columns))[None, :] * len(columns[0])
                      + np.arange(len(columns[0]))[:, None]).ravel())
    encoded = [_encoded(field.dataType, column) for field, column in zip(fields, columns)]
    np.stack([numbers for numbers, _ in encoded], axis=1).astype("<i8").tofile(
        os.path.join(folder, "numbers"))
    text, ends = _bytes_and_ends(pa.concat_arrays([text for _, text in encoded]).take(order))
    text.tofile(os.path.join(folder, "text"))
    ends.astype("<i8").tofile(os.path.join(folder, "ends"))
    np.stack([to_numpy(pc.is_null(column)) for column in columns], axis=1).astype(
        np.uint8).tofile(os.path.join(folder, "nulls"))


def _encoded(data_type: DataType, column: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """A column of constants as an int64 and bytes per value (the one its type does not use
    zero or empty): strings, binaries and decimals (their digits) as bytes; the rest as
    numbers: integers, days, microseconds since the epoch, a float's bits as a double's."""
    empty = pa.Array.from_buffers(pa.binary(), len(column), [
        None, pa.py_buffer(np.zeros(len(column) + 1, np.int32)), pa.py_buffer(b"")])
    if isinstance(data_type, _TEXT_TYPES):
        text = pc.cast(column, pa.string()) if isinstance(data_type, DecimalType) else column
        return np.zeros(len(column), np.int64), pc.fill_null(pc.cast(text, pa.binary()), b"")
    if isinstance(data_type, (FloatType, DoubleType)):
        floats = pc.fill_null(pc.cast(column, pa.float64()), 0.0)
        return to_numpy(floats).view(np.int64), empty
    if isinstance(data_type, DateType):
        column = pc.cast(pc.cast(column, pa.date32()), pa.int32())
    elif isinstance(data_type, (TimestampType, TimestampNTZType)):
        column = pc.cast(pc.cast(column, pa.timestamp("us", getattr(column.type, "tz", None))),
                         pa.int64())
    return to_numpy(pc.fill_null(pc.cast(column, pa.int64()), 0)), empty


def index_scan(spark: SparkSession, index_class: object, schema: StructType,
               spark_paths: pa.Array, sizes: pa.Array, root: str,
               constants: tuple[StructType, np.ndarray, list[pa.Array]] | None = None) -> DataFrame:
    """One Parquet scan over ``PlanFileIndex`` (``index_class``, see :func:`scan_files`);
    ``constants``: their schema, each file's group and the groups' values (see
    :func:`constant_scan`)."""
    jvm, session = spark._jvm, spark._jsparkSession
    sized = pc.greater(sizes, 0)
    all_sized = pc.all(sized).as_py() is not False
    text, ends = _bytes_and_ends(spark_paths if all_sized else spark_paths.filter(sized))
    constant_schema, groups, values = constants or (None, None, None)
    # classes by their full names: one Py4J call each, not one per package segment
    java_schema = (session.parseDataType(constant_schema.json()) if constants
                   else getattr(jvm, "org.apache.spark.sql.types.StructType")())
    with tempfile.TemporaryDirectory(prefix="delta-provider-files-") as folder:
        files = [os.path.join(folder, name) for name in ("paths", "offsets", "sizes", "positions")]
        text.tofile(files[0])
        ends.astype("<i8").tofile(files[1])
        to_numpy(sizes if all_sized else sizes.filter(sized)).astype("<i8").tofile(files[2])
        np.flatnonzero(to_numpy(sized)).astype("<i8").tofile(files[3])
        if constants:
            groups[to_numpy(sized)].astype("<i8").tofile(os.path.join(folder, "groups"))
            _write_constants(folder, constant_schema.fields, values)
        arguments = spark.sparkContext._gateway.new_array(getattr(jvm, "java.lang.Object"), 3)
        for position, argument in enumerate((root, folder, java_schema)):
            arguments[position] = argument
        index = index_class.getConstructors()[0].newInstance(arguments)
    datasources = "org.apache.spark.sql.execution.datasources"
    relation = getattr(jvm, f"{datasources}.HadoopFsRelation")(
        index, java_schema, session.parseDataType(schema.json()),
        getattr(jvm, "scala.Option").empty(),
        getattr(jvm, f"{datasources}.parquet.ParquetFileFormat")(),
        jvm.PythonUtils.toScalaMap({}), session)
    return DataFrame(session.baseRelationToDataFrame(relation), spark)


def _index_class(spark: SparkSession) -> object | None:
    gateway = spark.sparkContext._gateway
    if gateway not in _INDEX_CLASSES:
        _INDEX_CLASSES[gateway] = compiled_index_class(spark)
    return _INDEX_CLASSES[gateway]


def compiled_index_class(spark: SparkSession) -> object | None:
    """``PlanFileIndex`` compiled in the driver's JVM, or None (logged) where it does not
    compile, e.g. a Spark whose ``FileIndex`` differs."""
    jvm = spark._jvm
    source = index_source()
    try:
        compiler = jvm.org.codehaus.janino.SimpleCompiler()
        compiler.setParentClassLoader(jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader())
        compiler.cook(source)
        return compiler.getClassLoader().loadClass("PlanFileIndex")
    except Py4JError as error:
        log.warning("PlanFileIndex does not compile in this JVM (%s); plans reach Spark as "
                    "_spark_metadata logs, slower for many files", error)
        return None


def index_source() -> str:
    """``PlanFileIndex.java``'s text, also where the package is imported from a zip (the one
    spark-submit ships in ``py_files``)."""
    return resources.files(__package__).joinpath("PlanFileIndex.java").read_text(encoding="utf-8")


def log_scans(reader: DataFrameReader, spark_paths: pa.Array, sizes: pa.Array
              ) -> list[DataFrame]:
    """``reader``'s Parquet scans of the files through ``_spark_metadata`` logs (see the
    module's docstring): one, or a few for many files."""
    reader = reader.option("recursiveFileLookup", "true")
    parts = max(1, min(len(spark_paths) // PART_FILES, _MAX_PARTS, os.cpu_count() or 1))
    bounds = [len(spark_paths) * part // parts for part in range(parts + 1)]
    slices = [(spark_paths[start:end], sizes[start:end], start)
              for start, end in zip(bounds, bounds[1:])]
    if parts == 1:
        return [_scan(reader, *slices[0])]
    with ThreadPoolExecutor(parts, thread_name_prefix="delta-provider-scan") as pool:
        return list(pool.map(lambda part: _scan(reader, *part), slices))


def hidden_files(paths: pa.Array) -> pa.Array:
    """Which of ``paths`` a Spark file scan skips by their name (Spark's
    ``PartitioningAwareFileIndex.isDataPath``: names starting with ``.``, or with ``_`` and
    holding no ``=``); string tests on the names, not a regular expression per path, and only
    if the paths' bytes hold ``/.`` or ``/_`` or a path starts so."""
    leading = pc.or_(pc.starts_with(paths, "."), pc.starts_with(paths, "_"))
    if not (_slash_before(paths, b"._") or pc.any(leading).as_py()):
        return leading
    names = split_folders(paths)[1]
    underscored = pc.and_(pc.starts_with(names, "_"), pc.invert(pc.match_substring(names, "=")))
    return pc.or_(pc.starts_with(names, "."), underscored)


def _slash_before(paths: pa.Array, chars: bytes) -> bool:
    """Whether the bytes of ``paths`` hold a ``/`` followed by one of ``chars`` (numpy over
    Arrow's buffer: no copy, and quicker than a search for each pair)."""
    text, ends = _bytes_and_ends(paths)
    text = text[ends[0]:ends[-1]]
    after_slash = text[1:][text[:-1] == ord("/")]
    return bool(np.isin(after_slash, np.frombuffer(chars, np.uint8)).any())


def _bytes_and_ends(strings: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The bytes behind ``strings`` (not copied) and where each string starts in them, then
    where the last ends."""
    _, offsets, data = strings.buffers()
    dtype = np.int64 if pa.types.is_large_string(strings.type) else np.int32
    ends = (np.frombuffer(offsets, dtype)[strings.offset:strings.offset + len(strings) + 1]
            if offsets is not None else np.zeros(1, dtype))
    return np.frombuffer(data if data is not None else b"", np.uint8), ends


def _scan(reader: DataFrameReader, spark_paths: pa.Array, sizes: pa.Array, first: int
          ) -> DataFrame:
    with tempfile.TemporaryDirectory(prefix="delta-provider-files-") as folder:
        os.mkdir(os.path.join(folder, _LOG_FOLDER))
        with open(os.path.join(folder, _LOG_FOLDER, "0"), "wb") as log:
            log.write(b"v1\n")
            log.write(_log_entries(spark_paths, sizes, first))
        return reader.parquet(Path(folder).as_uri())


def _log_entries(spark_paths: pa.Array, sizes: pa.Array, first: int) -> pa.Buffer:
    positions = pa.array(np.arange(first, first + len(spark_paths), dtype=np.int64))
    return joined(pc.binary_join_element_wise(
        '{"path":"', _json_string_content(spark_paths), '","size":', pc.cast(sizes, pa.string()),
        ',"isDir":false,"modificationTime":', pc.cast(positions, pa.string()), _ENTRY_END, ""),
        "\n").as_buffer()


def _json_string_content(values: pa.Array) -> pa.Array:
    """``values`` escaped for a JSON string; only values that need escaping go through Python
    (Spark's spelling quotes them in the path, so only an odd authority can)."""
    special = pc.match_substring_regex(values, r'[\x00-\x1f"\\]')
    if not pc.any(special).as_py():
        return values
    escaped = [json.dumps(value)[1:-1] for value in values.filter(special).to_pylist()]
    return pc.replace_with_mask(values, special, pa.array(escaped, pa.string()))
