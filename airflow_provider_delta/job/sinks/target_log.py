"""What this provider records in a Delta target, and the rules that read it.

Each batch's commit carries ``txn`` actions, which every checkpoint carries, so that what the
rules need stays in the target's snapshot whatever its history and log cleanup:

* ``<appId>`` = the batch's last source version, as Delta's idempotent writes do;
* per run (one appId's commits from one source that follow each other without a hole),
  records named ``airflow_provider_delta/<JSON>``: the run's last source version, the target
  version of its newest commit, its number of commits, and the source starts of its newest
  ``REMEMBERED_STARTS`` commits (a ring);
* ``airflow_provider_delta/layout`` = 2: the target holds these records.

Every record carries ``lastUpdated`` (the commit's time), and each commit writes all of its
appId's records again, so that they outlive a ``delta.setTransactionRetentionDuration`` as long
as the job commits within it. Records older than that retention are forgotten, as Delta's
snapshot forgets them (it drops them at its next checkpoint); while the log still shows them,
a write of a source range they cover is refused (:class:`SinkRecordsExpiredError`) rather than
written a second time. Once Delta's checkpoint has dropped them, nothing tells.

The commitInfo keys (source range, appId, source) are still written, for people reading the
history. Targets of older versions hold only those: they are read once, from the history, and
the first commit carries them forward as records. Reading the records, with the protocol and
metadata, costs one read of those columns of the newest checkpoint plus the commits after it
(:mod:`~airflow_provider_delta.core.transactions`), then only the commits since the last read.

Every read of what the target records happens here, behind :class:`TargetLog`; the Delta
sinks use it as a helper and hold no rule of their own about what a target records.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from deltalake import DeltaTable, Schema
from deltalake.exceptions import TableNotFoundError as DeltaTableNotFound
from deltalake.transaction import CommitProperties, PostCommitHookProperties, Transaction

from airflow_provider_delta.core.commit_times import in_commit_timestamp
from airflow_provider_delta.core.delta_log import TableLocation
from airflow_provider_delta.core.replay import read_commits, replay
from airflow_provider_delta.core.transactions import (
    TXN_RETENTION_KEY, SnapshotRecords, apply_commits, live_txns, snapshot_records,
)
from airflow_provider_delta.core.versions import newest_version, probe_local_commits
from airflow_provider_delta.errors import (
    DeltaProviderError, SinkRangeOverlapError, SinkRecordsExpiredError, SinkWriterOverlapError,
    TableNotFoundError,
)
from airflow_provider_delta.job.spec import SinkSpec
from airflow_provider_delta.storage import deltalake_uri, to_uri

SOURCE_VERSIONS_KEY = "airflow_provider_delta.source_versions"
APP_ID_KEY = "airflow_provider_delta.app_id"
SOURCE_KEY = "airflow_provider_delta.source"
RECORD_PREFIX = "airflow_provider_delta/"
LAYOUT_APP_ID = f"{RECORD_PREFIX}layout"
LAYOUT = 2
# Starts of a run's newest commits kept exactly: a retry resumes at one of them (the watermark
# lags by the batches of failed attempts). Further back, any version counts as a start.
REMEMBERED_STARTS = 32
# Commit attempts of one batch against concurrent writers (each rebuilt on the newer snapshot).
COMMIT_ATTEMPTS = 20


def open_target(uri: str, storage_options: dict[str, str] | None) -> DeltaTable | None:
    """The target at its latest version; None while it is no Delta table yet."""
    try:
        return DeltaTable(deltalake_uri(uri), storage_options=storage_options)
    except DeltaTableNotFound:
        return None


def require_app_id(spec: SinkSpec) -> None:
    """A Delta sink records its writes under an appId."""
    if not spec.app_id:
        raise ValueError(f"{spec.path}: a delta sink needs an app_id for its txn actions")


@dataclass
class Run:
    """One appId's commits from one source covering ``first..last`` without a hole."""

    app_id: str
    source: str | None
    first: int
    last: int
    target_version: int  # of its newest commit
    commits: int = 1
    starts: dict[int, int] = field(default_factory=dict)  # ring slot -> a commit's first

    @property
    def key(self) -> tuple[str, str | None, int]:
        return self.app_id, self.source, self.first

    def extended(self, first: int, last: int, target_version: int) -> Run:
        """This run with one more commit ``first..last`` (``first == self.last + 1``)."""
        starts = {**self.starts, self.commits % REMEMBERED_STARTS: first}
        return Run(self.app_id, self.source, self.first, last, target_version,
                   self.commits + 1, starts)

    def segments(self) -> tuple[list[tuple[int, int]], tuple[int, int] | None]:
        """The source ranges of its commits, as far as remembered, and the older part of it
        whose commit boundaries are forgotten (None: none)."""
        known = sorted(s for s in self.starts.values() if self.first < s <= self.last)
        forgotten = None
        if self.commits - 1 > REMEMBERED_STARTS:
            forgotten = (self.first, known[0] - 1)
        else:
            known = [self.first, *known]
        ends = [s - 1 for s in known[1:]] + [self.last]
        return list(zip(known, ends)), forgotten

    def records(self, updated: int) -> list[Transaction]:
        """The txn actions that hold this run in the snapshot, last updated at ``updated``."""
        name = [self.app_id, self.source, self.first]
        slots = [Transaction(_record_id("start", *name, slot), start, updated)
                 for slot, start in self.starts.items()]
        return [Transaction(_record_id("run", *name), self.last, updated),
                Transaction(_record_id("at", *name), self.target_version, updated),
                Transaction(_record_id("commits", *name), self.commits, updated), *slots]


