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

``dataChange=false`` commits (OPTIMIZE, compaction) give nothing in both cases.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from airflow_provider_delta.core.actions import FileFactory, file_key, table_metadata
from airflow_provider_delta.core.changes import (
    _apply_table_changes, _check_range, _range_commits, split_batches,
)
from airflow_provider_delta.core.file_table import objects_file_table
from airflow_provider_delta.core.model import (
    DeletionVectorDescriptor, Plan, PlannedFile, TableMetadata,
)
from airflow_provider_delta.core.protocol import check_protocol
from airflow_provider_delta.core.replay import (
    earliest_recreatable, raise_unreadable, read_commits, replay,
)
from airflow_provider_delta.core.storage import TableLocation
from airflow_provider_delta.core.versions import CommitTimes, commit_entries, newest_version
from airflow_provider_delta.errors import VersionNotAvailableError

CHANGE_DATA_FEED_KEY = "delta.enableChangeDataFeed"
# Delta's CDF reader skips MERGE commits without cdc files whose metrics report none of these.
_MERGE_CHANGE_METRICS = ("numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsDeleted")

INSERT, DELETE = "insert", "delete"


@dataclass(frozen=True)
class ChangeFile:
    """A file of a commit and what its rows mean.

    ``kind`` is ``"cdc"`` (a change data file: its ``_change_type`` column says), ``"insert"``
    or ``"delete"`` (every row the file's deletion vector leaves), or ``"vector"``: the file
    re-added with a new deletion vector, whose rows in (new vector − ``previous_vector``) are
    deleted and in (``previous_vector`` − new vector) restored, i.e. inserted.
    """

    kind: str
    file: PlannedFile
    previous_vector: DeletionVectorDescriptor | None = None


@dataclass(frozen=True)
class CommitChanges:
    """The changes of one commit."""

    version: int
    timestamp_ms: int  # in-commit timestamp, else the commit file's time made increasing
    change_data_feed: bool  # the table had CDF on at this version
    net: bool  # a copy-on-write commit without CDF: its deletes and inserts are to be netted
    files: tuple[ChangeFile, ...]


@dataclass(frozen=True)
class ChangeFeedPlan:
    """The commits of ``start_version..end_version`` that change rows, in version order."""

    table_uri: str
    start_version: int
    end_version: int
    metadata: TableMetadata  # the schema of the feed
    commits: tuple[CommitChanges, ...]

    @property
    def files(self) -> tuple[ChangeFile, ...]:
        return tuple(f for commit in self.commits for f in commit.files)

    @property
    def total_bytes(self) -> int:
        return sum(f.file.size for f in self.files)

    def __len__(self) -> int:
        return len(self.files)

    def as_plan(self) -> Plan:
        """The feed's files as a :class:`Plan` (for what only needs paths, sizes, versions)."""
        files = objects_file_table([f.file for f in self.files], self.metadata)
        return Plan(self.table_uri, self.start_version, self.end_version, files, self.metadata)


def split_feed(feed: ChangeFeedPlan, *, max_files: int | None = None,
               max_bytes: int | None = None) -> list[ChangeFeedPlan]:
    """Consecutive sub-feeds covering the feed's range, cut as :func:`split_batches` cuts a plan
    (never inside a commit, limits soft)."""
    return [
        replace(feed, start_version=batch.start_version, end_version=batch.end_version,
                commits=tuple(c for c in feed.commits
                              if batch.start_version <= c.version <= batch.end_version))
        for batch in split_batches(feed.as_plan(), max_files=max_files, max_bytes=max_bytes)
    ]


