"""The ``delta`` sink: append a batch to a Delta table, exactly once per (appId, source version).

It needs no Delta jars: Spark writes Parquet files into a fresh staging folder inside the
target, then ONE commit adds them and carries the batch's ``txn`` action (see
:mod:`.target_log`), as Delta's idempotent writes do. The sink writes that commit itself
(:mod:`.blind_append`: its cost stays flat however many files the target holds); deltalake
commits when it creates the table and on targets whose protocol asks more of a writer. Files
of a failed attempt stay uncommitted orphans (VACUUM removes them).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import TYPE_CHECKING
from urllib.parse import unquote

import obstore
import pyarrow as pa
from deltalake import Schema
from deltalake.exceptions import DeltaError
from deltalake.transaction import AddAction, create_table_with_add_actions

from airflow_provider_delta.core.delta_log import TableLocation, commit_name
from airflow_provider_delta.errors import (
    SinkCommitConflictError, SinkHardLinksError, SinkSchemaMismatchError, SinkTargetError,
)
from airflow_provider_delta.job.sinks.base import SinkWrite
from airflow_provider_delta.job.sinks.blind_append import (
    ROW_TRACKING_DOMAIN, HardLinksRefused, RowIds, assigns_row_ids, blind_append_actions,
    checkpoint_when_due, put_commit, unwritable_feature, writes_in_commit_timestamps,
)
from airflow_provider_delta.job.sinks.delta_target import DeltaTargetSink
from airflow_provider_delta.job.sinks.delta_schema import (
    add_new_columns, arrow_schema, check_rows, delta_schema, new_columns,
)
from airflow_provider_delta.job.sinks.target_log import (
    COMMIT_ATTEMPTS, TargetLog,
)
from airflow_provider_delta.job.sinks.targets import (
    STAGING_FOLDER, refuse_unwritable_target,
)
from airflow_provider_delta.job.sinks.written_files import (
    PARQUET_TIMESTAMPS, written_parquet_files,
)
from airflow_provider_delta.storage import deltalake_uri, list_files, open_store, spark_uri

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"


class DeltaAppendSink(DeltaTargetSink):
    """Append to a Delta table, exactly once per ``(app_id, source version)``; the target is
    brought up to date before each commit attempt too.
    """

    _committer: tuple[int | None, str | None] | None = None  # (target version, reason)
    _links_refused: OSError | None = None
    lost_races = 0  # commit attempts of this job that another writer's commit beat

    def refuse_unwritable(self, target: TargetLog) -> None:
        """A target neither the own commit nor deltalake can append to."""
        view = target.view()
        if view is not None:
            refuse_unwritable_target(self.uri, view.protocol, self._deltalake_commits(target))

    def first_unwritten(self, start: int, end: int | None) -> int:
        return self._target.latest().first_unwritten(start, end)

    def check(self, df: DataFrame) -> None:
        """Compare names, types and partitioning with the target, if it exists; if deltalake
        is to commit, start opening its handle meanwhile."""
        target = self._target.latest()
        if self._deltalake_commits(target):
            target.prefetch()
        check_rows(self.spec, target.view(), df)
        view = target.view()
        if view is not None and new_columns(self.spec, view, delta_schema(df)):
            refuse_unwritable_target(self.uri, view.protocol,
                                     "the rows add columns, which only deltalake adds")

    def _deltalake_commits(self, target: TargetLog) -> str | None:
        """Why deltalake rather than this sink commits on ``target`` (None: this sink does),
        worked out once per version of the target."""
        if self._links_refused is not None:
            return f"the file system refuses hard links ({self._links_refused.strerror})"
        if self._committer is None or self._committer[0] != target.version:
            view = target.view()
            reason = "it creates the table" if view is None else unwritable_feature(
                view.protocol, view.raw_metadata, self.spec.storage_options)
            self._committer = target.version, reason
        return self._committer[1]

    def write(self, df: DataFrame | None, start_version: int, end_version: int) -> SinkWrite:
        rows = delta_schema(df)
        view = self._target.latest().view()
        if view is not None and new_columns(self.spec, view, rows):
            add_new_columns(self.spec, self._target.table, rows)
        partition_by = self._partition_by()
        staging = f"{STAGING_FOLDER}/{end_version:020d}-{uuid.uuid4().hex}"
        log.info("writing batch %s..%s to %s/%s", start_version, end_version, self.uri, staging)
        df.write.mode("error").options(**PARQUET_TIMESTAMPS).partitionBy(
            *partition_by).parquet(f"{spark_uri(self.uri)}/{staging}")
        adds, rows = self._staged_add_actions(staging)
        schema = arrow_schema(df)
        for _ in range(COMMIT_ATTEMPTS):
            # Delta's optimistic concurrency: check the snapshot the commit builds on; a commit
            # made since then wins the version, and the next attempt checks again.
            target = self._target.latest()
            self._refuse_unwritable_now(target, staging)
            if self._deltalake_commits(target):
                target.current()  # deltalake's handle, and the records at its version
            if target.holds_batch(start_version, end_version):
                # No commit adds the staged files: every attempt that came back False found
                # another writer's commit at its version (see _settle_unclear_commit).
                log.warning("%s: another run committed source versions %s..%s (target version "
                            "%s) while this one wrote them; its staged files are dropped",
                            self.uri, start_version, end_version, target.version)
                self._drop_staged(staging)
                return SinkWrite(rows=0, sink_version=target.version)
            version = target.next_version
            if self._commit(target, adds, schema, partition_by, start_version, end_version,
                            rows):
                if self.lost_races:
                    log.info("%s: committed after %d lost race(s) in this job", self.uri,
                             self.lost_races)
                return SinkWrite(rows=rows, sink_version=version)
            self.lost_races += 1
        log.warning("%s: %d commit attempts of source versions %s..%s lost to other writers; "
                    "the staged files are dropped", self.uri, COMMIT_ATTEMPTS, start_version,
                    end_version)
        self._drop_staged(staging)
        raise SinkCommitConflictError(self.uri, start_version, end_version, COMMIT_ATTEMPTS)

    def _refuse_unwritable_now(self, target: TargetLog, staging: str) -> None:
        """The check before Spark, again on the snapshot the commit builds on (a writer may
        have added a feature meanwhile): the staged files go if nothing can commit them."""
        try:
            self.refuse_unwritable(target)
        except SinkTargetError:
            self._drop_staged(staging)
            raise

    def _partition_by(self) -> list[str]:
        view = self._target.view()
        if view is not None:
            return list(view.metadata().partition_columns)
        return list(self.spec.partition_by)

    def _drop_staged(self, staging: str) -> None:
        store = open_store(self.uri, self.spec.storage_options)
        for meta in list_files(self.uri, staging, self.spec.storage_options):
            obstore.delete(store, meta["path"])

    def _staged_add_actions(self, staging: str) -> tuple[list[AddAction], int]:
        files = written_parquet_files(self.uri, staging, self.spec.storage_options)
        adds = [
            AddAction(
                path=meta["path"],
                size=meta["size"],
                partition_values=_partition_values(relative),
                modification_time=int(meta["last_modified"].timestamp() * 1000),
                data_change=True,
                stats=json.dumps({"numRecords": rows}),
            )
            for meta, relative, rows in files
        ]
        return adds, sum(rows for _, _, rows in files)

    def _commit(self, target: TargetLog, adds: list[AddAction], schema: pa.Schema,
                partition_by: list[str], start_version: int, end_version: int,
                rows: int) -> bool:
        """One commit of ``adds`` with this app's records on top of ``target``'s snapshot
        (none: create the table); False if a concurrent commit won."""
        reason = self._deltalake_commits(target)
        if reason is None:
            try:
                return self._commit_blind(target, adds, schema, partition_by, start_version,
                                          end_version, rows)
            except HardLinksRefused as refusal:
                # The next attempt opens deltalake's handle and checks the log again first.
                log.warning("%s: the file system refuses hard links (%s), which this sink's own "
                            "commit uses; deltalake commits the batch instead", self.uri,
                            refusal.strerror)
                self._links_refused = refusal
                return False
        log.info("%s: deltalake commits the batch (%s)", self.uri, reason)
        table = target.table
        properties = target.commit_properties(start_version, end_version)
        hooks = target.post_commit_hooks()
        try:
            if table is None:
                create_table_with_add_actions(
                    deltalake_uri(self.uri), Schema.from_arrow(schema), adds, mode="error",
                    partition_by=partition_by or None, storage_options=self.spec.storage_options,
                    commit_properties=properties, post_commithook_properties=hooks,
                )
            else:
                table.create_write_transaction(adds, "append", schema, partition_by=partition_by,
                                               commit_properties=properties,
                                               post_commithook_properties=hooks)
        except (DeltaError, OSError) as error:
            return self._settle_unclear_commit(target, adds, error)
        log.info("committed %d file(s) to %s with txn %s=%s", len(adds), self.uri,
                 self.spec.app_id, end_version)
        return True

    def _settle_unclear_commit(self, target: TargetLog, adds: list[AddAction],
                               error: Exception) -> bool:
        """After deltalake's commit failed: True if the commit landed all the same (a put on S3
        whose answer was lost, retried, finds its own commit and reports the version taken; a
        hook after the commit failed), False if another writer won the version; else raise.
        A False lets the sink drop the staged files, so it needs the log's word."""
        version = target.next_version
        ours = _commit_holds(target.location, version, adds)
        if ours is None:  # the version is free: no race lost; deltalake's error stands
            if self._links_refused is not None:
                raise SinkHardLinksError(self.uri, version,
                                         self._links_refused.strerror) from error
            raise error
        if ours:
            log.warning("%s: version %s holds this batch's commit although deltalake answered "
                        "with an error (the commit stands): %s", self.uri, version, error)
            return True
        log.warning("%s: concurrent commit, checking the log again: another writer committed "
                    "version %s first (%s)", self.uri, version, error)
        return False

    def _commit_blind(self, target: TargetLog, adds: list[AddAction], schema: pa.Schema,
                      partition_by: list[str], start_version: int, end_version: int,
                      rows: int) -> bool:
        """The commit written by this sink (see :mod:`.blind_append`), after checking that the
        snapshot (newer than the check before the write, after a lost race) still takes the
        files: a changed schema or partitioning is refused, as deltalake would."""
        view = target.view()
        existing = list(view.metadata().partition_columns)
        if existing != partition_by:
            raise SinkSchemaMismatchError(
                self.uri, f"the target is now partitioned by {existing}, the batch's files by "
                f"{partition_by}")
        added = new_columns(self.spec, view, Schema.from_arrow(schema))
        if added:
            raise SinkSchemaMismatchError(
                self.uri, f"the target no longer has column(s) {[f.name for f in added]}")
        version = target.next_version
        configuration = view.raw_metadata.get("configuration") or {}
        in_commit_timestamp = writes_in_commit_timestamps(view.protocol, configuration)
        timestamp = _commit_timestamp(target, in_commit_timestamp)
        row_ids = None
        if assigns_row_ids(view.protocol, configuration):
            mark = (target.records.domain(ROW_TRACKING_DOMAIN) or {}).get("rowIdHighWaterMark")
            row_ids = RowIds(-1 if mark is None else int(mark), version)
        actions = blind_append_actions(
            adds, target.commit_records(start_version, end_version, timestamp),
            target.commit_metadata(start_version, end_version), partition_by, target.version,
            rows, timestamp=timestamp, in_commit_timestamp=in_commit_timestamp, row_ids=row_ids)
        if not put_commit(target.location, version, actions):
            log.warning("%s: concurrent commit, checking the log again: another writer "
                        "committed version %s first", self.uri, version)
            return False
        log.info("committed %d file(s) to %s as version %s with txn %s=%s", len(adds),
                 self.uri, version, self.spec.app_id, end_version)
        checkpoint_when_due(target.location, version, configuration)
        return True


