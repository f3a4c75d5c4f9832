"""Change feeds as Spark DataFrames: the table's columns plus Delta's three CDF columns.

The feed plan's files are read with the reader's machinery (one scan per group of files,
partition values and deletion vectors from the log, column mapping). What a file's rows mean
is attached the way partition values are: ``_commit_version``, ``_commit_timestamp`` and, for
files that are not change data files, ``_change_type`` are per-file constants read as partition
columns (on a classic session, partition values of the scan's file index: Spark fills them per
file, no lookup per row). Change data files carry ``_change_type`` as a column of their own.

Commits without the Change Data Feed that rewrite files are netted: per commit, every distinct
row is counted +1 per removed copy and -1 per added copy, and what remains is reported as that
many ``delete`` (positive) or ``insert`` (negative) rows. Rows are compared on their values
with Spark's equality (nulls equal, NaN equal to NaN, -0.0 to 0.0; maps and VARIANT as below).
An unchanged copied row nets to zero; an updated row is a ``delete`` of its old image and an
``insert`` of its new one (we do not pair them into update pre/post images: without keys the
pairing is a guess). Where the table has row tracking, row ids pair them exactly instead
(:mod:`.row_id_changes`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType, DataType, DoubleType, FloatType, MapType, StringType, StructType, VariantType,
)

from airflow_provider_delta.core import plan_change_feed
from airflow_provider_delta.core.change_feed import (
    CDC, CHANGE_TYPE, COMMIT_TIMESTAMP, COMMIT_VERSION, DELETE, FEED_COLUMNS, INSERT, VECTOR,
    ChangeFeedPlan, CommitChanges,
)
from airflow_provider_delta.core.file_table import PLAN_COLUMNS, with_partition_values
from airflow_provider_delta.core.model import DeletionVectorDescriptor, Plan, TableMetadata
from airflow_provider_delta.core.delta_log import TableLocation
from airflow_provider_delta.spark.deletion_vectors import deleted_rows
from airflow_provider_delta.spark.handoff import select_sql
from airflow_provider_delta.spark.reader import read_plan
from airflow_provider_delta.spark.row_id_changes import row_id_changes
from airflow_provider_delta.spark.schema import logical_schema, quoted, union_by_name

_CDF_FIELDS = (
    {"name": CHANGE_TYPE, "type": "string", "nullable": True, "metadata": {}},
    {"name": COMMIT_VERSION, "type": "long", "nullable": True, "metadata": {}},
    {"name": COMMIT_TIMESTAMP, "type": "timestamp", "nullable": True, "metadata": {}},
)
_TAGS = FEED_COLUMNS  # per-file columns beside partitions
_BALANCE = "__delta_provider_balance"
_SIGN, _RUNNING = "__delta_provider_sign", "__delta_provider_running"
_HASH = "__delta_provider_hash"
_KEY = "__delta_provider_comparable_"
# Copy-on-write commits of at most this many bytes of files are netted in one task, with no
# shuffle: a copied row and its original are read by different tasks of a scan, and only a
# shuffle (whose cost grows with the rows) or one task reading both brings them together.
_ONE_TASK_BYTES = 64 << 20
# A coalesce to at most this many partitions keeps every partition of any frame (see _own_stage).
_ANY_PARTITIONS = 2**31 - 1


def read_change_feed(
    spark: SparkSession,
    table_uri: str,
    start_version: int,
    end_version: int | None = None,
    *,
    storage_options: dict[str, str] | None = None,
) -> DataFrame:
    """The row changes of versions ``start_version..end_version`` (inclusive; latest if None).

    Columns: the table's (see :func:`~airflow_provider_delta.core.plan_change_feed` for which
    schema), then ``_change_type`` (``insert``, ``delete``, ``update_preimage``,
    ``update_postimage``), ``_commit_version`` (long) and ``_commit_timestamp`` (timestamp),
    as Delta's Change Data Feed has them.
    """
    feed = plan_change_feed(table_uri, start_version, end_version, storage_options=storage_options)
    return read_feed(spark, feed, storage_options=storage_options)


def read_feed(
    spark: SparkSession, feed: ChangeFeedPlan, *, storage_options: dict[str, str] | None = None
) -> DataFrame:
    """The rows of a change feed plan (see :func:`read_change_feed`)."""
    reader = _FeedReader(spark, feed, storage_options)
    frames = reader.frames([c for c in feed.commits if not c.net])
    netted = [c for c in feed.commits if c.net and not c.row_tracking]
    if netted:  # first: where it is one long task, it starts first
        small = pc.sum(feed.files_of(netted).column("size")).as_py() <= _ONE_TASK_BYTES
        frames.insert(0, _own_stage(_net_changes(
            spark, union_by_name(reader.frames(netted)), one_task=small,
            constants=_constant_tags(netted))))
    schema = logical_schema(_with_cdf_columns(feed.metadata, tagged=()))
    tracked = [c for c in feed.commits if c.row_tracking]
    if tracked:  # copy-on-write commits that row ids pair: nothing compared row by row
        frames.append(row_id_changes(reader, tracked, schema.names))
    if not frames:
        return spark.createDataFrame([], schema)
    # Delta's column order: a netted frame has _change_type last, and a union keeps the order
    # of its first frame.
    return select_sql(spark, union_by_name(frames), [quoted(name) for name in schema.names])


def snapshot_as_inserts(df: DataFrame, version: int, timestamp_ms: int) -> DataFrame:
    """A snapshot's rows as a change feed of inserts at ``version`` (a first full load)."""
    return df.select(
        "*", F.lit(INSERT).alias(CHANGE_TYPE), F.lit(version).cast("long").alias(COMMIT_VERSION),
        F.lit(_utc(timestamp_ms)).alias(COMMIT_TIMESTAMP),
    )


