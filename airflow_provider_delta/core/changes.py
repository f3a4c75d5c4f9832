"""Planning an incremental read of a version range, by Delta's streaming-source rules."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

from airflow_provider_delta.core.actions import FileFactory, table_metadata
from airflow_provider_delta.core.model import Plan, PlannedFile, TableMetadata
from airflow_provider_delta.core.protocol import check_additive, check_protocol
from airflow_provider_delta.core.replay import (
    LogState, earliest_recreatable, raise_unreadable, read_commits, replay,
)
from airflow_provider_delta.core.storage import TableLocation
from airflow_provider_delta.core.versions import newest_version
from airflow_provider_delta.errors import DataChangeError, LogGapError, VersionNotAvailableError

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
    _check_range(start_version, end_version)
    location = TableLocation(table_uri, storage_options)
    state = _start_state(location, start_version)
    if end_version is None:
        end_version = newest_version(location, since=start_version)
    check_protocol(table_uri, state.protocol, start_version)
    rules = _ChangeRules(table_uri, ignore_deletes, ignore_changes, skip_change_commits)
    metadata = table_metadata(state.metadata, state.protocol)
    factory = FileFactory(location, metadata)
    protocol = state.protocol
    files: list[PlannedFile] = []
    changes = {start_version: metadata}
    for version, actions in _range_commits(location, state, start_version, end_version):
        if actions is None:
            raise_unreadable(location, end_version, version, from_checkpoint=True)
        if version > start_version:
            protocol, metadata, factory = _apply_table_changes(
                location, version, actions, protocol, metadata, factory)
            if metadata is not changes[max(changes)]:
                changes[version] = metadata
        if rules.keep_commit(version, actions):
            files.extend(factory.planned_file(a["add"], version) for a in actions
                         if "add" in a and a["add"].get("dataChange", True))
        if (version - start_version + 1) % _PROGRESS_EVERY == 0:
            log.info("%s: planned versions %d..%d, %d files so far", table_uri, start_version,
                     version, len(files))
    log.info("%s: planned versions %d..%d: %d files", table_uri, start_version, end_version,
             len(files))
    return Plan(table_uri=table_uri, start_version=start_version, end_version=end_version,
                files=tuple(files), metadata=metadata, metadata_changes=changes)


def _start_state(location: TableLocation, start: int) -> LogState:
    """Protocol and metadata in force at ``start``, with the actions of commit ``start``.

    When the commits below ``start`` are gone (log cleanup) but commit ``start`` is there,
    Delta still reads from it ("Can start from version 1 even if it's not recreatable",
    DeltaSourceSuite) with the schema of a later snapshot. Here protocol and metadata then
    come from commit ``start`` itself, else from the earliest later commit that holds them,
    else from the first version the log can rebuild after ``start``.
    """
    try:
        return replay(location, start)
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
    state.apply(commits[start])
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


def _range_commits(location: TableLocation, state: LogState, start: int, end: int
                   ) -> Iterator[tuple[int, list[dict[str, Any]] | None]]:
    """The range's commits in order; the replay to ``start`` may have read the first already."""
    if state.last_commit is not None:
        yield start, state.last_commit
        start += 1
    yield from read_commits(location, range(start, end + 1))


def split_batches(plan: Plan, *, max_files: int | None = None,
                  max_bytes: int | None = None) -> list[Plan]:
    """Consecutive sub-plans covering ``plan.start_version..plan.end_version`` with no holes.

    Delta's streaming source admits a file while the files taken before it are fewer than
    ``max_files`` and smaller than ``max_bytes`` together, so the file that crosses
    ``max_bytes`` is still taken (maxFilesPerTrigger / maxBytesPerTrigger). Here a batch never
    splits a commit: a commit joins the batch when Delta would admit every one of its files,
    and a batch holds at least one commit. Versions without files join the batch being
    built. Without limits the plan is one batch.
    """
    for name, limit in (("max_files", max_files), ("max_bytes", max_bytes)):
        if limit is not None and limit < 1:
            raise ValueError(f"{name} must be at least 1, got {limit}")
    by_version: dict[int, list[PlannedFile]] = {}
    for planned in plan.files:
        by_version.setdefault(planned.version, []).append(planned)
    batches: list[Plan] = []
    batch = _Batch(plan.start_version)
    for version in range(plan.start_version, plan.end_version + 1):
        commit = by_version.get(version, [])
        if commit and batch.files and not batch.admits(commit, max_files, max_bytes):
            batches.append(_sub_plan(plan, batch.start, version - 1, batch.files))
            batch = _Batch(version)
        batch.take(commit)
    batches.append(_sub_plan(plan, batch.start, plan.end_version, batch.files))
    return batches