def _record_id(kind: str, *fields: object) -> str:
    return RECORD_PREFIX + json.dumps([kind, *fields], separators=(",", ":"))


def runs_from_records(txns: dict[str, int]) -> dict[tuple[str, str | None, int], Run]:
    """The runs the snapshot's txn records hold."""
    parsed = [(json.loads(app_id[len(RECORD_PREFIX):]), version) for app_id, version
              in txns.items() if app_id.startswith(RECORD_PREFIX + "[")]
    runs = {tuple(name): Run(*name, last=version, target_version=-1)
            for (kind, *name), version in parsed if kind == "run"}
    for (kind, app_id, source, first, *slot), version in parsed:
        run = runs.get((app_id, source, first))
        if run is None:
            continue
        if kind == "at":
            run.target_version = version
        elif kind == "commits":
            run.commits = version
        elif kind == "start":
            run.starts[slot[0]] = version
    return runs


@dataclass(frozen=True)
class ProviderCommit:
    """A commit this provider made to the target: who (appId), from where, which versions."""

    app_id: str | None
    source: str | None  # None: committed before sources were recorded
    first: int
    last: int
    target_version: int


def runs_from_commits(commits: list[ProviderCommit]) -> dict[tuple[str, str | None, int], Run]:
    """Fold commits (in target version order) into runs, as the records would have."""
    runs: dict[tuple[str, str | None, int], Run] = {}
    for commit in sorted(commits, key=lambda c: c.target_version):
        if commit.app_id is not None:
            _add_commit(runs, commit.app_id, commit.source, commit.first, commit.last,
                        commit.target_version)
    return runs


def _add_commit(runs: dict[tuple[str, str | None, int], Run], app_id: str, source: str | None,
                first: int, last: int, target_version: int) -> Run:
    """Record a commit in ``runs``: it extends the run it follows, else starts one."""
    before = next((r for r in runs.values() if r.app_id == app_id and r.source == source
                   and r.last == first - 1), None)
    run = (Run(app_id, source, first, last, target_version) if before is None
           else before.extended(first, last, target_version))
    runs[run.key] = run
    return run


@dataclass(frozen=True)
class _Metadata:
    id: str
    partition_columns: list[str]


