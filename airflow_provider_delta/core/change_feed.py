"""Planning a change feed of a version range: per commit, the files that carry its row changes.

Where the table has the Change Data Feed on (``delta.enableChangeDataFeed=true`` in force at the
version) the rules are those of Delta's CDF reader: a commit's ``cdc`` files when it has any,
else every row of its removed files is a ``delete`` and of its added files an ``insert``, a
file re-added with a new deletion vector changing only the rows the vectors differ in, and
MERGE commits that report no changed rows giving nothing.

Where it is off the same files are planned, and the commits that both remove and add (a
copy-on-write rewrite) are marked ``net``: the Spark layer subtracts their added rows from
their removed rows as multisets, so rows a rewrite only copied are not reported and a changed
row is a ``delete`` of its old image plus an ``insert`` of its new one.

Where row tracking is enabled too, a copy-on-write commit names its changed rows by row id
instead (:mod:`~airflow_provider_delta.core.row_tracking`): updates are paired into
``update_preimage``/``update_postimage`` as Delta's CDF reader has them.

``dataChange=false`` commits (OPTIMIZE, compaction) give nothing in both cases.

The files are one Arrow table, as a plan's are, chosen from the range's file actions column-wise.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_delta.core.actions import table_metadata
from airflow_provider_delta.core.arrow import from_numpy, scalar, strings, to_numpy
from airflow_provider_delta.core.changes import (
    _apply_table_changes, _check_range, _range_commits, split_batches,
)
from airflow_provider_delta.core.file_table import (
    PLAN_COLUMNS, decoded_paths, file_table, resolved_deletion_vectors,
)
from airflow_provider_delta.core.model import Plan, TableMetadata
from airflow_provider_delta.core.protocol import bool_property, check_protocol
from airflow_provider_delta.core.row_tracking import (
    BASE_ROW_ID, DEFAULT_ROW_COMMIT_VERSION, LOG_FIELDS, MaterializedColumns, RowTrackingLog,
)
from airflow_provider_delta.core.replay import (
    FileActions, SplitCommit, earliest_recreatable, raise_unreadable, read_commits, replay,
)
from airflow_provider_delta.core.delta_log import TableLocation
from airflow_provider_delta.core.commit_times import CommitClock
from airflow_provider_delta.core.versions import newest_version
from airflow_provider_delta.errors import VersionNotAvailableError

CHANGE_DATA_FEED_KEY = "delta.enableChangeDataFeed"
# The columns a change feed's rows carry after the data columns, as Delta's CDF reader names them.
CHANGE_TYPE = "_change_type"
COMMIT_VERSION = "_commit_version"
COMMIT_TIMESTAMP = "_commit_timestamp"
FEED_COLUMNS = (CHANGE_TYPE, COMMIT_VERSION, COMMIT_TIMESTAMP)
# Delta's CDF reader skips MERGE commits without cdc files whose metrics report none of these.
_MERGE_CHANGE_METRICS = ("numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsDeleted")
_FEED_ACTIONS = ("add", "remove", "cdc")

INSERT, DELETE, CDC, VECTOR = "insert", "delete", "cdc", "vector"
_KINDS = (CDC, VECTOR, INSERT, DELETE)  # kind codes: positions here
_CDC, _VECTOR, _INSERT, _DELETE = range(len(_KINDS))


@dataclass(frozen=True)
class CommitChanges:
    """A commit of the range that changes rows."""

    version: int
    timestamp_ms: int  # in-commit timestamp, else the commit file's time made increasing
    change_data_feed: bool  # the table had CDF on at this version
    net: bool  # a copy-on-write commit without CDF: its deletes and inserts are to be netted
    # for a net commit that row ids pair instead: the columns that hold preserved ones
    row_tracking: MaterializedColumns | None = None


@dataclass(frozen=True)
class ChangeFeedPlan:
    """The commits of ``start_version..end_version`` that change rows, in version order, and
    their files.

    ``file_table`` has a plan's columns (:mod:`~airflow_provider_delta.core.file_table`), per
    commit its deletes, then vector changes, then inserts (or its cdc files), plus ``kind``:
    ``"cdc"`` (a change data file: its ``_change_type`` column says), ``"insert"`` or
    ``"delete"`` (every row the file's deletion vector leaves), or ``"vector"`` (the file
    re-added with a new deletion vector: rows in (new vector − ``previous_vector``) are
    deleted, rows in (``previous_vector`` − new vector) restored, i.e. inserted), and
    ``previous_vector`` (a ``deletion_vector`` struct), and ``base_row_id`` and
    ``default_row_commit_version`` (the files of commits read by row id, else null).
    """

    table_uri: str
    start_version: int
    end_version: int
    metadata: TableMetadata  # the schema of the feed
    commits: tuple[CommitChanges, ...]
    file_table: pa.Table

    @property
    def total_bytes(self) -> int:
        return pc.sum(self.file_table.column("size")).as_py() or 0

    def __len__(self) -> int:
        return self.file_table.num_rows

    def files_of(self, commits: Iterable[CommitChanges]) -> pa.Table:
        """The files of some of the feed's commits."""
        versions = from_numpy(np.array([c.version for c in commits], np.int64))
        return self.file_table.filter(pc.is_in(self.file_table.column("version"),
                                               value_set=versions))

    def as_plan(self) -> Plan:
        """The feed's files as a :class:`Plan` (for what only needs paths, sizes, versions)."""
        return Plan(self.table_uri, self.start_version, self.end_version,
                    self.file_table.select(PLAN_COLUMNS), self.metadata)