class _Batch:
    """The files of a batch being built, with their count and total size."""

    def __init__(self, start: int):
        self.start = start
        self.files: list[PlannedFile] = []
        self.size = 0

    def admits(self, commit: list[PlannedFile], max_files: int | None,
               max_bytes: int | None) -> bool:
        """Whether Delta's admission would take every file of ``commit`` after this batch's
        files: the limits are checked before each file, so only the last file may cross them."""
        files_before_last = len(self.files) + len(commit) - 1
        if max_files is not None and files_before_last >= max_files:
            return False
        bytes_before_last = self.size + sum(f.size for f in commit[:-1])
        return max_bytes is None or bytes_before_last < max_bytes

    def take(self, commit: list[PlannedFile]) -> None:
        self.files.extend(commit)
        self.size += sum(f.size for f in commit)


def _sub_plan(plan: Plan, start: int, end: int, files: list[PlannedFile]) -> Plan:
    timestamps = {v: t for v, t in plan.commit_timestamps.items() if start <= v <= end}
    changes = {v: m for v, m in plan.metadata_changes.items() if start <= v <= end}
    at_start = _metadata_at(plan, start)
    changes.setdefault(start, at_start)
    return replace(plan, start_version=start, end_version=end, files=tuple(files),
                   metadata=_metadata_at(plan, end), commit_timestamps=timestamps,
                   metadata_changes=changes)


def _metadata_at(plan: Plan, version: int) -> TableMetadata:
    """Metadata in force at ``version``, from the plan's metadata changes."""
    earlier = [v for v in plan.metadata_changes if v <= version]
    return plan.metadata_changes[max(earlier)] if earlier else plan.metadata


def _check_range(start_version: int, end_version: int | None) -> None:
    if not isinstance(start_version, int) or start_version < 0:
        raise ValueError(f"start_version must be a version number >= 0, got {start_version!r}")
    if end_version is not None and (not isinstance(end_version, int) or end_version < start_version):
        raise ValueError(
            f"end_version must be >= start_version ({start_version}), got {end_version!r}")


def _apply_table_changes(location: TableLocation, version: int, actions: list[dict[str, Any]],
                         protocol: Mapping[str, Any], metadata: TableMetadata,
                         factory: FileFactory) -> tuple[Mapping[str, Any], TableMetadata, FileFactory]:
    """Check and apply a commit's protocol and metaData actions."""
    new_protocol = next((a["protocol"] for a in actions if "protocol" in a), None)
    new_meta = next((a["metaData"] for a in actions if "metaData" in a), None)
    if new_protocol is not None:
        check_protocol(location.table_uri, new_protocol, version)
        protocol = new_protocol
    if new_meta is None and new_protocol is None:
        return protocol, metadata, factory
    if new_meta is None:
        updated = replace(metadata, min_reader_version=int(protocol.get("minReaderVersion", 1)),
                          reader_features=tuple(protocol.get("readerFeatures") or ()))
    else:
        updated = table_metadata(new_meta, protocol)
        check_additive(location.table_uri, version, metadata, updated)
    return protocol, updated, FileFactory(location, updated)


class _ChangeRules:
    """Delta's decision for a commit holding RemoveFile(dataChange=true) actions."""

    def __init__(self, table_uri: str, ignore_deletes: bool, ignore_changes: bool,
                 skip_change_commits: bool):
        self.table_uri = table_uri
        self.skip_change_commits = skip_change_commits
        self.allow_changes = ignore_changes or skip_change_commits
        self.allow_deletes = self.allow_changes or ignore_deletes

    def keep_commit(self, version: int, actions: list[dict[str, Any]]) -> bool:
        """False if the commit is skipped; raises DataChangeError if it is not allowed."""
        removed = next((a["remove"]["path"] for a in actions
                        if "remove" in a and a["remove"].get("dataChange", True)), None)
        if removed is None:
            return True
        if self.skip_change_commits:
            return False
        adds = any("add" in a and a["add"].get("dataChange", True) for a in actions)
        if adds and not self.allow_changes:
            raise DataChangeError(self.table_uri, version, removed,
                                  "ignore_changes=True (re-read rewritten files) or "
                                  "skip_change_commits=True (drop such commits)")
        if not adds and not self.allow_deletes:
            raise DataChangeError(self.table_uri, version, removed,
                                  "ignore_deletes=True, ignore_changes=True or "
                                  "skip_change_commits=True")
        return True