class SnapshotView:
    """The target's schema, partitioning, id and protocol as our own log reader reads them:
    what the schema checks and a commit of our own ask of a ``DeltaTable``, without opening
    deltalake's handle."""

    def __init__(self, metadata: dict, protocol: dict):
        self._metadata = metadata
        self.protocol = protocol

    @property
    def raw_metadata(self) -> dict:
        return self._metadata

    def schema(self) -> Schema:
        return Schema.from_json(self._metadata["schemaString"])

    def metadata(self) -> _Metadata:
        return _Metadata(self._metadata["id"], list(self._metadata.get("partitionColumns") or []))


class TargetLog:
    """What one job (``spec.app_id``) and other writers recorded in the target.

    :meth:`latest` reads it at the target's newest version with our own log reader, then only
    the commits since the version read last, so one instance per job keeps each look flat.
    deltalake's handle (:attr:`table`), whose opening costs in proportion to the target's
    live files, is opened only when a commit or a schema check needs it.
    """

    def __init__(self, spec: SinkSpec):
        self.spec = spec
        self.uri = to_uri(spec.path)
        self._location = TableLocation(self.uri, spec.storage_options)
        self._table: DeltaTable | None = None
        self._records = SnapshotRecords()  # txns, protocol and metadata at ``version``
        self.version: int | None = None  # the version read; None: no table (yet)
        self._history: list[ProviderCommit] | None = None  # of a target of older versions
        self._view: tuple[int, SnapshotView] | None = None
        self._opening: Future[DeltaTable | None] | None = None

    @classmethod
    def open(cls, spec: SinkSpec) -> TargetLog:
        """The log of the target at its latest version."""
        return cls(spec).latest()

    def latest(self) -> TargetLog:
        """This log at the target's newest version (and deltalake's handle, if open)."""
        version = self._newest_version()
        if version is not None and self._table is not None:
            if self._table.version() != version:
                self._table.update_incremental()
            version = self._table.version()
        self._read_to(version)
        return self

    def current(self) -> DeltaTable | None:
        """deltalake's handle at the version read (the newest, if nothing was read yet):
        checks of the target's id and schema need no newer version."""
        if self.version is None:
            self.latest()
        return self.table

    @property
    def table(self) -> DeltaTable | None:
        """deltalake's handle on the target at :attr:`version` (opened on first use, which
        brings this log to the version it opened); None while there is no table."""
        if self._table is None and self.version is not None:
            opening, self._opening = self._opening, None
            self._table = (opening.result() if opening is not None
                           else open_target(self.uri, self.spec.storage_options))
            if self._table is not None and self._table.version() < self.version:
                self._table.update_incremental()  # opened ahead, on a thread
            self._read_to(None if self._table is None else self._table.version())
        return self._table

    def view(self) -> SnapshotView | None:
        """The target's schema, partitioning and id at the version read, without deltalake's
        handle; None while there is no table."""
        if self.version is None:
            return None
        if self._records.metadata is None or self._records.protocol is None:
            replay(self._location, self.version)  # names what the log lacks
        if self._view is None or self._view[0] != self.version:
            self._view = self.version, SnapshotView(self._records.metadata,
                                                    self._records.protocol)
        return self._view[1]

    @property
    def location(self) -> TableLocation:
        return self._location

    @property
    def table_id(self) -> str | None:
        """The target's table id (``metaData.id``), read without deltalake's handle."""
        view = self.view()
        return None if view is None else view.metadata().id

    def prefetch(self) -> None:
        """Start opening deltalake's handle on a thread (its cost grows with the target's
        live files), so that it is ready when the commit needs it; a no-op once opened."""
        if self._table is None and self._opening is None and self.version is not None:
            self._opening = ThreadPoolExecutor(1).submit(
                open_target, self.uri, self.spec.storage_options)

    @property
    def next_version(self) -> int:
        """The target version a commit on this snapshot gets (deltalake retries nothing)."""
        return 0 if self.version is None else self.version + 1

    def _newest_version(self) -> int | None:
        """The target's newest version, from the version read last (or its newest
        checkpoint); None if there is no Delta table."""
        since = self.version
        if since is None:
            hint = self._location.last_checkpoint_hint()
            since = int(hint["version"]) if hint else None
        if since is not None and self._location.is_local and self._location.commit_exists(since):
            return probe_local_commits(self._location, since)  # no listing of the folder
        try:
            return newest_version(self._location, since)
        except TableNotFoundError:
            return None
        except DeltaProviderError:  # e.g. the hint's commit cleaned up: let deltalake look
            table = open_target(self.uri, self.spec.storage_options)
            return None if table is None else table.version()

    def _read_to(self, version: int | None) -> None:
        """Read the records at ``version``: from the last read when that is older."""
        if version is None:
            self._table, self._records, self.version = None, SnapshotRecords(), None
            self._history = None
            return
        if version == self.version:
            return
        if not self._read_since(version):
            self._records = snapshot_records(self._location, version)
        if not self._carries_records:
            self._history = None  # read again, from the history, when asked
        self.version = version

    def _read_since(self, version: int) -> bool:
        """Apply the commits since the last read; False if there is no such read to extend
        (or its next commits are gone: cleaned up meanwhile)."""
        if self.version is None or self.version > version:
            return False
        try:
            apply_commits(self._records, self._location, range(self.version + 1, version + 1))
        except DeltaProviderError:
            return False
        return True

    @property
    def _carries_records(self) -> bool:
        """Whether the target holds records (expired ones too: the layout says how to read
        the target, not what it remembers)."""
        return self._records.txns.get(LAYOUT_APP_ID, 0) >= LAYOUT

    def _txns(self) -> tuple[dict[str, int], dict[str, int]]:
        """The txns Delta's snapshot holds now, and the expired ones the log still shows."""
        return live_txns(self._records, int(time.time() * 1000))

    @property
    def records(self) -> SnapshotRecords:
        """The snapshot's txns, protocol, metadata, domain metadata and newest commitInfo."""
        return self._records

    def _runs(self) -> dict[tuple[str, str | None, int], Run]:
        if self.version is None:
            return {}
        if self._carries_records:
            return runs_from_records(self._txns()[0])
        if self._history is None:  # a target of older versions: its history, read once
            self._history = _history_commits(self.table)
        return runs_from_commits(self._history)

    def commit_properties(self, start_version: int, end_version: int) -> CommitProperties:
        """What a batch's commit records (:meth:`commit_records`), for deltalake.

        No retries inside deltalake: the records name the target version the commit gets,
        so a commit that loses a race is rebuilt on the newer snapshot by the sink.
        """
        return CommitProperties(
            max_commit_retries=0,
            app_transactions=self.commit_records(start_version, end_version,
                                                 int(time.time() * 1000)),
            custom_metadata=self.commit_metadata(start_version, end_version),
        )

    def commit_records(self, start_version: int, end_version: int,
                       updated: int) -> list[Transaction]:
        """The txn actions of a batch's commit on this snapshot, each last updated at
        ``updated`` (the commit's time): the txn (appId, last source version), the run it
        extends, this appId's other runs (renewed, so that a retention keeps them), on a
        target of older versions every run, and the layout."""
        target_version = self.next_version
        runs = self._runs()
        carried = [r for r in runs.values()
                   if not self._carries_records or r.app_id == self.spec.app_id]
        run = _add_commit(runs, self.spec.app_id, self.spec.source, start_version, end_version,
                          target_version)
        records = [r for carry in carried if carry.key != run.key
                   for r in carry.records(updated)]
        return [Transaction(self.spec.app_id, end_version, updated), *run.records(updated),
                *records, Transaction(LAYOUT_APP_ID, LAYOUT, updated)]

    def commit_metadata(self, start_version: int, end_version: int) -> dict[str, str]:
        """The commitInfo keys of a batch's commit: its source range, the appId, the source
        (Delta's own writer, sink="delta-spark", carries them as JSON in ``userMetadata``)."""
        return {SOURCE_VERSIONS_KEY: f"{start_version}..{end_version}",
                APP_ID_KEY: self.spec.app_id,
                **({SOURCE_KEY: self.spec.source} if self.spec.source else {})}

    def own_commit(self, start_version: int, end_version: int) -> tuple[int | None, int | None]:
        """The target version and row count of this app's newest commit of ``start..end``."""
        table = self.latest().table
        for info in table.history() if table is not None else ():
            recorded = _recorded_keys(info)
            if (recorded.get(APP_ID_KEY) == self.spec.app_id and recorded.get(
                    SOURCE_VERSIONS_KEY) == f"{start_version}..{end_version}"):
                rows = (info.get("operationMetrics") or {}).get("numOutputRows")
                return info["version"], None if rows is None else int(rows)
        return None, None

    def post_commit_hooks(self) -> PostCommitHookProperties:
        """deltalake's hooks for a commit on this snapshot: its checkpoint when due, and log
        cleanup only with a checkpoint (as Delta does), since deltalake's cleanup lists the
        whole ``_delta_log`` on every commit otherwise."""
        interval = 100
        if self._table is not None:
            interval = int(self._table.metadata().configuration.get(
                "delta.checkpointInterval", interval))
        checkpoints = (self.next_version + 1) % interval == 0  # deltalake's rule
        return PostCommitHookProperties(create_checkpoint=True,
                                        cleanup_expired_logs=None if checkpoints else False)

    def committed_version(self) -> int | None:
        """This app's txn version, else (unmapped tasks) the one of the appId older versions of
        this provider used for the same DAG, task and target."""
        if self.version is None:
            return None
        txns = self._txns()[0]
        version = txns.get(self.spec.app_id)
        if version is None and self.spec.legacy_app_id:
            return txns.get(self.spec.legacy_app_id)
        return version

    def _own(self) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """This app's committed source ranges, and the ranges whose boundaries are forgotten."""
        exact, loose = [], []
        for run in self._runs().values():
            if run.app_id == self.spec.app_id:
                segments, forgotten = run.segments()
                exact.extend(segments)
                loose.extend([forgotten] if forgotten else [])
        return exact, loose

    def held_through(self, first: int | None) -> int | None:
        """The end of this app's commits that tile the source versions from ``first`` (None:
        from its first commit) without a hole: a txn alone cannot tell whether a backfill of
        this task left versions before it out."""
        if self.version is None:
            return None
        exact, loose = self._own()
        own = exact + loose
        if not own:  # written by older versions, or the commits' history was cleaned up
            return self.committed_version()
        return contiguous_end(own, min(own)[0] if first is None else first)

    def first_unwritten(self, start: int, end: int | None) -> int:
        """The first source version of ``start..end`` to write: after this app's commits that
        tile ``start..``; any other overlap, or another writer's commits of the same source in
        what is left, is refused.

        A target of older versions whose history no longer holds this app's commits (cleaned
        up before it was carried forward) resumes after the txn version.
        """
        if self.version is None:
            return start
        exact, loose = self._own()
        if exact or loose:
            resume = resume_after(self.uri, start, end, exact, loose)
        else:
            txn = self.committed_version()
            resume = start if txn is None else max(start, txn + 1)
        if end is None or resume <= end:
            self._refuse_expired_records(resume, end)
            self._refuse_other_writers(resume, end)
        return resume

    def _refuse_expired_records(self, start: int, end: int | None) -> None:
        """Records of this app, or of another of the same source, that the target's
        transaction retention let expire but its log still shows: the range they cover was
        loaded, though Delta's snapshot no longer proves it."""
        expired = self._txns()[1]
        if not expired or not self._carries_records:
            return
        last = end if end is not None else float("inf")
        covered = sorted((r.first, r.last, r.app_id, r.target_version)
                         for r in runs_from_records(expired).values()
                         if (r.app_id == self.spec.app_id or (
                             self.spec.source and r.source == self.spec.source))
                         and r.last >= start and r.first <= last)
        if covered:
            retention = self._records.configuration().get(TXN_RETENTION_KEY)
            raise SinkRecordsExpiredError(self.uri, start, end, covered, retention)

    def newest_in_commit_timestamp(self) -> int | None:
        """The ``inCommitTimestamp`` of the commit at the version read (None: it has none),
        read from its commit file when only a checkpoint was read at that version."""
        newest = self._records.newest_commit
        if newest is not None and newest[0] == self.version:
            return in_commit_timestamp([{"commitInfo": newest[1]}])
        for _, actions in read_commits(self._location, range(self.version, self.version + 1)):
            return in_commit_timestamp(actions or [])
        return None

    def holds_batch(self, start: int, end: int) -> bool:
        """Whether the target holds ``start..end`` already (another run committed it since this
        one looked); a part of it, or another split of the same versions, is an overlap."""
        resume = self.first_unwritten(start, end)
        if start < resume <= end:
            raise SinkRangeOverlapError(self.uri, start, end, [(start, resume - 1)])
        return resume > end

    def _refuse_other_writers(self, start: int, end: int | None) -> None:
        """Another appId (a backfill task, another DAG) that committed versions of the same
        source in ``start..end`` holds rows this write would add a second time."""
        if self.spec.allow_overlapping_writers or not self.spec.source:
            return
        last = end if end is not None else float("inf")
        others = sorted((r.first, r.last, r.app_id, r.target_version) for r in self._runs().values()
                        if r.source == self.spec.source and r.app_id != self.spec.app_id
                        and r.last >= start and r.first <= last)
        if others:
            raise SinkWriterOverlapError(self.uri, self.spec.source, start, end, others)


