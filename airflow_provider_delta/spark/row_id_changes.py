"""The changes of copy-on-write commits on a table with row tracking, told by row id.

Each row of a removed file and of an added file gets its stable row id and row commit version
(the materialized columns where not null, else the file's ``baseRowId`` plus the row's position
and its ``defaultRowCommitVersion``; PROTOCOL.md, "Row Tracking"). An added row whose row
version is its commit's was written by it: an ``insert`` where its id is fresh (not
materialized), else an ``update_postimage``; the others were only copied. A removed row whose id
the commit did not copy is a ``delete``, or the ``update_preimage`` of an updated id. These are
the rows Delta's CDF reader gives for such commits; nothing is compared column by column.

Ids come in ranges: a file's rows have consecutive ids unless materialized, and a rewrite keeps
copied rows in order. So each entry's rows are told as runs of ids: on the driver from its
file's Parquet footer and, where a row group is not one run, its narrow materialized columns
(:mod:`~airflow_provider_delta.core.row_id_runs`); for entries with a deletion vector or of a
vector change, Spark reduces the narrow columns (the two materialized ones and each row's
position, no data column) to groups of rows whose id minus position is the same, few per
file. On the driver these ranges give the removed rows to report
(:func:`~airflow_provider_delta.core.row_tracking.reported_removed_rows`), which are then read
by position, and only added files holding rows of their commit's version are read in full.
A file whose groups are not runs (two runs sharing an offset, rows a deletion vector masks)
has its groups split into runs by position; where the groups are too many, the ids are
joined by Spark instead.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from itertools import groupby

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from airflow_provider_delta.core.arrow import from_numpy, to_numpy
from airflow_provider_delta.core.change_feed import (
    CHANGE_TYPE, COMMIT_VERSION, DELETE, INSERT, VECTOR, CommitChanges,
)
from airflow_provider_delta.core.file_table import with_partition_values
from airflow_provider_delta.core.model import TableMetadata
from airflow_provider_delta.core.row_id_runs import RUN_FIELDS, ChangedFile, file_runs
from airflow_provider_delta.core.row_tracking import (
    BASE_ROW_ID, DEFAULT_ROW_COMMIT_VERSION, MaterializedColumns, ReportedRows,
    entries_with_gaps, reported_removed_rows,
)
from airflow_provider_delta.spark.handoff import select_sql
from airflow_provider_delta.spark.schema import quoted, union_by_name

UPDATE_PREIMAGE, UPDATE_POSTIMAGE = "update_preimage", "update_postimage"
_ROW_ID, _ROW_VERSION = "__delta_provider_row_id", "__delta_provider_row_commit_version"
_ROW_INDEX = "__delta_provider_row_position"
_PAIRED = "__delta_provider_paired"
_ENTRY = "__delta_provider_entry"
_WRITTEN_AT = "__delta_provider_written_at"  # an added file's commit version
_SPARSE = "__delta_provider_sparse"  # a vector change's entry: some rows of a file
_FILE_TAGS = (BASE_ROW_ID, DEFAULT_ROW_COMMIT_VERSION)
_LONG = {"type": "long", "nullable": True, "metadata": {}}
# removed rows to report (16 bytes each) picked by a broadcast; runs of ids collected
_MAX_COLLECTED = 1 << 20
_FOOTER_THREADS = 8  # changed files' footers read at once on the driver (latency-bound)


def row_id_changes(reader, commits: list[CommitChanges], feed_columns: list[str]) -> DataFrame:
    """The changes of ``commits`` (copy-on-write, read by row id) as rows of ``feed_columns``,
    read by the feed's ``reader`` (a ``spark.change_feed._FeedReader``)."""
    frames = []
    by_columns = sorted(commits, key=lambda c: (c.row_tracking.row_id, c.version))
    for columns, group in groupby(by_columns, key=lambda c: c.row_tracking):
        frames += _changes(reader, list(group), columns, feed_columns)
    return union_by_name(frames)


