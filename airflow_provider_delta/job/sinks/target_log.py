"""What this provider records in a Delta target, and the rules that read it.

Each batch's commit carries a ``txn`` action (appId, the batch's last source version), as
Delta's idempotent writes do, and commitInfo keys naming the source range it holds, the appId
and the source. From these the sinks learn where a job resumes, how far a task holds its
source without a hole, and whether another writer holds versions a request would write again.

Every read of the target's history happens here, behind :class:`TargetLog`; the Delta sinks
use it as a helper and hold no rule of their own about what a target records.
"""

from __future__ import annotations

from dataclasses import dataclass

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError as DeltaTableNotFound
from deltalake.transaction import CommitProperties, Transaction

from airflow_provider_delta.errors import SinkRangeOverlapError, SinkWriterOverlapError
from airflow_provider_delta.job.spec import SinkSpec
from airflow_provider_delta.storage import to_uri

SOURCE_VERSIONS_KEY = "airflow_provider_delta.source_versions"
APP_ID_KEY = "airflow_provider_delta.app_id"
SOURCE_KEY = "airflow_provider_delta.source"


def open_target(uri: str, storage_options: dict[str, str] | None) -> DeltaTable | None:
    """The target at its latest version; None while it is no Delta table yet."""
    try:
        return DeltaTable(uri, storage_options=storage_options)
    except DeltaTableNotFound:
        return None


def require_app_id(spec: SinkSpec) -> None:
    """A Delta sink records its writes under an appId."""
    if not spec.app_id:
        raise ValueError(f"{spec.path}: a delta sink needs an app_id for its txn actions")


class TargetLog:
    """What one job (``spec.app_id``) and other writers recorded in the target ``table``.

    ``table`` None is a target not created yet. Each question reads the table as it stands
    when asked (a caller that brings the table up to date gets fresh answers).
    """

    def __init__(self, spec: SinkSpec, table: DeltaTable | None):
        self.spec = spec
        self.uri = to_uri(spec.path)
        self.table = table

    @classmethod
    def open(cls, spec: SinkSpec) -> TargetLog:
        """The log of the target at its latest version."""
        return cls(spec, open_target(to_uri(spec.path), spec.storage_options))

    def commit_properties(self, start_version: int, end_version: int, *,
                          retries: int | None = None) -> CommitProperties:
        """What a batch's commit records: the txn (appId, last source version), the source
        range, the appId and the source."""
        return CommitProperties(
            max_commit_retries=retries,
            app_transactions=[Transaction(self.spec.app_id, end_version)],
            custom_metadata={SOURCE_VERSIONS_KEY: f"{start_version}..{end_version}",
                             APP_ID_KEY: self.spec.app_id,
                             **({SOURCE_KEY: self.spec.source} if self.spec.source else {})},
        )

    def committed_version(self) -> int | None:
        """This app's txn version, else (unmapped tasks) the one of the appId older versions of
        this provider used for the same DAG, task and target."""
        if self.table is None:
            return None
        version = self.table.transaction_version(self.spec.app_id)
        if version is None and self.spec.legacy_app_id:
            return self.table.transaction_version(self.spec.legacy_app_id)
        return version

    def held_through(self, first: int | None) -> int | None:
        """The end of this app's commits that tile the source versions from ``first`` (None:
        from its first commit) without a hole: a txn alone cannot tell whether a backfill of
        this task left versions before it out."""
        if self.table is None:
            return None
        own = [(c.first, c.last) for c in self._provider_commits() if c.app_id == self.spec.app_id]
        if not own:  # written by older versions, or the commits' history was cleaned up
            return self.committed_version()
        return contiguous_end(own, min(own)[0] if first is None else first)

    def first_unwritten(self, start: int, end: int | None) -> int:
        """The first source version of ``start..end`` to write: after this app's commits that
        tile ``start..``; any other overlap, or another writer's commits of the same source in
        what is left, is refused.

        Each commit records its source range; when the log's history no longer holds any of
        them (cleaned up), the txn version, which checkpoints keep, is the resume point.
        """
        if self.table is None:
            return start
        commits = self._provider_commits()
        committed = [(c.first, c.last) for c in commits if c.app_id == self.spec.app_id]
        if committed:
            resume = resume_after(self.uri, start, end, committed)
        else:
            txn = self.committed_version()
            resume = start if txn is None else max(start, txn + 1)
        if end is None or resume <= end:
            self._refuse_other_writers(commits, resume, end)
        return resume

    def holds_batch(self, start: int, end: int) -> bool:
        """Whether the target holds ``start..end`` already (another run committed it since this
        one looked); a part of it, or another split of the same versions, is an overlap."""
        resume = self.first_unwritten(start, end)
        if start < resume <= end:
            raise SinkRangeOverlapError(self.uri, start, end, [(start, resume - 1)])
        return resume > end

    def _refuse_other_writers(self, commits: list[ProviderCommit], start: int,
                              end: int | None) -> None:
        """Another appId (a backfill task, another DAG) that committed versions of the same
        source in ``start..end`` holds rows this write would add a second time."""
        if self.spec.allow_overlapping_writers or not self.spec.source:
            return
        last = end if end is not None else float("inf")
        others = sorted((c.first, c.last, c.app_id, c.target_version) for c in commits
                        if c.source == self.spec.source and c.app_id != self.spec.app_id
                        and c.last >= start and c.first <= last)
        if others:
            raise SinkWriterOverlapError(self.uri, self.spec.source, start, end, others)

    def _provider_commits(self) -> list[ProviderCommit]:
        """The commits of this provider still in the target's log history."""
        commits = []
        for info in self.table.history():
            if SOURCE_VERSIONS_KEY in info:
                first, _, last = info[SOURCE_VERSIONS_KEY].partition("..")
                commits.append(ProviderCommit(info.get(APP_ID_KEY), info.get(SOURCE_KEY),
                                              int(first), int(last), info["version"]))
        return commits


@dataclass(frozen=True)
class ProviderCommit:
    """A commit this provider made to the target: who (appId), from where, which versions."""

    app_id: str | None
    source: str | None  # None: committed before sources were recorded
    first: int
    last: int
    target_version: int


def resume_after(target_uri: str, start: int, end: int | None,
                 committed: list[tuple[int, int]]) -> int:
    """The first version of ``start..end`` to write, given the source ranges committed.

    Committed ranges may cover only a prefix of the request, one after the other from
    ``start`` (a re-run resumes after them). Any other overlap is refused: writing it would
    duplicate rows, skipping it would lose the rest. Versions before ``start`` that nothing
    covers (a gap) are allowed: an explicit backfill may leave versions out.
    """
    last = end if end is not None else float("inf")
    overlapping = sorted({r for r in committed if r[1] >= start and r[0] <= last})
    resume = start
    for first, final in overlapping:
        if first != resume or final > last:
            raise SinkRangeOverlapError(target_uri, start, end, overlapping)
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
