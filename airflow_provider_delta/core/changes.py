"""Planning an incremental read of a version range, by Delta's streaming-source rules."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_delta.core.actions import table_metadata
from airflow_provider_delta.core.arrow import scalar, to_numpy
from airflow_provider_delta.core.file_table import file_table
from airflow_provider_delta.core.model import Plan, TableMetadata
from airflow_provider_delta.core.protocol import check_additive, check_protocol
from airflow_provider_delta.core.replay import (
    FileActions, LogState, SplitCommit, earliest_recreatable, raise_unreadable,
    read_commits, replay,
)
from airflow_provider_delta.core.delta_log import TableLocation
from airflow_provider_delta.core.versions import check_version_number, newest_version
from airflow_provider_delta.errors import (
    DataChangeError, InvalidParameterError, LogGapError, VersionNotAvailableError,
)

log = logging.getLogger(__name__)

_PROGRESS_EVERY = 1000  # commits between progress log lines


def plan_changes(table_uri: str, start_version: int, end_version: int | None = None, *,
                 ignore_deletes: bool = False, ignore_changes: bool = False,
                 skip_change_commits: bool = False,
                 storage_options: dict[str, str] | None = None) -> Plan:
    """The AddFiles (dataChange=true) committed in versions ``start..end`` (both inclusive).

    ``end_version=None`` means the latest version. Files come in log order, each with the
    metadata in force at its version; ``Plan.metadata`` is the one in force at the end.
    Reads the commits of the range plus what rebuilds protocol and metadata at the start
    (the newest checkpoint at or below it and the commits after that).

    A commit holding a RemoveFile with dataChange=true raises DataChangeError unless the
    options allow it, as Delta's streaming source decides: ``skip_change_commits`` drops such
    commits entirely; ``ignore_changes`` lets them through (re-emitting rewritten files);
    ``ignore_deletes`` lets through only commits that remove without adding. Protocol and
    metadata actions in the range are checked: unsupported reader features raise
    UnsupportedFeatureError, non-additive schema changes SchemaChangeError, missing commits
    LogGapError.
    """
    _check_range(table_uri, start_version, end_version)
    location = TableLocation(table_uri, storage_options)
    state = _start_state(location, start_version)
    if end_version is None:
        end_version = newest_version(location, since=start_version)
    check_protocol(table_uri, state.protocol, start_version)
    rules = _ChangeRules(table_uri, ignore_deletes, ignore_changes, skip_change_commits)
    metadata = table_metadata(state.metadata, state.protocol)
    protocol = state.protocol
    # the range's removes are the rules' business; vectors as the protocols in force allow
    adds = FileActions(location, kinds=("add",), vectors=False)
    adds.note(metadata)
    changes = {start_version: metadata}
    for version, commit in _range_commits(location, state, start_version, end_version,
                                          split=("add",)):
        if commit is None:
            raise_unreadable(location, end_version, version, from_checkpoint=True)
        if version > start_version:
            protocol, metadata = _apply_table_changes(location, version, commit.actions,
                                                      protocol, metadata)
            if metadata is not changes[max(changes)]:
                changes[version] = metadata
                adds.note(metadata)
        if rules.keep_commit(version, commit.actions, lambda: _adds_data(commit.text)):
            adds.extend(version, commit.text)
        if (version - start_version + 1) % _PROGRESS_EVERY == 0:
            log.info("%s: read versions %d..%d", table_uri, start_version, version)
    raw = adds.table()
    raw = raw.filter(pc.and_(pc.equal(raw.column("kind"), scalar("add")),
                             raw.column("data_change")))
    log.info("%s: planned versions %d..%d: %d files", table_uri, start_version, end_version,
             len(raw))
    files = file_table(raw, location, changes, metadata)
    return Plan(table_uri=table_uri, start_version=start_version, end_version=end_version,
                file_table=files, metadata=metadata, metadata_changes=changes)


def _start_state(location: TableLocation, start: int) -> LogState:
    """Protocol and metadata in force at ``start``, with the actions of commit ``start``.

    When the commits below ``start`` are gone (log cleanup) but commit ``start`` is there,
    Delta still reads from it ("Can start from version 1 even if it's not recreatable",
    DeltaSourceSuite) with the schema of a later snapshot. Here protocol and metadata then
    come from commit ``start`` itself, else from the earliest later commit that holds them,
    else from the first version the log can rebuild after ``start``.
    """
    try:
        return replay(location, start, split_last=("add",))
    except VersionNotAvailableError as refused:
        if refused.latest is None or start > refused.latest:
            raise
        return _state_from_later_versions(location, start, refused)


def _state_from_later_versions(location: TableLocation, start: int,
                               refused: VersionNotAvailableError) -> LogState:
    rebuilt_at = earliest_recreatable(location.list_log(start))
    commits = dict(read_commits(location, range(start, (rebuilt_at or start) + 1)))
    if commits[start] is None:
        raise refused
    missing = [v for v, actions in commits.items() if actions is None]
    if missing:
        raise LogGapError(location.table_uri, missing)
    state = LogState(start, last_commit=commits[start])
    state.apply(commits[start], start)
    later_actions = [a for v in sorted(commits) if v > start for a in commits[v]]
    state.protocol = state.protocol or _first(later_actions, "protocol")
    state.metadata = state.metadata or _first(later_actions, "metaData")
    if (state.protocol is None or state.metadata is None) and rebuilt_at is not None:
        rebuilt = replay(location, rebuilt_at)
        state.protocol = state.protocol or rebuilt.protocol
        state.metadata = state.metadata or rebuilt.metadata
    if state.protocol is None or state.metadata is None:
        raise VersionNotAvailableError(
            location.table_uri, start, refused.earliest, refused.latest,
            hint=f"The commits below it are gone, and neither commit {start} nor a checkpoint "
                 "after it tells its protocol and schema; read a version a checkpoint covers.",
        )
    log.info("%s: the commits below %d are gone; reading from commit %d with the protocol and "
             "metadata of the earliest later version that has them", location.table_uri, start,
             start)
    return state


def _first(actions: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    return next((a[name] for a in actions if name in a), None)


def _range_commits(location: TableLocation, state: LogState, start: int, end: int, *,
                   split: tuple[str, ...] = ()
                   ) -> Iterator[tuple[int, list[dict[str, Any]] | SplitCommit | None]]:
    """The range's commits in order (``split``: see :func:`read_commit`); the replay to
    ``start`` may have read the first already."""
    if state.last_commit is not None:
        first = state.last_commit
        if split and not isinstance(first, SplitCommit):
            first = SplitCommit.of_actions(first, split)
        yield start, first
        start += 1
    yield from read_commits(location, range(start, end + 1), split=split)


def _adds_data(text: bytes) -> bool:
    """Whether a commit's text adds a file with dataChange=true (a damaged line counts: the
    plan names it)."""
    for line in text.splitlines():
        try:
            action = json.loads(line) if line.strip() else {}
            if "add" in action and action["add"].get("dataChange", True):
                return True
        except (ValueError, TypeError, AttributeError):
            return True
    return False


def split_batches(plan: Plan, *, max_files: int | None = None,
                  max_bytes: int | None = None) -> list[Plan]:
    """Consecutive sub-plans covering ``plan.start_version..plan.end_version`` with no holes.

    Delta's streaming source admits a file while the files taken before it are fewer than
    ``max_files`` and smaller than ``max_bytes`` together, so the file that crosses
    ``max_bytes`` is still taken (maxFilesPerTrigger / maxBytesPerTrigger). Here a batch never
    splits a commit: a commit joins the batch when Delta would admit every one of its files,
    and a batch holds at least one commit. Versions without files join the batch being
    built. Without limits the plan is one batch.

    Works on the plan's file table (in version order): per batch, the furthest commit whose
    last file is still admitted is found by binary search over cumulative counts and sizes.
    """
    for name, limit in (("max_files", max_files), ("max_bytes", max_bytes)):
        if limit is not None and limit < 1:
            raise InvalidParameterError(None, name, limit, "is below 1",
                                        "give 1 or more, or None for no limit", plan.table_uri)
    versions = to_numpy(plan.file_table.column("version"))
    # per commit with files: its version, its first file and its last file
    firsts = np.flatnonzero(np.diff(versions, prepend=-1) != 0)
    lasts = np.append(firsts[1:], len(versions)) - 1
    bytes_before = np.concatenate(
        [[0], np.cumsum(to_numpy(plan.file_table.column("size")))])
    cuts = []  # index of the first commit of every batch after the first
    commit = 0
    while commit < len(firsts):
        start_file = firsts[commit]
        admitted = len(lasts)
        if max_files is not None:  # files before the commit's last file < max_files
            admitted = min(admitted, np.searchsorted(lasts - start_file, max_files))
        if max_bytes is not None:  # bytes before the commit's last file < max_bytes
            before_last = bytes_before[lasts] - bytes_before[start_file]
            admitted = min(admitted, np.searchsorted(before_last, max_bytes))
        commit = max(admitted, commit + 1)
        if commit < len(firsts):
            cuts.append(commit)
    starts = [plan.start_version] + [int(versions[firsts[c]]) for c in cuts]
    ends = [s - 1 for s in starts[1:]] + [plan.end_version]
    bounds = [0] + [int(firsts[c]) for c in cuts] + [len(versions)]
    return [_sub_plan(plan, start, end, plan.file_table.slice(low, high - low))
            for start, end, low, high in zip(starts, ends, bounds, bounds[1:])]


def _sub_plan(plan: Plan, start: int, end: int, files: pa.Table) -> Plan:
    timestamps = {v: t for v, t in plan.commit_timestamps.items() if start <= v <= end}
    changes = {v: m for v, m in plan.metadata_changes.items() if start <= v <= end}
    changes.setdefault(start, plan.metadata_at(start))
    return replace(plan, start_version=start, end_version=end, file_table=files,
                   metadata=plan.metadata_at(end), commit_timestamps=timestamps,
                   metadata_changes=changes)


def _check_range(table_uri: str, start_version: int, end_version: int | None) -> None:
    check_version_number(table_uri, "start_version", start_version)
    if end_version is not None and (not isinstance(end_version, int) or end_version < start_version):
        raise InvalidParameterError(
            None, "end_version", end_version, f"is before start_version={start_version}",
            "end_version must be >= start_version, or None for the latest version", table_uri)


def _apply_table_changes(location: TableLocation, version: int, actions: list[dict[str, Any]],
                         protocol: Mapping[str, Any], metadata: TableMetadata
                         ) -> tuple[Mapping[str, Any], TableMetadata]:
    """Check and apply a commit's protocol and metaData actions."""
    new_protocol = next((a["protocol"] for a in actions if "protocol" in a), None)
    new_meta = next((a["metaData"] for a in actions if "metaData" in a), None)
    if new_protocol is not None:
        check_protocol(location.table_uri, new_protocol, version)
        protocol = new_protocol
    if new_meta is None and new_protocol is None:
        return protocol, metadata
    if new_meta is None:
        updated = replace(metadata, min_reader_version=int(protocol.get("minReaderVersion", 1)),
                          reader_features=tuple(protocol.get("readerFeatures") or ()))
    else:
        updated = table_metadata(new_meta, protocol)
        check_additive(location.table_uri, version, metadata, updated)
    return protocol, updated


