"""Runs of row ids in a changed data file, told on the driver from its Parquet footer.

A copy-on-write commit read by row id (:mod:`~airflow_provider_delta.spark.row_id_changes`)
needs each removed and added file's rows as runs: consecutive positions whose materialized
row id minus position is the same (null where the id is not materialized: the file's
``baseRowId`` plus the position), and the rows the commit wrote. Most of it is in the footer,
so no Spark job is needed for it:

- a row group without the materialized row-id column, or with only nulls in it, is one run by
  construction;
- a row group of an added file whose ids have no null and span exactly its rows holds that
  range of ids (ids are unique within a table), in some order; where its row commit versions
  are all older than its commit, the commit wrote none of them. Only that range matters for a
  file the commit added: positions are needed for removed rows (to read them) and written
  rows (an update's new image).

Only the other row groups are read, and of them only the one or two narrow columns. Files
with a deletion vector are left to Spark (their masked rows break runs).
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_delta.core.arrow import from_numpy
from airflow_provider_delta.core.row_tracking import MaterializedColumns
from airflow_provider_delta.errors import MissingDataFileError
from airflow_provider_delta.storage import StorageOptions, file_size, local_path, read_range

# The columns of a file's runs, as row_id_changes' Spark path groups them.
RUN_FIELDS = pa.schema([("offset", pa.int64()), ("run", pa.int64()), ("position", pa.int64()),
                        ("current", pa.bool_()), ("first", pa.int64()), ("last", pa.int64()),
                        ("rows", pa.int64())])


@dataclass(frozen=True)
class ChangedFile:
    """A removed or added file of a commit read by row id."""

    uri: str
    size: int  # 0 or less: unknown (an optional remove.size)
    version: int  # its commit
    default_row_commit_version: int
    added: bool


def file_runs(file: ChangedFile, columns: MaterializedColumns, table_uri: str,
              storage_options: StorageOptions) -> pa.Table:
    """The runs of ``file``'s rows (:data:`RUN_FIELDS`): ``offset`` the id minus the position
    (null: not materialized), ``run`` the run's first position, ``position`` that too for a
    preserved id the commit wrote (an update's new image, a run of its own), ``current``
    whether the commit wrote the run's rows, their ``first`` and ``last`` positions and
    ``rows``. MissingDataFileError if the file is gone."""
    parquet = _open(file, table_uri, storage_options)
    group_runs, start = [], 0
    for group in range(parquet.metadata.num_row_groups):
        meta = parquet.metadata.row_group(group)
        current = _all_current(parquet, meta, file, columns)
        told = _told_by_footer(parquet, meta, file, columns, current)
        group_runs.append(_runs(start, meta.num_rows, *told) if told is not None
                          else _read_runs(parquet, group, start, file, columns, current))
        start += meta.num_rows
    return pa.concat_tables([_empty(), *group_runs])


def _open(file: ChangedFile, table_uri: str, storage_options: StorageOptions) -> pq.ParquetFile:
    path = local_path(file.uri)
    try:
        if path is not None:
            return pq.ParquetFile(path, pre_buffer=False)
        size = file.size if file.size > 0 else file_size(file.uri, table_uri, storage_options)
        if size is None:
            raise FileNotFoundError(file.uri)
        return pq.ParquetFile(_RangedFile(file.uri, size, table_uri, storage_options),
                              pre_buffer=False)
    except FileNotFoundError as exc:
        raise MissingDataFileError(table_uri, file.version, file.uri) from exc


class _RangedFile(io.RawIOBase):
    """A remote file as pyarrow reads it: each read one ranged request (a footer, a column
    chunk), so only the narrow columns' bytes are fetched."""

    def __init__(self, uri: str, size: int, table_uri: str, storage_options: StorageOptions):
        self.uri, self.size, self.at = uri, size, 0
        self.table_uri, self.storage_options = table_uri, storage_options

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.at

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self.at = {io.SEEK_SET: 0, io.SEEK_CUR: self.at, io.SEEK_END: self.size}[whence] + offset
        return self.at

    def read(self, size: int = -1) -> bytes:
        length = self.size - self.at if size < 0 else min(size, self.size - self.at)
        data = read_range(self.uri, self.at, length, self.table_uri, self.storage_options)
        self.at += len(data)
        return data

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)


def _told_by_footer(parquet: pq.ParquetFile, meta, file: ChangedFile,
                    columns: MaterializedColumns, current: bool | None) -> tuple | None:
    """A row group's one run as (offset, current), from its statistics (``current``: see
    :func:`_all_current`); None where they do not tell (the group is read)."""
    ids = _stats(parquet, meta, columns.row_id)
    if ids is None or current is None:
        return None
    low, high, nulls = ids
    if nulls == meta.num_rows:
        return None, current
    # a range of ids, in whatever order: enough for rows the commit only copied into a file
    # it added; a removed file's rows are read by position, an update's new image is its own
    if (file.added and not current and nulls == 0 and low is not None
            and high - low + 1 == meta.num_rows):
        return low, False
    return None