def _changes(reader, commits: list[CommitChanges], columns: MaterializedColumns,
             feed_columns: list[str]) -> list[DataFrame]:
    """The reported rows of the commits as rows of ``feed_columns``: by ranges of row ids
    where they come in ranges (see
    :func:`~airflow_provider_delta.core.row_tracking.reported_removed_rows`), else by a join
    of the ids."""
    files, metadata = reader.tagged_files(commits)
    entries = _Entries(reader, files)
    tracked = _with_row_columns(metadata, columns)
    runs = _runs(reader.spark, entries, tracked, columns)
    runs = None if runs is None else entries.runs(runs)
    reported = None if runs is None else reported_removed_rows(
        runs, to_numpy(pc.equal(entries.tag(CHANGE_TYPE), DELETE)),
        to_numpy(entries.tag(COMMIT_VERSION)))
    if reported is None:
        typed = _typed_changes(reader.spark, entries.keyed(tracked, columns), columns)
        return [select_sql(reader.spark, typed, [quoted(n) for n in feed_columns])]
    current = np.unique(to_numpy(runs["entry"].filter(runs["current"])))
    # the removed rows are read with the feed's columns already
    return [*entries.removed_rows(metadata, reported),
            *entries.added_rows(tracked, columns, current, feed_columns)]


def _runs(spark, entries: _Entries, tracked: TableMetadata, columns: MaterializedColumns
          ) -> pa.Table | None:
    """The entries' runs of row ids: told on the driver from their files' footers where it
    can (:func:`~airflow_provider_delta.core.row_id_runs.file_runs`), else grouped by Spark
    by id minus position (:func:`_id_runs`), those of entries where such a group is not one
    run (:func:`~airflow_provider_delta.core.row_tracking.entries_with_gaps`) split into
    runs by position; None if too many."""
    told, untold = entries.told_runs(columns)
    if not len(untold) or told.num_rows > _MAX_COLLECTED:
        return None if told.num_rows > _MAX_COLLECTED else told
    runs = _small(_id_runs(spark, entries.narrow(tracked, columns, untold), columns))
    gapped = np.zeros(0, np.int64) if runs is None else entries_with_gaps(runs)
    if len(gapped):
        split = _small(_id_runs(spark, entries.narrow(tracked, columns, gapped,
                                                      check_files=False), columns, split=True))
        runs = None if split is None else pa.concat_tables([
            runs.filter(pc.invert(pc.is_in(runs["entry"], pa.array(gapped)))), split])
    if runs is None or told.num_rows + runs.num_rows > _MAX_COLLECTED:
        return None
    return pa.concat_tables([told, runs.select(told.column_names).cast(told.schema)])