class _ChangeRules:
    """Delta's decision for a commit holding RemoveFile(dataChange=true) actions."""

    def __init__(self, table_uri: str, ignore_deletes: bool, ignore_changes: bool,
                 skip_change_commits: bool):
        self.table_uri = table_uri
        self.skip_change_commits = skip_change_commits
        self.allow_changes = ignore_changes or skip_change_commits
        self.allow_deletes = self.allow_changes or ignore_deletes

    def keep_commit(self, version: int, actions: list[dict[str, Any]],
                    adds_data: Callable[[], bool]) -> bool:
        """False if the commit is skipped; raises DataChangeError if it is not allowed.
        ``adds_data``: whether it adds files with dataChange=true (asked only when it
        removes some)."""
        removed = next((a["remove"]["path"] for a in actions
                        if "remove" in a and a["remove"].get("dataChange", True)), None)
        if removed is None:
            return True
        if self.skip_change_commits:
            return False
        adds = adds_data()
        if adds and not self.allow_changes:
            raise DataChangeError(self.table_uri, version, removed,
                                  "ignore_changes=True (re-read rewritten files) or "
                                  "skip_change_commits=True (drop such commits)")
        if not adds and not self.allow_deletes:
            raise DataChangeError(self.table_uri, version, removed,
                                  "ignore_deletes=True, ignore_changes=True or "
                                  "skip_change_commits=True")
        return True