class _FeedReader:
    """Reads groups of a feed's files, each row tagged with its commit and change type."""

    def __init__(
        self, spark: SparkSession, feed: ChangeFeedPlan, storage_options: dict[str, str] | None
    ):
        self.spark = spark
        self.feed = feed
        self.storage_options = storage_options
        self.root = TableLocation(feed.table_uri, storage_options).root_uri

    def frames(self, commits: Iterable[CommitChanges]) -> list[DataFrame]:
        """One DataFrame per kind of file present: change data, whole files, vector changes."""
        commits = list(commits)
        files = _tagged(self.feed.files_of(commits), commits)
        kind = files.column("kind")
        cdc = files.filter(pc.equal(kind, CDC))
        whole = files.filter(pc.is_in(kind, value_set=pa.array([INSERT, DELETE])))
        vectors, vector_rows = self.vector_changes(files.filter(pc.equal(kind, VECTOR)))
        frames = []
        if len(cdc):
            frames.append(self._read(cdc, tagged=(COMMIT_VERSION, COMMIT_TIMESTAMP)))
        if len(whole):
            frames.append(self._read(whole))
        if len(vectors):
            frames.append(self._read(vectors, only_rows=vector_rows))
        return frames

    def _read(self, files: pa.Table, *, tagged=_TAGS, only_rows=None) -> DataFrame:
        values = files.column("partition_values").combine_chunks()
        names = [*(n for n in values.type.names if n not in _TAGS), *tagged]
        return self.read_files(files, _with_cdf_columns(self.feed.metadata, tagged), names,
                               only_rows=only_rows)

    def read_files(self, files: pa.Table, metadata: TableMetadata, names: list[str], *,
                   only_rows=None, row_index: str | None = None,
                   check_files: bool = True) -> DataFrame:
        """Feed files read with ``metadata``, whose partition columns are the ``names`` of
        their partition values (see :func:`~airflow_provider_delta.spark.reader.read_plan`
        for the rest)."""
        values = files.column("partition_values").combine_chunks()
        plan = Plan(
            table_uri=self.feed.table_uri, start_version=self.feed.start_version,
            end_version=self.feed.end_version, metadata=metadata,
            file_table=files.select(PLAN_COLUMNS).set_column(
                PLAN_COLUMNS.index("partition_values"), "partition_values",
                pa.StructArray.from_arrays([values.field(n) for n in names], names=names)),
        )
        return read_plan(self.spark, plan, storage_options=self.storage_options,
                         only_rows=only_rows, row_index=row_index, check_files=check_files)

    def tagged_files(self, commits: list[CommitChanges]) -> tuple[pa.Table, TableMetadata]:
        """The commits' files tagged as :meth:`frames` reads them, and the metadata to read
        whole files with."""
        return (_tagged(self.feed.files_of(commits), commits),
                _with_cdf_columns(self.feed.metadata, _TAGS))

    def vector_changes(self, files: pa.Table) -> tuple[pa.Table, dict[int, np.ndarray]]:
        """Per vector change, the rows the new vector masks and the old did not (deleted) and
        the reverse (restored), as entries of the file without its vector."""
        rows, kinds, only_rows = [], [], {}
        for index, (version, new, old) in enumerate(zip(
                files.column("version").to_pylist(), files.column("deletion_vector").to_pylist(),
                files.column("previous_vector").to_pylist())):
            new_rows, old_rows = self._masked(new, version), self._masked(old, version)
            for kind, changed in ((DELETE, np.setdiff1d(new_rows, old_rows)),
                                  (INSERT, np.setdiff1d(old_rows, new_rows))):
                if len(changed):
                    only_rows[len(rows)] = changed
                    rows.append(index)
                    kinds.append(kind)
        entries = files.take(pa.array(rows, pa.int64()))
        untouched = entries.set_column(
            entries.schema.get_field_index("deletion_vector"), "deletion_vector",
            pa.nulls(len(entries), entries.schema.field("deletion_vector").type))
        return with_partition_values(
            untouched, {CHANGE_TYPE: pa.array(kinds, pa.string())}), only_rows

    def _masked(self, vector: dict | None, version: int) -> np.ndarray:
        if vector is None or vector["cardinality"] == 0:
            return np.array([], dtype=np.uint64)
        return deleted_rows(DeletionVectorDescriptor(**vector), table_root_uri=self.root,
                            table_uri=self.feed.table_uri, version=version,
                            storage_options=self.storage_options)