def split_feed(feed: ChangeFeedPlan, *, max_files: int | None = None,
               max_bytes: int | None = None) -> list[ChangeFeedPlan]:
    """Consecutive sub-feeds covering the feed's range, cut as :func:`split_batches` cuts a plan
    (never inside a commit, limits soft)."""
    return [
        replace(feed, start_version=batch.start_version, end_version=batch.end_version,
                commits=commits, file_table=feed.files_of(commits))
        for batch in split_batches(feed.as_plan(), max_files=max_files, max_bytes=max_bytes)
        for commits in [tuple(c for c in feed.commits
                              if batch.start_version <= c.version <= batch.end_version)]
    ]


def plan_change_feed(table_uri: str, start_version: int, end_version: int | None = None, *,
                     storage_options: dict[str, str] | None = None) -> ChangeFeedPlan:
    """The files carrying the row changes of versions ``start..end`` (inclusive).

    ``end_version`` None or past the latest version means the latest. A start after the latest
    version raises VersionNotAvailableError, a start after the end InvalidParameterError. The
    feed has the end version's schema where column mapping is on at the start, the end or the
    latest version, else the latest schema (Delta's CDF rule, :func:`feed_has_end_schema`); every
    schema in force from the start up to that one must be an additive extension of the one
    before (else SchemaChangeError). Versions with CDF off are derived from their adds and
    removes (Delta refuses them; we can read them exactly).
    """
    _check_range(table_uri, start_version, end_version)
    location = TableLocation(table_uri, storage_options)
    latest = newest_version(location, since=start_version)
    if start_version > latest:
        raise VersionNotAvailableError(
            table_uri, start_version, earliest_recreatable(location.list_log()), latest,
            hint=f"The change feed can start at version {latest} at the latest; wait for "
                 "newer commits or lower start_version.")
    end = latest if end_version is None else min(end_version, latest)
    walk = _LogWalk(location, start_version)
    for version, commit in _range_commits(location, walk.state, start_version, end,
                                          split=_FEED_ACTIONS):
        walk.take(version, commit)
    metadata_changes = dict(walk.changes)
    walk.settle_feed_schema(end, latest)
    raw, commit_flags = _change_files(walk.files.table(), walk.commits)
    raw, by_row_id = walk.row_tracking.fields_of(
        raw, {version for version, (_, net) in commit_flags.items() if net})
    files = file_table(raw, location, metadata_changes, walk.metadata).append_column(
        "kind", raw.column("kind")).append_column(
        "previous_vector", resolved_deletion_vectors(raw.column("previous_vector"), location))
    for name in (BASE_ROW_ID, DEFAULT_ROW_COMMIT_VERSION):
        files = files.append_column(name, raw.column(name))
    times = CommitClock(location, end, dict(walk.metadata.configuration))
    commits = tuple(CommitChanges(version, times.millis(version), cdf, net,
                                  walk.row_tracking.columns[version]
                                  if version in by_row_id else None)
                    for version, (cdf, net) in commit_flags.items())
    return ChangeFeedPlan(table_uri, start_version, end, walk.metadata, commits, files)