class _Entries:
    """The commits' removed and added files, and the rows of files a vector change masks or
    unmasks, numbered (an entry each) as the runs of row ids name them; each with its
    row-tracking fields among its partition values (the reader attaches those to its
    rows)."""

    def __init__(self, reader, files: pa.Table):
        self.reader = reader
        files = with_partition_values(files, {name: files.column(name).combine_chunks()
                                              for name in _FILE_TAGS})
        kind = files.column("kind")
        whole = files.filter(pc.is_in(kind, value_set=pa.array([INSERT, DELETE])))
        vectors, vector_rows = reader.vector_changes(files.filter(pc.equal(kind, VECTOR)))
        self.whole = len(whole)
        self.rows = {self.whole + i: rows for i, rows in vector_rows.items()}
        change = whole.column("partition_values").combine_chunks().field(CHANGE_TYPE)
        # the change type last among the tags, as in the vector changes
        self.all = pa.concat_tables([with_partition_values(whole, {CHANGE_TYPE: change}),
                                     vectors])
        self._tags = self.all.column("partition_values").combine_chunks()

    def tag(self, name: str) -> pa.Array:
        return self._tags.field(name)

    def _read(self, metadata: TableMetadata, positions: np.ndarray, *, files=None,
              only_rows: dict[int, np.ndarray] | None = None, check_files: bool = False,
              **options) -> DataFrame:
        """The entries at ``positions`` read with ``metadata`` (whose partition columns are
        among their partition values): whole files without ``only_rows`` of theirs (deletion
        vectors applied), the others only at those rows (vector changes: at their own). Files
        are checked only where ``check_files``: the first read, :meth:`narrow`, checks all."""
        files = self.all if files is None else files
        only_rows = {**{p: r for p, r in self.rows.items() if p not in (only_rows or {})},
                     **(only_rows or {})}
        only = np.isin(positions, list(only_rows))
        reads = [self.reader.read_files(
            files.take(from_numpy(chosen)), metadata, list(metadata.partition_columns),
            only_rows=rows and {i: rows[p] for i, p in enumerate(chosen.tolist())},
            check_files=check_files, **options)
            for chosen, rows in ((positions[~only], None), (positions[only], only_rows))
            if len(chosen)]
        return union_by_name(reads)

    def told_runs(self, columns: MaterializedColumns) -> tuple[pa.Table, np.ndarray]:
        """The runs of the whole entries without a deletion vector, told on the driver (as
        :func:`_id_runs` groups them), and the positions of the other entries."""
        vectors = self.all.column("deletion_vector").combine_chunks()
        masked = to_numpy(pc.fill_null(pc.greater(vectors.field("cardinality"), 0), False))
        told = np.flatnonzero(~masked & (np.arange(len(self.all)) < self.whole))
        files = self.all.take(from_numpy(told)).select(["path", "size", "version"])
        added = to_numpy(pc.equal(self.tag(CHANGE_TYPE), INSERT))[told]
        defaults = to_numpy(self.tag(DEFAULT_ROW_COMMIT_VERSION))[told]
        location = self.reader.feed.table_uri, self.reader.storage_options
        changed = [ChangedFile(path, size, version, default, bool(new))
                   for path, size, version, default, new in zip(
                       *(files.column(n).to_pylist() for n in ("path", "size", "version")),
                       defaults.tolist(), added.tolist())]
        # a footer is a request or two on an object store: fetched side by side, in order
        with ThreadPoolExecutor(_FOOTER_THREADS, thread_name_prefix="delta-provider-runs"
                                ) as pool:
            runs = list(pool.map(lambda file: file_runs(file, columns, *location), changed))
        entry = [np.full(t.num_rows, e, np.int64) for e, t in zip(told.tolist(), runs)]
        table = pa.concat_tables([RUN_FIELDS.empty_table(), *runs])
        table = table.add_column(0, "entry", from_numpy(np.concatenate([np.zeros(0, np.int64),
                                                                        *entry])))
        return table, np.setdiff1d(np.arange(len(self.all)), told)

    def narrow(self, tracked: TableMetadata, columns: MaterializedColumns,
               positions: np.ndarray | None = None, *, check_files: bool = True) -> DataFrame:
        """The rows of the entries at ``positions`` (all by default) as the materialized
        columns, the row's position, and per entry its number, ``defaultRowCommitVersion``
        and for added ones their commit's version: no data column."""
        fields = {f["name"]: f for f in tracked.schema["fields"]}
        tags = (_ENTRY, DEFAULT_ROW_COMMIT_VERSION, _WRITTEN_AT, _SPARSE)
        narrow = replace(tracked, schema={**tracked.schema, "fields": [
            *(fields[n] for n in (columns.row_id, columns.row_commit_version)),
            *({"name": name, **_LONG} for name in tags[:-1]),
            {"name": _SPARSE, "type": "boolean", "nullable": True, "metadata": {}}]},
            partition_columns=tags)
        added = pc.equal(self.tag(CHANGE_TYPE), INSERT)
        numbered = with_partition_values(self.all, {
            _ENTRY: pa.array(np.arange(len(self.all))),
            _WRITTEN_AT: pc.if_else(added, self.tag(COMMIT_VERSION), None),
            _SPARSE: pa.array(np.arange(len(self.all)) >= self.whole)})
        positions = np.arange(len(self.all)) if positions is None else positions
        return self._read(narrow, positions, files=numbered, row_index=_ROW_INDEX,
                          check_files=check_files)

    def runs(self, groups: pa.Table) -> pa.Table:
        """The groups of :func:`_id_runs` completed with their entries' tags: ids that are
        not materialized are the file's ``baseRowId`` plus the position; an added row at its
        commit's version with a preserved id is ``updated``."""
        base = to_numpy(self.tag(BASE_ROW_ID))[to_numpy(groups["entry"])]
        updated = pc.and_(groups["offset"].is_valid(), groups["current"])
        return pa.table({
            "entry": groups["entry"], "offset": pc.fill_null(groups["offset"], pa.array(base)),
            "run": groups["run"], "updated": pc.if_else(updated, groups["position"], None),
            "first": groups["first"], "last": groups["last"], "rows": groups["rows"],
            "current": groups["current"]})

    def keyed(self, tracked: TableMetadata, columns: MaterializedColumns) -> DataFrame:
        """Every row of the entries with its row id and row commit version."""
        return _with_ids(self.reader.spark, self._read(
            tracked, np.arange(len(self.all)), row_index=_ROW_INDEX), columns)

    def removed_rows(self, metadata: TableMetadata, reported: ReportedRows) -> list[DataFrame]:
        """The reported removed rows, read at their positions, typed per change."""
        reads = []
        for preimage, change in ((False, DELETE), (True, UPDATE_PREIMAGE)):
            picked = reported.preimage == preimage
            order = np.argsort(reported.entry[picked], kind="stable")
            entry, rows = reported.entry[picked][order], reported.row_index[picked][order]
            positions, starts = np.unique(entry, return_index=True)
            if len(positions):
                typed = with_partition_values(self.all, {CHANGE_TYPE: pa.array(
                    [change] * len(self.all), pa.string())})
                reads.append(self._read(metadata, positions, files=typed, only_rows=dict(
                    zip(positions.tolist(), np.split(rows, starts[1:])))))
        return reads

    def added_rows(self, tracked: TableMetadata, columns: MaterializedColumns,
                   current: np.ndarray, feed_columns: list[str]) -> list[DataFrame]:
        """The rows the commits wrote (their row commit version is the commit's) from the
        added entries holding some, as rows of ``feed_columns``: ``insert`` where the id is
        fresh, else ``update_postimage``. In SQL text: a Column per operation costs Py4J
        calls."""
        if not len(current):
            return []
        written = self._read(tracked, current).where(
            f"{_row_version_sql(columns)} = {COMMIT_VERSION}")
        change = (f"CASE WHEN {quoted(columns.row_id)} IS NULL THEN '{INSERT}' ELSE "
                  f"'{UPDATE_POSTIMAGE}' END AS {quoted(CHANGE_TYPE)}")
        return [select_sql(self.reader.spark, written, [
            change if name == CHANGE_TYPE else quoted(name) for name in feed_columns])]