def _utc(epoch_ms: int) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(milliseconds=epoch_ms)


def _tagged(files: pa.Table, commits: list[CommitChanges]) -> pa.Table:
    """The files with their commit's version and timestamp, and their kind as a change type,
    beside their partition values (as the reader attaches those to the rows)."""
    versions = files.column("version").combine_chunks()
    at = pc.index_in(versions, value_set=pa.array([c.version for c in commits], pa.int64()))
    times = pa.array([_utc(c.timestamp_ms) for c in commits], pa.timestamp("us", tz="UTC"))
    return with_partition_values(files, {
        COMMIT_VERSION: versions, COMMIT_TIMESTAMP: times.take(at),
        CHANGE_TYPE: files.column("kind").combine_chunks()})


def _with_cdf_columns(metadata: TableMetadata, tagged: tuple[str, ...]) -> TableMetadata:
    """The table's metadata with the CDF columns appended; ``tagged`` ones come per file."""
    schema = {**metadata.schema, "fields": [*metadata.schema.get("fields", []), *_CDF_FIELDS]}
    return replace(metadata, schema=schema,
                   partition_columns=(*metadata.partition_columns, *tagged))


def _constant_tags(commits: list[CommitChanges]) -> dict[str, str]:
    """The commit's version and time as SQL, where the rows are of one commit: then they are
    the same in every row, so the grouping leaves them out (each key column costs it per row)
    and they are added back."""
    if len(commits) != 1:
        return {}
    commit = commits[0]
    return {COMMIT_VERSION: f"CAST({commit.version} AS BIGINT)",
            COMMIT_TIMESTAMP: f"timestamp_millis({commit.timestamp_ms})"}