class _LogWalk:
    """Protocol and metadata through the commits of a range, checked as in ``plan_changes``,
    and the range's file actions."""

    def __init__(self, location: TableLocation, start_version: int):
        self.location = location
        self.start_version = start_version
        # the start commit as the range reads it: its file actions left in its text
        self.state = replay(location, start_version, split_last=_FEED_ACTIONS)
        check_protocol(location.table_uri, self.state.protocol, start_version)
        self.protocol = self.state.protocol
        self.metadata = table_metadata(self.state.metadata, self.protocol)
        self.changes = {start_version: self.metadata}  # version -> metadata taking effect
        self.files = FileActions(location, _FEED_ACTIONS, LOG_FIELDS)
        self.files.note(self.metadata)
        self.commits: dict[int, tuple[bool, bool]] = {}  # version -> (CDF on, unchanged merge)
        self.row_tracking = RowTrackingLog()

    def take(self, version: int, commit: SplitCommit | None) -> None:
        """Apply a commit of the range and take its file actions."""
        if commit is None:
            raise_unreadable(self.location, version, version, from_checkpoint=True)
        self._apply(version, commit.actions)
        cdf_on = bool_property(self.metadata.configuration, CHANGE_DATA_FEED_KEY)
        self.commits[version] = (cdf_on, _unchanged_merge(commit.actions))
        self.row_tracking.take(version, self.protocol, self.metadata.configuration,
                               commit.actions)
        self.files.extend(version, commit.text)

    def settle_feed_schema(self, end: int, latest: int) -> None:
        """Keep the end version's schema or move on to the latest one, as Delta's CDF reader
        chooses (:func:`feed_has_end_schema`); moving on applies and checks the protocol and
        metadata changes after ``end``."""
        start_mapped, end_mapped = _mapped(self.changes[self.start_version]), _mapped(self.metadata)
        later = [] if start_mapped or end_mapped else list(self._commits(end + 1, latest))
        if feed_has_end_schema(start_mapped, end_mapped, _mapped_at_last(later)):
            return
        for version, actions in later:
            self._apply(version, actions)

    def _commits(self, first: int, last: int) -> Iterator[tuple[int, list[dict[str, Any]]]]:
        for version, actions in read_commits(self.location, range(first, last + 1)):
            if actions is None:
                raise_unreadable(self.location, version, version, from_checkpoint=True)
            yield version, actions

    def _apply(self, version: int, actions: list[dict[str, Any]]) -> None:
        if version > self.start_version:
            metadata = self.metadata
            self.protocol, self.metadata = _apply_table_changes(
                self.location, version, actions, self.protocol, self.metadata)
            if self.metadata is not metadata:
                self.changes[version] = self.metadata
                self.files.note(self.metadata)


def feed_has_end_schema(start_mapped: bool, end_mapped: bool, latest_mapped: bool) -> bool:
    """Delta's batch CDF schema rule (``CDCReaderBase.getCDCRelation`` and
    ``getBatchSchemaModeForTable``): a range is read with its end version's schema when column
    mapping is on at its start, its end or the table's latest version, else with the latest
    schema."""
    return start_mapped or end_mapped or latest_mapped


def _mapped(metadata: TableMetadata) -> bool:
    return metadata.column_mapping_mode != "none"


def _mapped_at_last(commits: list[tuple[int, list[dict[str, Any]]]]) -> bool:
    """Whether the last ``metaData`` action of ``commits`` turns column mapping on."""
    newest = next((a["metaData"] for _, actions in reversed(commits) for a in reversed(actions)
                   if "metaData" in a), {})
    return (newest.get("configuration") or {}).get("delta.columnMapping.mode", "none") != "none"