def _commit_timestamp(target: TargetLog, in_commit_timestamp: bool) -> int:
    """The commit's time: now, and with in-commit timestamps at least the previous commit's
    plus one millisecond (they increase, whatever the clocks of other writers say)."""
    now = int(time.time() * 1000)
    previous = target.newest_in_commit_timestamp() if in_commit_timestamp else None
    return now if previous is None else max(now, previous + 1)


def _commit_holds(location: TableLocation, version: int, adds: list[AddAction]) -> bool | None:
    """Whether commit ``version`` adds any of ``adds`` (their staging folder is this attempt's
    own); None if there is no such commit."""
    body = location.read_log_file(commit_name(version))
    if body is None:
        return None
    staged = {add.path for add in adds}
    for line in body.splitlines():
        added = json.loads(line).get("add") if line.strip() else None
        if added and unquote(added["path"]) in staged:
            return True
    return False


def _partition_values(relative_path: str) -> dict[str, str | None]:
    """Hive-style ``k=v`` folders Spark wrote, unescaped, as Delta's string partition values."""
    values: dict[str, str | None] = {}
    for folder in relative_path.split("/")[:-1]:
        key, _, raw = folder.partition("=")
        value = unquote(raw)
        values[unquote(key)] = None if value == HIVE_NULL else value
    return values