def _own_stage(frame: DataFrame) -> DataFrame:
    """``frame`` unchanged, in a generated stage of its own below the feed's union.

    Spark (4.x) compiles a union and its children into one stage, and where one child may
    repeat its input rows (the netting's ``explode``), the stage copies every row of every
    child: all the appends' rows, for the few netted ones. A coalesce that keeps each partition
    is not compiled, so the union's stage ends there and the other children's rows go through
    uncopied."""
    return frame.coalesce(_ANY_PARTITIONS)


def _net_changes(spark: SparkSession, rows: DataFrame, *, one_task: bool = False,
                 constants: dict[str, str] | None = None) -> DataFrame:
    """Removed minus added rows, per commit, as multisets (see the module docstring); in one
    task (``one_task``: every row read by it, nothing shuffled) or after a shuffle. Columns
    of ``constants`` (name to SQL) hold one value in every row: they are left out of the
    comparison and given that value.

    Rows equal in every column form a group; of ``r`` removed and ``a`` added copies, ``r - a``
    removed ones are kept as deletes, or ``a - r`` added ones as inserts. Where grouping gives
    back each row's own values, the groups are counted (:func:`_counted`); else a window over
    them keeps the rows themselves (floats, maps, VARIANT, collated strings). Written in SQL: a
    Column per field costs the driver a Py4J call each.
    """
    constants = constants or {}
    netted = _netted(spark, rows.drop(*constants), one_task=one_task)
    if not constants:
        return netted
    return select_sql(spark, netted, ["*", *(f"{sql} AS {quoted(name)}"
                                             for name, sql in constants.items())])


def _netted(spark: SparkSession, rows: DataFrame, *, one_task: bool) -> DataFrame:
    """:func:`_net_changes` of every column."""
    fields = [field for field in rows.schema.fields if field.name != CHANGE_TYPE]
    names = [quoted(field.name) for field in fields]
    sign = f"CASE WHEN {quoted(CHANGE_TYPE)} = '{DELETE}' THEN 1 ELSE -1 END AS {_SIGN}"
    if one_task:  # one partition: the grouping below needs no exchange
        rows = rows.coalesce(1)
    if all(_exact(field.dataType) for field in fields):
        shuffled = [] if one_task else [f"xxhash64({', '.join(names)}) AS {_HASH}"]
        return _counted(spark, select_sql(spark, rows, [*names, sign, *shuffled]), names,
                        shuffle=not one_task)
    comparable = {f"{_KEY}{number}": _comparable(F.col(name), field.dataType)
                  for number, (name, field) in enumerate(zip(names, fields))
                  if not _groupable(field.dataType)}
    signed = select_sql(spark, rows.withColumns(comparable) if comparable else rows,
                        [*names, *comparable, sign])
    keys = [name for name, field in zip(names, fields)  # a commit's time goes with its version
            if _groupable(field.dataType) and field.name != COMMIT_TIMESTAMP]
    kept = _kept(spark, signed, [*names, *comparable], ", ".join([*keys, *comparable]))
    return select_sql(spark, kept, [
        *names, f"CASE WHEN {_BALANCE} > 0 THEN '{DELETE}' ELSE '{INSERT}' END AS "
        f"{quoted(CHANGE_TYPE)}"])


def _counted(spark: SparkSession, signed: DataFrame, names: list[str], *, shuffle: bool = True
             ) -> DataFrame:
    """Each group's balance (removed minus added copies) as that many deletes or inserts of
    the group's values.

    With ``shuffle`` the rows are shuffled by a hash of their values (``signed``'s ``_HASH``),
    which the grouping includes: the groups are then counted where they meet, without a pass
    on the reading side (a row and its copy are read by different tasks, so it would reduce
    nothing) and without sorting them. Without, ``signed`` is one partition and the groups are
    counted in it. Groups that net to zero (most: the copied rows) are dropped before the
    rows are repeated."""
    keys = [_HASH, *names] if shuffle else names
    balances = ((signed.repartition(_HASH) if shuffle else signed).groupBy(*keys)
                .agg(F.sum(_SIGN).alias(_BALANCE)).where(f"{_BALANCE} != 0"))
    change = f"CASE WHEN {_BALANCE} > 0 THEN '{DELETE}' ELSE '{INSERT}' END"
    return select_sql(spark, balances, [*names, f"explode(array_repeat({change}, "
                                        f"CAST(abs({_BALANCE}) AS INT))) AS {quoted(CHANGE_TYPE)}"])