def _change_files(raw: pa.Table, commits: dict[int, tuple[bool, bool]]
                  ) -> tuple[pa.Table, dict[int, tuple[bool, bool]]]:
    """The change files of the range's file actions (``raw``, in log order), with ``kind`` and
    ``previous_vector``, and ``(CDF on, net)`` of every commit that has some.

    Per commit: its cdc files if it has any; else its dataChange=true removes and adds by
    decoded path, a path both removed and added being a vector change; nothing for a MERGE
    that changed no rows where CDF is on.
    """
    versions = to_numpy(raw.column("version"))
    commit_versions = np.array(sorted(commits), np.int64)
    flags = np.array([commits[v] for v in commit_versions.tolist()], bool).reshape(-1, 2)
    cdf_on, unchanged_merge = flags[np.searchsorted(commit_versions, versions)].T
    is_cdc = _is(raw, CDC)
    with_cdc = np.isin(versions, versions[is_cdc])
    keep = np.where(with_cdc, is_cdc, to_numpy(raw.column("data_change")) & ~is_cdc
                    & ~(cdf_on & unchanged_merge))
    raw = raw.filter(from_numpy(keep))
    versions, cdf_on = versions[keep], cdf_on[keep]
    is_add, is_remove = _is(raw, "add"), _is(raw, "remove")
    keys = pc.binary_join_element_wise(raw.column("version").cast(pa.string()),
                                       decoded_paths(raw.column("path").combine_chunks()),
                                       scalar("\x00"))
    removed_keys = keys.filter(from_numpy(is_remove))
    removed_at = to_numpy(pc.fill_null(
        pc.index_in(keys, value_set=removed_keys).cast(pa.int64()), scalar(-1)))
    vector = is_add & (removed_at >= 0)
    replaced = to_numpy(pc.is_in(keys, value_set=keys.filter(from_numpy(vector))))
    kind = np.select([~(is_add | is_remove), vector, is_add, is_remove & ~replaced],
                     [_CDC, _VECTOR, _INSERT, _DELETE], default=-1)
    previous = np.where(vector, np.flatnonzero(is_remove)[np.maximum(removed_at, 0)]
                        if is_remove.any() else 0, -1)
    previous_vector = raw.column("deletionVector").combine_chunks().take(
        from_numpy(np.maximum(previous, 0), valid=previous >= 0))
    # per commit: deletes, then vector changes, then inserts (or cdc files alone), in log order
    rank = np.array([0, 0, 1, 2, 0])[kind + 1]
    order = np.lexsort((np.arange(len(kind)), rank, versions))
    order = order[kind[order] >= 0]
    changes = raw.take(from_numpy(order))
    changes = changes.set_column(  # the action's kind becomes what its rows mean
        changes.schema.get_field_index("kind"), "kind",
        strings(_KINDS).take(from_numpy(kind[order]))).append_column(
        "previous_vector", previous_vector.take(from_numpy(order)))
    net = _net(versions[order], kind[order], changes, cdf_on[order])
    return changes, {version: (bool(cdf_on[order][first]), bool(net[index]))
                     for index, (version, first) in enumerate(zip(*_commit_starts(
                         versions[order])))}


def _is(raw: pa.Table, kind: str) -> np.ndarray:
    return to_numpy(pc.equal(raw.column("kind"), scalar(kind)))


def _commit_starts(versions: np.ndarray) -> tuple[list[int], np.ndarray]:
    """The versions of sorted ``versions`` and where each starts."""
    starts = np.flatnonzero(np.diff(versions, prepend=-1) != 0)
    return versions[starts].tolist(), starts


def _net(versions: np.ndarray, kind: np.ndarray, changes: pa.Table, cdf_on: np.ndarray
         ) -> np.ndarray:
    """Per commit (sorted ``versions``): whether CDF is off and it both deletes rows
    (deletes, vector changes) and inserts some (inserts, vectors that shrink or go: RESTORE)."""
    if not len(versions):
        return np.zeros(0, bool)
    old = changes.column("previous_vector").combine_chunks()
    new = changes.column("deletionVector").combine_chunks()
    old_rows = to_numpy(pc.fill_null(old.field("cardinality"), scalar(0)))
    new_rows = to_numpy(pc.fill_null(new.field("cardinality"), scalar(0)))
    restores = (kind == _VECTOR) & to_numpy(old.is_valid()) & (
        ~to_numpy(new.is_valid()) | (new_rows < old_rows))
    deletes = (kind == _DELETE) | (kind == _VECTOR)
    inserts = (kind == _INSERT) | restores
    starts = _commit_starts(versions)[1]
    return (~cdf_on[starts] & np.logical_or.reduceat(deletes, starts)
            & np.logical_or.reduceat(inserts, starts))


def _unchanged_merge(actions: list[dict[str, Any]]) -> bool:
    info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
    metrics = info.get("operationMetrics") or {}
    return info.get("operation") == "MERGE" and all(
        str(metrics.get(name)) == "0" for name in _MERGE_CHANGE_METRICS)
