"""Plans to Spark DataFrames: Parquet read natively, everything Delta-specific from the plan.

One ``spark.read.parquet`` scan reads all files of a plan with the physical schema in force at
its end. Schema changes inside a plan are additive or type widenings: older files read NULL for
new columns, and Spark 4's Parquet reader widens their narrow types (int to long, date to
timestamp_ntz, decimal precision, ...), nested fields included.
Partition values and deletion vectors are per file. On a classic session partition values (and
any per-file constant a caller reads as one) are partition values of the scan's file index,
which Spark fills per file (:func:`~airflow_provider_delta.spark.file_index.constant_scan`); a
row's file is its position in that index, so deleted rows (or the rows a change feed picks) are
a bitmap the scan's filter reads at ``_metadata.row_index``
(:mod:`~airflow_provider_delta.spark.row_positions`). Otherwise partition values are SQL
literals looked up by the row's file (a few files), or they and deleted rows reach the rows
through broadcast joins on Spark's ``_metadata.file_path`` (and ``_metadata.row_index`` for
deleted rows). No data row goes to the driver and no per-file DataFrames are unioned.

A path can occur more than once in a range (a deletion-vector DELETE re-adds the file with a new
vector). Each occurrence is read with its own vector: the k-th occurrences of all paths form the
k-th scan, and the scans are unioned (one scan in the common case).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from functools import reduce

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from airflow_provider_delta.core import plan_changes, plan_snapshot
from airflow_provider_delta.core.model import DeletionVectorDescriptor, Plan, TableMetadata
from airflow_provider_delta.core.delta_log import TableLocation
from airflow_provider_delta.errors import (
    InvalidParameterError, MissingDataFileError, UnsupportedFeatureError,
)
from airflow_provider_delta.spark.deletion_vectors import deleted_rows
from airflow_provider_delta.spark.file_index import (
    FILE_POSITION_SQL, constant_column, constant_scan, hidden_files, scan_files,
)
from airflow_provider_delta.spark.handoff import (
    LOOKUP_MAX_FILES, constant_sql, file_index_sql, select_sql,
)
from airflow_provider_delta.spark.paths import spark_file_paths, spark_read_paths
from airflow_provider_delta.spark.row_positions import position_bitmap, where_positions
from airflow_provider_delta.spark.schema import (
    logical_schema,
    physical_read_schema,
    quoted,
    to_logical_columns,
    to_logical_sql,
)
from airflow_provider_delta.storage import (
    UNKNOWN, SharedFolder, common_folder, file_size, missing_file_mask,
)

log = logging.getLogger(__name__)

# Helper columns; the prefix keeps them apart from any table column.
_FILE = "__delta_provider_file_path"
_FILE_ID = "__delta_provider_file_id"
_ROW = "__delta_provider_row_index"
_FIELD_ID_CONF = "spark.sql.parquet.fieldId.read.enabled"
_DISCOVERY_THRESHOLD_CONF = "spark.sql.sources.parallelPartitionDiscovery.threshold"
_DISCOVERY_THRESHOLD = 32  # its default: fewer paths are listed on the driver anyway
_UNMATCHED_FILE = ("airflow-provider-delta: the plan has no entry for a scanned file (its "
                   "partition values and deletion vector are unknown): ")


def read_changes(
    spark: SparkSession,
    table_uri: str,
    start_version: int,
    end_version: int | None = None,
    *,
    ignore_deletes: bool = False,
    ignore_changes: bool = False,
    skip_change_commits: bool = False,
    storage_options: dict[str, str] | None = None,
) -> DataFrame:
    """The rows added by versions ``start_version..end_version`` (inclusive; latest if None).

    Follows Delta's streaming-source rules (see :func:`~airflow_provider_delta.core.plan_changes`
    for the options). The result has the table's logical columns, order and types at
    ``end_version``.
    """
    plan = plan_changes(
        table_uri,
        start_version,
        end_version,
        ignore_deletes=ignore_deletes,
        ignore_changes=ignore_changes,
        skip_change_commits=skip_change_commits,
        storage_options=storage_options,
    )
    return read_plan(spark, plan, storage_options=storage_options)


def read_snapshot(
    spark: SparkSession,
    table_uri: str,
    *,
    version: int | None = None,
    timestamp: dt.datetime | str | None = None,
    storage_options: dict[str, str] | None = None,
) -> DataFrame:
    """The table as of ``version`` or ``timestamp`` (the latest commit at or before it).

    Without either, the latest version. Giving both is a ValueError.
    """
    plan = plan_snapshot(
        table_uri, version=version, timestamp=timestamp, storage_options=storage_options
    )
    return read_plan(spark, plan, storage_options=storage_options)


def read_plan(
    spark: SparkSession,
    plan: Plan,
    *,
    storage_options: dict[str, str] | None = None,
    only_rows: Mapping[int, np.ndarray] | None = None,
    row_index: str | None = None,
    check_files: bool = True,
) -> DataFrame:
    """The rows of ``plan``'s files, deletion vectors applied, in the plan's logical schema.

    Checks every data file and deletion vector up front and raises MissingDataFileError
    before any row is produced (unless ``check_files`` is false: the caller's earlier read
    of the same files checked them). ``storage_options`` are needed to read deletion vectors
    and check files in object stores (Spark itself uses its own Hadoop configuration).
    ``only_rows`` (plan position -> non-empty row indexes, for every file) reads just those
    rows of each file instead of applying deletion vectors: the change feed's vector changes.
    ``row_index`` names a last column holding each row's position in its file (row ids).
    """
    if not len(plan):
        return spark.createDataFrame([], logical_schema(plan.metadata))
    if only_rows is not None and not all(len(only_rows.get(i, ())) for i in range(len(plan))):
        raise InvalidParameterError(
            None, "only_rows", f"<rows of {len(only_rows)} of {len(plan)} file(s)>",
            "leaves files of the plan without rows", "list some rows of every file of the plan",
            plan.table_uri)
    # the folder the files share, for both the existence check and a classic session's scan
    common = (common_folder(plan.file_table.column("path").combine_chunks())
              if check_files or _classic(spark) else UNKNOWN)
    with (_files_checked_meanwhile(plan, storage_options, common) if check_files
          else nullcontext()):
        return _read_checked_plan(spark, plan, storage_options, only_rows, row_index, common)


def _read_checked_plan(
    spark: SparkSession,
    plan: Plan,
    storage_options: dict[str, str] | None,
    only_rows: Mapping[int, np.ndarray] | None,
    row_index: str | None = None,
    common: SharedFolder | object = UNKNOWN,
) -> DataFrame:
    metadata = plan.metadata
    file_table = _scanned_file_table(plan, storage_options)
    deletions = _load_deletions(plan, storage_options) if only_rows is None else only_rows
    if metadata.column_mapping_mode == "id":
        # Per session and read at planning time; harmless for schemas without field ids.
        spark.conf.set(_FIELD_ID_CONF, "true")
    rounds = _occurrence_rounds(file_table.column("path"))
    log.info(
        "%s: reading %d files (%d bytes) of versions %d..%d in %d scan(s)",
        plan.table_uri, len(plan), plan.total_bytes, plan.start_version,
        plan.end_version, len(rounds),
    )
    row_join = "left_anti" if only_rows is None else "left_semi"
    return _union([_read_round(spark, plan.table_uri, metadata, file_table, positions, deletions,
                               row_join, row_index, common) for positions in rounds])


@contextmanager
def _files_checked_meanwhile(plan: Plan, storage_options: dict[str, str] | None,
                             common: SharedFolder | object = UNKNOWN) -> Iterator[None]:
    """:func:`check_files_exist` in a thread beside the body: its listing or requests overlap
    Spark's work on the file index. A missing file is raised, also in place of the body's
    error (it explains that one)."""
    with ThreadPoolExecutor(1, thread_name_prefix="delta-provider-check") as pool:
        check = pool.submit(check_files_exist, plan, storage_options, common=common)
        try:
            yield
        except BaseException:
            check.result()
            raise
        check.result()


def check_files_exist(plan: Plan, storage_options: dict[str, str] | None, *,
                      common: SharedFolder | object = UNKNOWN) -> None:
    paths = plan.file_table.column("path").combine_chunks()
    gone = np.flatnonzero(missing_file_mask(paths, plan.table_uri, storage_options,
                                            common=common))
    if len(gone):
        first = int(gone[0])
        version = plan.file_table.column("version")[first].as_py()
        raise MissingDataFileError(plan.table_uri, version, paths[first].as_py())


def _scanned_file_table(plan: Plan, storage_options: dict[str, str] | None) -> pa.Table:
    """The plan's file table as Spark's scan needs it: files Spark would skip as hidden are
    refused; a size the log lacks (an optional ``remove.size``) is looked up."""
    table = plan.file_table
    paths, sizes = table.column("path").combine_chunks(), table.column("size").combine_chunks()
    hidden = hidden_files(paths)
    if pc.any(hidden).as_py():
        first = pc.index(hidden, True).as_py()
        raise UnsupportedFeatureError(
            plan.table_uri, "data files named '_*' or '.*'", table.column("version")[first].as_py(),
            f"Spark's file sources skip {paths[first].as_py()} as a hidden file, so its rows "
            "would be lost. Rewrite the file under another name (e.g. OPTIMIZE), or read the "
            "table with delta-spark.")
    unsized = pc.less_equal(sizes, 0)
    if not pc.any(unsized).as_py():
        return table
    looked_up = [file_size(path, plan.table_uri, storage_options)
                 for path in paths.filter(unsized).to_pylist()]
    sizes = pc.replace_with_mask(sizes, unsized, pa.array(looked_up, pa.int64()))
    return table.set_column(table.schema.get_field_index("size"), "size", sizes)


def _load_deletions(
    plan: Plan, storage_options: dict[str, str] | None
) -> dict[int, np.ndarray]:
    """Deleted row indexes per file (by position in the plan), for files with a vector."""
    root = TableLocation(plan.table_uri, storage_options).root_uri
    vectors = plan.file_table.column("deletion_vector").combine_chunks()
    cardinality = pc.fill_null(vectors.field("cardinality"), 0)
    with_rows = pc.indices_nonzero(pc.greater(cardinality, 0)).to_pylist()
    versions = plan.file_table.column("version")
    return {
        index: deleted_rows(
            DeletionVectorDescriptor(**vectors[index].as_py()),
            table_root_uri=root,
            table_uri=plan.table_uri,
            version=versions[index].as_py(),
            storage_options=storage_options,
        )
        for index in with_rows
    }


def _occurrence_rounds(paths: pa.ChunkedArray) -> list[np.ndarray]:
    """Plan positions split so no path repeats within a round: the k-th occurrences of every
    path form round k, each in plan order."""
    if len(pc.unique(paths)) == len(paths):  # the common case: no path repeats (no codes)
        return [np.arange(len(paths))]
    encoded = paths.combine_chunks().dictionary_encode()
    codes = encoded.indices.to_numpy()
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    group_start = np.flatnonzero(np.diff(sorted_codes, prepend=-1) != 0)
    starts = np.repeat(group_start, np.diff(np.append(group_start, len(codes))))
    occurrence = np.empty(len(codes), np.int64)
    occurrence[order] = np.arange(len(codes)) - starts
    return [np.flatnonzero(occurrence == k) for k in range(occurrence.max() + 1)]


def _read_round(
    spark: SparkSession,
    table_uri: str,
    metadata: TableMetadata,
    file_table: pa.Table,
    positions: np.ndarray,
    deletions: Mapping[int, np.ndarray],
    row_join: str,
    row_index: str | None = None,
    common: SharedFolder | object = UNKNOWN,  # of the file table's paths
) -> DataFrame:
    """One Parquet scan over files with distinct paths, with their partitions and DVs."""
    with_rows = np.fromiter(deletions, np.int64, len(deletions))
    round_deletions = {int(i): deletions[int(i)] for i in with_rows[np.isin(with_rows, positions)]}
    whole = len(positions) == len(file_table)  # one round: every file in plan order
    files = file_table if whole else file_table.take(pa.array(positions))
    common = common if whole else UNKNOWN  # now of the round's files
    paths = files.column("path").combine_chunks()
    schema = physical_read_schema(metadata)
    carried = False  # whether the scan's rows carry their file's constants (partition values)
    if _classic(spark):
        spark_paths = spark_file_paths(paths, common=common)
        sizes = files.column("size").combine_chunks()
        scan = _constant_scan(spark, schema, spark_paths, sizes, table_uri, metadata, files)
        carried = scan is not None
        scans = [scan] if carried else scan_files(spark, schema, spark_paths, sizes, table_uri)
    else:  # Spark Connect sends the paths in one message
        with _serial_listing(spark, len(paths) > _DISCOVERY_THRESHOLD and _all_local(paths)):
            scans = [spark.read.schema(schema).parquet(*spark_read_paths(paths).to_pylist())]
    data_sql = to_logical_sql(metadata)
    if (not (metadata.partition_columns or round_deletions or row_index)
            and data_sql is not None):
        return select_sql(spark, _union(scans), data_sql)
    if (not round_deletions and len(scans) == 1
            and (carried or len(files) <= LOOKUP_MAX_FILES) and data_sql is not None):
        looked_up = _with_file_constants(spark, scans[0], metadata, files, data_sql, row_index,
                                         carried=carried, common=common)
        if looked_up is not None:
            return looked_up
    if round_deletions and _classic(spark):
        by_position = _read_by_position(spark, scans, metadata, files, positions,
                                        round_deletions, row_join == "left_semi", data_sql,
                                        row_index, carried, common)
        if by_position is not None:
            return by_position
    scan_columns = [F.col("*"), F.col("_metadata.file_path").alias(_FILE)]
    if round_deletions or row_index:
        scan_columns.append(F.col("_metadata.row_index").alias(_ROW))
    rows = _union([scan.select(*scan_columns) for scan in scans])
    return _with_files_joined(spark, rows, metadata, files, positions, _FILE, row_index,
                              round_deletions, row_join, common)


def _read_by_position(
    spark: SparkSession, scans: list[DataFrame], metadata: TableMetadata, files: pa.Table,
    positions: np.ndarray, deletions: Mapping[int, np.ndarray], keep: bool,
    data_sql: list[str] | None, row_index: str | None, carried: bool = False,
    common: SharedFolder | object = UNKNOWN,  # of the files' paths
) -> DataFrame | None:
    """The round's rows with the ``deletions`` (rows by plan position) kept alone (``keep``:
    the change feed's picked rows) or dropped (deletion vectors), by a bitmap in the scan's
    filter (:func:`~airflow_provider_delta.spark.row_positions.where_positions`), not by joins
    on the path and the row; the files' constants looked up after it. None if the bitmap is
    too big."""
    local = {int(np.searchsorted(positions, p)): rows for p, rows in deletions.items()}
    bitmap = position_bitmap(local, len(files))
    if bitmap is None:
        return None
    rows = where_positions(spark, _union([select_sql(spark, scan, [
        "*", f"{FILE_POSITION_SQL} AS {_FILE_ID}", f"_metadata.row_index AS {_ROW}",
        f"_metadata.file_path AS {_FILE}"]) for scan in scans]), bitmap, len(files), _FILE_ID,
        _ROW, keep=keep)
    if data_sql is not None and (carried or not metadata.partition_columns
                                 or len(files) <= LOOKUP_MAX_FILES):
        looked_up = _with_file_constants(spark, rows, metadata, files, data_sql, row_index,
                                         index=_FILE_ID, carried=carried)
        if looked_up is not None:
            return looked_up
    return _with_files_joined(spark, rows, metadata, files, np.arange(len(files)), _FILE_ID,
                              row_index, common=common)


def _with_files_joined(
    spark: SparkSession, rows: DataFrame, metadata: TableMetadata, files: pa.Table,
    positions: np.ndarray, key: str, row_index: str | None,
    deletions: Mapping[int, np.ndarray] | None = None, row_join: str = "left_anti",
    common: SharedFolder | object = UNKNOWN,  # of the files' paths
) -> DataFrame:
    """The result columns of ``rows``, their files' partition values joined to them on ``key``
    (``_FILE``: Spark's path, or ``_FILE_ID``: the file's position, both in ``rows``) from
    :func:`_files_frame` (``files`` at plan ``positions``), then the ``deletions`` (rows by
    file position) applied by ``row_join`` on the file and ``_ROW``.

    A left join plus a guard: a scanned file missing from the files frame fails the query
    instead of silently losing its rows."""
    columns = _result_columns(metadata) + ([F.col(_ROW).alias(row_index)] if row_index else [])
    if not (metadata.partition_columns or deletions):
        return rows.select(*columns)
    frame = _files_frame(spark, metadata, files, positions, common)
    frame = frame if key == _FILE else frame.drop(_FILE)  # the rows carry their path
    rows = rows.join(F.broadcast(frame), key, "left")
    if deletions:
        rows = rows.join(F.broadcast(_deletions_frame(spark, deletions)), [_FILE_ID, _ROW],
                         row_join)
    return rows.select(_unmatched_file_guard(columns[0], metadata), *columns[1:])


def _union(frames: list[DataFrame]) -> DataFrame:
    return reduce(DataFrame.union, frames)


def _constant_scan(
    spark: SparkSession, schema: StructType, spark_paths: pa.Array, sizes: pa.Array,
    table_uri: str, metadata: TableMetadata, files: pa.Table,
) -> DataFrame | None:
    """The files' scan whose rows carry their partition values (see
    :func:`~airflow_provider_delta.spark.file_index.constant_scan`), or None."""
    if not metadata.partition_columns:
        return None
    return constant_scan(spark, schema, spark_paths, sizes, table_uri,
                         _partition_fields(metadata),
                         files.column("partition_values").combine_chunks())


def _partition_fields(metadata: TableMetadata) -> list[StructField]:
    return [f for f in logical_schema(metadata).fields if f.name in metadata.partition_columns]


def _with_file_constants(
    spark: SparkSession, scan: DataFrame, metadata: TableMetadata, files: pa.Table,
    data_sql: list[str], row_index: str | None = None, *, index: str | None = None,
    carried: bool = False, common: SharedFolder | object = UNKNOWN,  # of the files' paths
) -> DataFrame | None:
    """The scan's rows with their file's partition values: the columns the scan carries
    (``carried``), else looked up in SQL literals by the file's position
    (:data:`FILE_POSITION_SQL`; by path on Spark Connect, whose scan lists paths; or the
    column ``index``, beside the row's position in ``_ROW``), and ``row_index`` (see
    :func:`read_plan`); None if a value has no literal."""
    positions = [f"_metadata.row_index AS {quoted(row_index)}"] if row_index else []
    if index is not None:  # the rows were selected from the scan with both
        positions = [f"{_ROW} AS {quoted(row_index)}"] if row_index else []
    else:
        index = FILE_POSITION_SQL  # the scan is scan_files'
    if index == FILE_POSITION_SQL and not _classic(spark):  # by path once a row, first
        by_path = file_index_sql(spark_file_paths(files.column("path"), common=common),
                                 _UNMATCHED_FILE)
        scan = select_sql(spark, scan, ["*", *positions, f"{by_path} AS {_FILE_ID}"])
        index, positions = _FILE_ID, [quoted(row_index)] if row_index else []
    values = files.column("partition_values").combine_chunks()
    schema = logical_schema(metadata)
    data = iter(data_sql)  # the data columns, in the schema's order
    columns = []
    for field in schema.fields:
        if field.name not in metadata.partition_columns:
            columns.append(next(data))
            continue
        constant = (quoted(constant_column(field.name)) if carried
                    else constant_sql(values.field(field.name).to_pylist(), field, index))
        if constant is None:
            return None
        columns.append(f"{constant} AS {quoted(field.name)}")
    return select_sql(spark, scan, columns + positions)


def _classic(spark: SparkSession) -> bool:
    """Whether ``spark`` is a classic session (the driver is here), not Spark Connect."""
    return getattr(spark, "_jvm", None) is not None


def _all_local(paths: pa.Array) -> bool:
    """Whether every path is a local one (:func:`~airflow_provider_delta.storage.local_path`)."""
    remote = pc.and_(pc.match_substring(paths, "://"),
                     pc.invert(pc.starts_with(paths, "file:")))
    return not pc.any(remote).as_py()


def _unmatched_file_guard(column: Column, metadata: TableMetadata) -> Column:
    first = logical_schema(metadata).names[0]
    error = F.raise_error(F.concat(F.lit(_UNMATCHED_FILE), F.col(_FILE)))
    return F.when(F.col(_FILE_ID).isNull(), error).otherwise(column).alias(first)


@contextmanager
def _serial_listing(spark: SparkSession, enabled: bool) -> Iterator[None]:
    """Let the driver stat explicit local files itself while a scan is created.

    Above a threshold of paths Spark lists them with a distributed job, which for thousands of
    local files costs ten times more than ``stat`` calls on the driver. Below its default the
    conf is left alone: reading and setting it costs three round trips on Spark Connect.
    """
    if not enabled:
        yield
        return
    previous = spark.conf.get(_DISCOVERY_THRESHOLD_CONF, None)
    spark.conf.set(_DISCOVERY_THRESHOLD_CONF, str(2**31 - 1))
    try:
        yield
    finally:
        if previous is None:
            spark.conf.unset(_DISCOVERY_THRESHOLD_CONF)
        else:
            spark.conf.set(_DISCOVERY_THRESHOLD_CONF, previous)


def _files_frame(
    spark: SparkSession, metadata: TableMetadata, files: pa.Table, positions: np.ndarray,
    common: SharedFolder | object = UNKNOWN,  # of the files' paths
) -> DataFrame:
    """A small frame: Spark's path of each file, its plan position and its partition values
    (already typed in the file table), handed to Spark as one Arrow table."""
    partition_fields = _partition_fields(metadata)
    schema = StructType(
        [StructField(_FILE, StringType(), False), StructField(_FILE_ID, IntegerType(), False)]
        + partition_fields
    )
    values = files.column("partition_values").combine_chunks()
    columns = {
        _FILE: spark_file_paths(files.column("path"), common=common),
        _FILE_ID: pa.array(positions.astype(np.int32)),
        **{field.name: values.field(field.name) for field in partition_fields},
    }
    return spark.createDataFrame(pa.table(columns), schema)


def _deletions_frame(spark: SparkSession, deletions: dict[int, np.ndarray]) -> DataFrame:
    """(file position, deleted row index) pairs, shipped to Spark through Arrow."""
    ids = np.concatenate(
        [np.full(len(rows), index, dtype=np.int32) for index, rows in deletions.items()]
    )
    row_indexes = np.concatenate(list(deletions.values())).astype(np.int64)
    return spark.createDataFrame(pa.table({_FILE_ID: ids, _ROW: row_indexes}))


def _result_columns(metadata: TableMetadata) -> list[Column]:
    data_columns = to_logical_columns(metadata)
    return [
        data_columns.get(field.name, F.col(quoted(field.name)))
        for field in logical_schema(metadata).fields
    ]