def _row_version_sql(columns: MaterializedColumns) -> str:
    return f"coalesce({quoted(columns.row_commit_version)}, {DEFAULT_ROW_COMMIT_VERSION})"


def _with_ids(spark, rows: DataFrame, columns: MaterializedColumns) -> DataFrame:
    return select_sql(spark, rows, [
        "*", f"coalesce({quoted(columns.row_id)}, {BASE_ROW_ID} + {_ROW_INDEX}) AS {_ROW_ID}",
        f"{_row_version_sql(columns)} AS {_ROW_VERSION}"])


def _id_runs(spark, narrow: DataFrame, columns: MaterializedColumns, *, split: bool = False
             ) -> DataFrame:
    """The entries' rows grouped where their materialized id minus their position is the
    same (null where not materialized), each row an added entry's commit wrote (``current``)
    or of a vector change (both few) on its own with its ``position``: per group its first
    and last position and rows. With ``split``, each group's rows are also told apart into
    runs of consecutive positions (``run``; a window, so only for the few entries that need
    it), else ``run`` is 0.
    Each task reduces its rows to a few groups before the shuffle; :meth:`_Entries.runs`
    completes them with the files' tags."""
    row_id, row_version = quoted(columns.row_id), quoted(columns.row_commit_version)
    current = select_sql(spark, narrow, [
        f"{_ENTRY} AS entry", f"{row_id} - {_ROW_INDEX} AS offset", _ROW_INDEX, _SPARSE,
        f"coalesce(coalesce({row_version}, {DEFAULT_ROW_COMMIT_VERSION}) = {_WRITTEN_AT}, "
        "false) AS current"])
    run = (f"{_ROW_INDEX} - row_number() OVER (PARTITION BY entry, offset ORDER BY "
           f"{_ROW_INDEX}) AS run") if split else "CAST(0 AS BIGINT) AS run"
    keyed = select_sql(spark, current, [
        "entry", "offset", "current", _ROW_INDEX, run,
        f"CASE WHEN current OR {_SPARSE} THEN {_ROW_INDEX} END AS position"])
    return keyed.groupBy("entry", "offset", "run", "position", "current").agg(
        F.min(_ROW_INDEX).alias("first"), F.max(_ROW_INDEX).alias("last"),
        F.count(F.lit(1)).alias("rows"))