def _history_commits(table: DeltaTable) -> list[ProviderCommit]:
    """The commits of this provider still in the history of a target of older versions."""
    commits = []
    for info in table.history():
        recorded = _recorded_keys(info)
        if SOURCE_VERSIONS_KEY in recorded:
            first, _, last = recorded[SOURCE_VERSIONS_KEY].partition("..")
            commits.append(ProviderCommit(recorded.get(APP_ID_KEY), recorded.get(SOURCE_KEY),
                                          int(first), int(last), info["version"]))
    return commits


def _recorded_keys(info: dict) -> dict:
    """This provider's keys of one commitInfo: top-level (deltalake's commits), or in the JSON
    of ``userMetadata`` (Delta's own writer, sink="delta-spark")."""
    if SOURCE_VERSIONS_KEY in info:
        return info
    try:
        recorded = json.loads(info.get("userMetadata") or "")
    except ValueError:
        return {}
    return recorded if isinstance(recorded, dict) else {}


def resume_after(target_uri: str, start: int, end: int | None,
                 committed: list[tuple[int, int]], loose: list[tuple[int, int]] = ()) -> int:
    """The first version of ``start..end`` to write, given the source ranges committed.

    Committed ranges may cover only a prefix of the request, one after the other from
    ``start`` (a re-run resumes after them). Any other overlap is refused: writing it would
    duplicate rows, skipping it would lose the rest. Versions before ``start`` that nothing
    covers (a gap) are allowed: an explicit backfill may leave versions out. In a ``loose``
    range (commits whose boundaries are forgotten) any version counts as a boundary.
    """
    last = end if end is not None else float("inf")
    overlapping = sorted({r for r in [*committed, *loose] if r[1] >= start and r[0] <= last})
    resume = start
    for first, final in overlapping:
        if (first, final) in loose and first <= resume:
            resume = min(final, last) + 1
        elif first != resume or final > last:
            raise SinkRangeOverlapError(target_uri, start, end, overlapping)
        else:
            resume = final + 1
    return resume


def contiguous_end(ranges: list[tuple[int, int]], first: int) -> int | None:
    """The last version of ``ranges`` that, together, cover ``first..`` without a hole."""
    covered_to = first - 1
    for start, end in sorted(ranges):
        if start > covered_to + 1:
            break
        covered_to = max(covered_to, end)
    return covered_to if covered_to >= first else None