def _kept(spark: SparkSession, signed: DataFrame, columns: list[str], keys: str) -> DataFrame:
    """The rows of each group (equal ``keys``) to report, with the group's balance (removed
    minus added).

    Ordered by sign, a group's ``a`` added copies come first, then its ``r`` removed ones; the
    running sum of the signs falls to ``-a`` and climbs to the balance ``r - a``. With a
    positive balance the last ``r - a`` removed rows are kept: those whose running sum is
    above zero. With a negative one, the first ``a - r`` added rows: the k-th has the running
    sum ``-k``, kept while at or above the balance. Two sums and no rank or count: each
    function costs the window a pass over every group."""
    group = f"OVER (PARTITION BY {keys} ORDER BY {_SIGN} ROWS BETWEEN UNBOUNDED PRECEDING AND"
    counted = select_sql(spark, signed, [
        *columns, f"sum({_SIGN}) {group} UNBOUNDED FOLLOWING) AS {_BALANCE}",
        f"sum({_SIGN}) {group} CURRENT ROW) AS {_RUNNING}"])
    return counted.where(f"CASE WHEN {_SIGN} > 0 THEN {_RUNNING} > 0 "
                         f"ELSE {_RUNNING} >= {_BALANCE} END")


def _exact(data_type: DataType) -> bool:
    """Whether values equal as Spark groups them are the same value: not floats (-0.0 groups
    with 0.0), maps, VARIANT or strings of a collation other than binary."""
    return _every_type(data_type, lambda kind: not (
        isinstance(kind, (FloatType, DoubleType, MapType, VariantType))
        or isinstance(kind, StringType)
        and getattr(kind, "collation", "UTF8_BINARY") != "UTF8_BINARY"))


def _groupable(data_type: DataType) -> bool:
    """Whether Spark groups values of this type faithfully (no maps, no VARIANT inside)."""
    return _every_type(data_type, lambda kind: not isinstance(kind, (MapType, VariantType)))


def _every_type(data_type: DataType, accepted: Callable[[DataType], bool]) -> bool:
    """Whether ``accepted`` holds for ``data_type``, or for each type in its arrays and
    structs (at any depth)."""
    if isinstance(data_type, ArrayType):
        return _every_type(data_type.elementType, accepted)
    if isinstance(data_type, StructType):
        return all(_every_type(f.dataType, accepted) for f in data_type.fields)
    return accepted(data_type)


def _comparable(column: Column, data_type: DataType) -> Column:
    """A value to group by in place of one Spark cannot group: each map as its entries sorted
    by key, each VARIANT as its JSON.

    Spark cannot group by maps (older versions) or loses their null values when it does
    (4.3 sorts them with ``mapsort``, null values coming out as 0); arrays of structs group.
    """
    if isinstance(data_type, VariantType):
        return F.to_json(column)
    if isinstance(data_type, MapType):
        entries = F.array_sort(F.map_entries(column), _by_key)
        return F.transform(entries, lambda entry: F.struct(
            entry["key"].alias("key"),
            _comparable(entry["value"], data_type.valueType).alias("value")))
    if isinstance(data_type, ArrayType) and not _groupable(data_type.elementType):
        return F.transform(column, lambda element: _comparable(element, data_type.elementType))
    if isinstance(data_type, StructType) and not _groupable(data_type):
        fields = [_comparable(column[f.name], f.dataType).alias(f.name) for f in data_type.fields]
        return F.when(column.isNotNull(), F.struct(*fields))
    return column


def _by_key(left: Column, right: Column) -> Column:
    return (F.when(left["key"] < right["key"], -1)
            .when(left["key"] > right["key"], 1).otherwise(0))