def _small(runs: DataFrame) -> pa.Table | None:
    """The runs on the driver, or None if there are too many to be worth it."""
    table = runs.limit(_MAX_COLLECTED + 1).toArrow()
    return None if table.num_rows > _MAX_COLLECTED else table


def _typed_changes(spark, rows: DataFrame, columns: MaterializedColumns) -> DataFrame:
    """The reported rows, typed (see the module docstring).

    An added row is reported when its row version is the commit's: new (a fresh id, not
    materialized: ``insert``) or updated (a preserved id: ``update_postimage``); the others
    were copied. A removed row is reported unless its id was copied: these ids (few: the
    deleted and updated rows) come from the narrow keys alone and are handed back to Spark
    as a small table, so the full rows are never shuffled."""
    removed = F.col(CHANGE_TYPE) == DELETE
    current = F.col(_ROW_VERSION) == F.col(COMMIT_VERSION)
    key = [COMMIT_VERSION, _ROW_ID]
    added = rows.where(~removed & current).withColumn(CHANGE_TYPE, F.when(
        F.col(quoted(columns.row_id)).isNull(), F.lit(INSERT)).otherwise(UPDATE_POSTIMAGE))
    updated = (rows.where(~removed & current & F.col(quoted(columns.row_id)).isNotNull())
               .select(*key, F.lit(True).alias(_PAIRED)))
    gone = (rows.where(removed).select(*key)
            .join(rows.where(~removed & ~current).select(*key), key, "left_anti")
            .join(updated, key, "left"))
    removed_rows = rows.where(removed).join(_small_table(spark, gone), key).withColumn(
        CHANGE_TYPE, F.when(F.col(_PAIRED), F.lit(UPDATE_PREIMAGE)).otherwise(F.lit(DELETE)))
    return removed_rows.drop(_PAIRED).unionByName(added)


def _small_table(spark, keys: DataFrame) -> DataFrame:
    """The keys computed now and handed back to Spark as a broadcast Arrow table, so the
    full rows they pick are not shuffled; left to Spark's join if they are many."""
    table = keys.limit(_MAX_COLLECTED + 1).toArrow()
    if table.num_rows > _MAX_COLLECTED:
        return keys
    return F.broadcast(spark.createDataFrame(table, schema=keys.schema))


def _with_row_columns(metadata: TableMetadata, columns: MaterializedColumns) -> TableMetadata:
    """The feed's read metadata plus the hidden materialized columns (read by their physical
    names; null in files without them) and the files' row-tracking fields as tags."""
    mapped = {"delta.columnMapping.physicalName": None} if (
        metadata.column_mapping_mode != "none") else {}
    hidden = [{"name": name, **_LONG, "metadata": {k: name for k in mapped}}
              for name in (columns.row_id, columns.row_commit_version)]
    tags = [{"name": name, **_LONG} for name in _FILE_TAGS]
    schema = {**metadata.schema, "fields": [*metadata.schema["fields"], *hidden, *tags]}
    return replace(metadata, schema=schema,
                   partition_columns=(*metadata.partition_columns, *_FILE_TAGS))