def plan_change_feed(table_uri: str, start_version: int, end_version: int | None = None, *,
                     storage_options: dict[str, str] | None = None) -> ChangeFeedPlan:
    """The files carrying the row changes of versions ``start..end`` (inclusive).

    ``end_version`` None or past the latest version means the latest. A start after the latest
    version raises VersionNotAvailableError, a start after the end ValueError. The feed has the
    latest schema, or for column-mapped tables the end version's (Delta's CDF rule); every
    schema in force from the start up to that one must be an additive extension of the one
    before (else SchemaChangeError). Versions with CDF off are derived from their adds and
    removes (Delta refuses them; we can read them exactly).
    """
    _check_range(start_version, end_version)
    location = TableLocation(table_uri, storage_options)
    latest = newest_version(location, since=start_version)
    if start_version > latest:
        raise VersionNotAvailableError(
            table_uri, start_version, earliest_recreatable(location.list_log()), latest,
            hint=f"The change feed can start at version {latest} at the latest; wait for "
                 "newer commits or lower start_version.")
    end = latest if end_version is None else min(end_version, latest)
    walk = _LogWalk(location, start_version)
    found = [walk.changes_of(version, actions)
             for version, actions in _range_commits(location, walk.state, start_version, end)]
    if walk.metadata.column_mapping_mode == "none":
        walk.follow_schema(end + 1, latest)  # Delta reads such tables with the latest schema
    times = CommitTimes(location, commit_entries(location), dict(walk.metadata.configuration))
    commits = tuple(
        CommitChanges(version, times.micros(version) // 1000, cdf, net, files)
        for version, cdf, net, files in found if files
    )
    return ChangeFeedPlan(table_uri, start_version, end, walk.metadata, commits)


class _LogWalk:
    """Protocol and metadata through the commits of a range, checked as in ``plan_changes``."""

    def __init__(self, location: TableLocation, start_version: int):
        self.location = location
        self.start_version = start_version
        self.state = replay(location, start_version)
        check_protocol(location.table_uri, self.state.protocol, start_version)
        self.protocol = self.state.protocol
        self.metadata = table_metadata(self.state.metadata, self.protocol)
        self.factory = FileFactory(location, self.metadata)

    def changes_of(self, version: int, actions: list[dict[str, Any]] | None
                   ) -> tuple[int, bool, bool, tuple[ChangeFile, ...]]:
        """``(version, CDF on, net, files)`` of one commit of the range."""
        self._apply(version, actions)
        cdf_on = self.metadata.configuration.get(CHANGE_DATA_FEED_KEY, "false").lower() == "true"
        files, net = _commit_files(self.factory, version, actions, cdf_on)
        return version, cdf_on, net, files

    def follow_schema(self, first: int, last: int) -> None:
        """Apply (and check) the protocol and metadata changes of versions ``first..last``."""
        for version, actions in read_commits(self.location, range(first, last + 1)):
            self._apply(version, actions)

    def _apply(self, version: int, actions: list[dict[str, Any]] | None) -> None:
        if actions is None:
            raise_unreadable(self.location, version, version, from_checkpoint=True)
        if version > self.start_version:
            metadata = self.metadata
            self.protocol, self.metadata = _apply_table_changes(
                self.location, version, actions, self.protocol, self.metadata)
            if self.metadata is not metadata:
                self.factory = FileFactory(self.location, self.metadata)


def _commit_files(factory: FileFactory, version: int, actions: list[dict[str, Any]],
                  cdf_on: bool) -> tuple[tuple[ChangeFile, ...], bool]:
    """The change files of a commit and whether its deletes and inserts are to be netted."""
    cdc = [a["cdc"] for a in actions if "cdc" in a]
    if cdc:
        return tuple(ChangeFile("cdc", factory.planned_file(c, version)) for c in cdc), False
    adds = _data_changes(actions, "add")
    removes = _data_changes(actions, "remove")
    if cdf_on and _unchanged_merge(actions):
        return (), False
    vectors = [ChangeFile("vector", factory.planned_file(adds.pop(key), version),
                          factory.deletion_vector(removes.pop(key).get("deletionVector")))
               for key in [k for k in adds if k in removes]]
    files = ([ChangeFile(DELETE, factory.planned_file(r, version)) for r in removes.values()]
             + vectors
             + [ChangeFile(INSERT, factory.planned_file(a, version)) for a in adds.values()])
    deletes_rows = bool(removes or vectors)
    inserts_rows = bool(adds) or any(_may_restore(v) for v in vectors)
    return tuple(files), not cdf_on and deletes_rows and inserts_rows


def _data_changes(actions: list[dict[str, Any]], kind: str) -> dict[str, Mapping[str, Any]]:
    """The ``kind`` actions with dataChange=true, by decoded path."""
    return {file_key(a[kind])[0]: a[kind] for a in actions
            if kind in a and a[kind].get("dataChange", True)}


def _may_restore(change: ChangeFile) -> bool:
    """A vector that is dropped or shrinks unmasks rows (RESTORE): those are inserts."""
    old, new = change.previous_vector, change.file.deletion_vector
    return old is not None and (new is None or new.cardinality < old.cardinality)


def _unchanged_merge(actions: list[dict[str, Any]]) -> bool:
    info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
    metrics = info.get("operationMetrics") or {}
    return info.get("operation") == "MERGE" and all(
        str(metrics.get(name)) == "0" for name in _MERGE_CHANGE_METRICS)