def _stats(parquet: pq.ParquetFile, meta, name: str) -> tuple | None:
    """(min, max, null count) of a top-level column in a row group; (None, None, rows) if the
    file has no such column; None where its statistics lack the null count."""
    if parquet.schema_arrow.get_field_index(name) < 0:
        return None, None, meta.num_rows
    leaf = next(i for i in range(meta.num_columns) if meta.column(i).path_in_schema == name)
    stats = meta.column(leaf).statistics
    if stats is None or not stats.has_null_count:
        return None
    if not stats.has_min_max:
        return (None, None, stats.null_count) if stats.null_count == meta.num_rows else None
    return stats.min, stats.max, stats.null_count


def _all_current(parquet: pq.ParquetFile, meta, file: ChangedFile,
                 columns: MaterializedColumns) -> bool | None:
    """Whether the commit wrote every row of a row group (True), none (False), or some or
    unknown (None). A removed file's rows are never the commit's."""
    if not file.added:
        return False
    versions = _stats(parquet, meta, columns.row_commit_version)
    if versions is None:
        return None
    low, high, nulls = versions
    default_current = file.default_row_commit_version == file.version
    if nulls == meta.num_rows:
        return default_current
    within = low <= file.version <= high
    if nulls == 0 and low == high == file.version:
        return True
    if not within and (nulls == 0 or not default_current):
        return False
    return None


def _runs(start: int, rows: int, offset: int | None, current: bool) -> pa.Table:
    """A row group of ``rows`` rows from ``start`` told as one run."""
    at = np.array([start], np.int64)
    return _table(at * 0 + (offset or 0) - start, offset is not None, at, at, False,
                  np.array([current]), at, at + rows - 1, at * 0 + rows)


def _read_runs(parquet: pq.ParquetFile, group: int, start: int, file: ChangedFile,
               columns: MaterializedColumns, all_current: bool | None) -> pa.Table:
    """A row group's runs from its materialized columns, read (the row versions only where
    the statistics leave ``all_current`` unknown, see :func:`_all_current`): a run breaks
    where the id is not the one before plus one, where it turns materialized or not, where
    written rows start or end, and around each written row with a preserved id (an updated
    row)."""
    names = parquet.schema_arrow.names
    versioned = all_current is None
    wanted = [n for n in (columns.row_id, columns.row_commit_version if versioned else None)
              if n in names]
    read = parquet.read_row_group(group, columns=wanted, use_threads=False)
    rows = parquet.metadata.row_group(group).num_rows
    ids, materialized = _values(read, columns.row_id, rows, 0)
    if versioned:
        versions, _ = _values(read, columns.row_commit_version, rows,
                              file.default_row_commit_version)
        current = versions == file.version
    else:
        current = np.full(rows, all_current, bool)
    updated = current & materialized
    breaks = np.ones(rows, bool)
    breaks[1:] = ((materialized[1:] != materialized[:-1]) | (current[1:] != current[:-1])
                  | updated[1:] | (materialized[1:] & (np.diff(ids) != 1)))
    first = np.flatnonzero(breaks)
    last = np.append(first[1:], rows) - 1
    positions = first + start
    return _table(ids[first] - positions, materialized[first], positions,
                  positions, updated[first], current[first], positions, last + start,
                  last - first + 1)


def _values(read: pa.Table, name: str, rows: int, fill: int) -> tuple[np.ndarray, np.ndarray]:
    """A column's values (``fill`` where null) and where they are not null."""
    if name not in read.column_names:
        return np.full(rows, fill, np.int64), np.zeros(rows, bool)
    column = read.column(name).combine_chunks().cast(pa.int64())
    valid = ~np.asarray(column.is_null(), bool)
    return np.asarray(column.fill_null(fill), np.int64), valid


def _table(offset, offset_valid, run, position, position_valid, current, first, last,
           rows) -> pa.Table:
    """A runs table (:data:`RUN_FIELDS`); ``*_valid`` say where offsets and positions are set
    (a bool or an array)."""
    count = len(run)
    as_mask = (lambda valid: np.full(count, valid, bool) if isinstance(valid, bool)  # noqa: E731
               else np.asarray(valid, bool))
    return pa.Table.from_arrays([
        from_numpy(np.asarray(offset, np.int64), as_mask(offset_valid)),
        from_numpy(np.asarray(run, np.int64)),
        from_numpy(np.asarray(position, np.int64), as_mask(position_valid)),
        from_numpy(np.asarray(current, bool)),
        *(from_numpy(np.asarray(values, np.int64)) for values in (first, last, rows))],
        schema=RUN_FIELDS)


def _empty() -> pa.Table:
    return RUN_FIELDS.empty_table()
