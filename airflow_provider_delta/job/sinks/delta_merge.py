"""The ``delta-merge`` sink: apply a batch of a change feed to a Delta table by key, exactly once.

Per key only the last change of the batch counts: the highest ``_commit_version``, and inside
one commit the new image over the old (``update_postimage`` and ``insert`` over ``delete`` and
``update_preimage``). A last change that is a new image is upserted, one that is an old image
deletes the key. The batch is one ``deltalake`` MERGE whose commit carries the ``txn`` action
(appId, the batch's last source version): a re-run after a crash finds the batch committed, or
not at all, and never applies it twice (the txn and the rules on it: :mod:`.target_log`).
The MERGE reads only the target files whose key range (file statistics) or partition values
can hold a changed key.

Refused before anything is written: key columns missing from the rows, null keys, two new
images of one key in one commit, rows without the change feed's columns, and rows whose data
columns do not match the target's.
"""

from __future__ import annotations

import logging
from functools import reduce
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, Schema, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError
from deltalake.transaction import CommitProperties, PostCommitHookProperties

from airflow_provider_delta.core.change_feed import CHANGE_TYPE, COMMIT_VERSION, FEED_COLUMNS
from airflow_provider_delta.errors import MergeInputError, SinkCommitConflictError
from airflow_provider_delta.job.sinks.base import SinkWrite
from airflow_provider_delta.job.sinks.delta_target import DeltaTargetSink
from airflow_provider_delta.job.sinks.delta_schema import add_new_columns, check_rows, check_schema
from airflow_provider_delta.job.sinks.target_log import (
    COMMIT_ATTEMPTS, TargetLog, open_target,
)
from airflow_provider_delta.job.spec import SinkSpec
from airflow_provider_delta.storage import deltalake_uri

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

# Inside one commit: old images first, new images last (the row's state after the commit).
_ORDER_IN_COMMIT = ("update_preimage", "delete", "insert", "update_postimage")
_FIRST_NEW_IMAGE = _ORDER_IN_COMMIT.index("insert")
_ORDER = "__delta_provider_order_in_commit"
_OPERATION = "__delta_provider_merge_operation"
_UPSERT, _DELETE = "upsert", "delete"


class DeltaMergeSink(DeltaTargetSink):
    """Keep a Delta table equal to its source by applying the source's change feed.

    The target is opened once per job and brought up to date (reading only the commits since
    the last look) before each question on its log and each merge.
    """

    def __init__(self, spec: SinkSpec):
        super().__init__(spec)
        self.keys = list(spec.merge_keys)
        self._resume_looked_up_at: int | None = None  # target version first_unwritten read

    def _table(self) -> DeltaTable | None:
        return self._target.current()

    def first_unwritten(self, start: int, end: int | None) -> int:
        target = self._target.latest()
        self._resume_looked_up_at = target.version
        return target.first_unwritten(start, end)

    def _committed_by_another_run(self, target: TargetLog, start: int, end: int) -> bool:
        # Nothing was committed since first_unwritten read the log: the driver plans only
        # batches after what it found, so no other run can have merged this one.
        if target.version == self._resume_looked_up_at:
            return False
        return target.holds_batch(start, end)

    def check(self, df: DataFrame) -> None:
        self._check_feed_columns(df.columns)
        check_rows(self.spec, self._table(), df.drop(*FEED_COLUMNS))

    def check_changes(self, rows: pa.Table) -> None:
        """:meth:`check` for a feed read on the driver (an Arrow table)."""
        self._check_feed_columns(rows.column_names)
        check_schema(self.spec, self._table(), _data_schema(rows))

    def _check_feed_columns(self, columns: list[str]) -> None:
        missing_feed = [c for c in FEED_COLUMNS if c not in columns]
        if missing_feed:
            raise MergeInputError(self.uri, f"the rows lack the change feed columns "
                                  f"{missing_feed}; load with change_feed=True")
        missing = [k for k in self.keys if k not in columns]
        if missing:
            raise MergeInputError(self.uri, f"merge_keys {missing} are not columns of the rows "
                                  f"(they have {_data_columns(columns)}); fix merge_keys")

    def write(self, df: DataFrame | None, start_version: int, end_version: int) -> SinkWrite:
        # The MERGE takes its source on the driver anyway: one Spark job collects the batch.
        rows = df.select(*[f"`{c}`" for c in _data_columns(df.columns)], CHANGE_TYPE,
                         COMMIT_VERSION).toArrow()
        return self.write_changes(rows, start_version, end_version)

    def write_changes(self, rows: pa.Table, start_version: int, end_version: int) -> SinkWrite:
        """Apply a batch's feed (data columns, ``_change_type``, ``_commit_version``)."""
        changes = self._last_changes(rows)
        add_new_columns(self.spec, self._target.latest().table, _data_schema(rows))  # MERGE
        for _ in range(COMMIT_ATTEMPTS):  # would drop their values
            target = self._target.latest()
            if target.current() is None:
                if self._create(target, changes, start_version, end_version):
                    return SinkWrite(rows=changes.num_rows, sink_version=0)
                continue
            if self._committed_by_another_run(target, start_version, end_version):
                log.warning("%s: another run merged source versions %s..%s (target version %s) "
                            "since this one looked; not merging them again", self.uri,
                            start_version, end_version, target.version)
                return SinkWrite(rows=0, sink_version=target.version)
            version = target.next_version
            try:
                self._merge(target.table, changes,
                            target.commit_properties(start_version, end_version),
                            target.post_commit_hooks())
            except CommitFailedError as error:
                log.warning("%s: concurrent commit, checking the log again: %s", self.uri, error)
                continue
            log.info("merged %d key change(s) into %s with txn %s=%s", changes.num_rows,
                     self.uri, self.spec.app_id, end_version)
            return SinkWrite(rows=changes.num_rows, sink_version=version)
        raise SinkCommitConflictError(self.uri, start_version, end_version, COMMIT_ATTEMPTS)

    def _last_changes(self, rows: pa.Table) -> pa.Table:
        """Each key's last change: data columns and the merge operation.

        Reduced with Arrow: a sort and a comparison with the previous row, no Spark shuffle.
        """
        data = _data_columns(rows.column_names)
        order = pc.index_in(rows[CHANGE_TYPE], value_set=pa.array(list(_ORDER_IN_COMMIT)))
        rows = rows.append_column(_ORDER, order)
        self._refuse_bad_keys(rows)
        sort_keys = [*[(k, "ascending") for k in self.keys], (COMMIT_VERSION, "descending"),
                     (_ORDER, "descending")]
        latest_first = rows.take(pc.sort_indices(rows, sort_keys=sort_keys))
        last = latest_first.filter(_first_of_each_key(latest_first, self.keys))
        operation = pc.if_else(pc.greater_equal(last[_ORDER], _FIRST_NEW_IMAGE), _UPSERT, _DELETE)
        return last.select(data).append_column(_OPERATION, operation)

    def _refuse_bad_keys(self, rows: pa.Table) -> None:
        if any(rows[k].null_count for k in self.keys):
            raise MergeInputError(self.uri, f"some rows have a null in merge_keys {self.keys}; "
                                  "choose key columns that are never null")
        new_images = rows.filter(pc.greater_equal(rows[_ORDER], _FIRST_NEW_IMAGE))
        counts = new_images.group_by([*self.keys, COMMIT_VERSION]).aggregate([(_ORDER, "count")])
        duplicates = counts.filter(pc.greater(counts[f"{_ORDER}_count"], 1))
        if duplicates.num_rows:
            row = duplicates.slice(0, 1).to_pylist()[0]
            raise MergeInputError(
                self.uri, f"version {row[COMMIT_VERSION]} holds {row[f'{_ORDER}_count']} rows "
                f"with merge_keys {self.keys} = {[row[k] for k in self.keys]}; merge_keys "
                "must identify a row: add columns to them")

    def _create(self, target: TargetLog, changes: pa.Table, start_version: int,
                end_version: int) -> bool:
        """Create the target with the batch's upserts; False if another run created it first
        (deltalake would retry this create as its next version, with the same rows)."""
        upserts = changes.filter(pc.equal(changes[_OPERATION], _UPSERT))
        try:
            write_deltalake(deltalake_uri(self.uri), upserts.drop_columns([_OPERATION]), mode="error",
                            partition_by=list(self.spec.partition_by) or None,
                            storage_options=self.spec.storage_options,
                            commit_properties=target.commit_properties(start_version, end_version),
                            post_commithook_properties=target.post_commit_hooks())
        except DeltaError:  # CommitFailedError too
            if open_target(self.uri, self.spec.storage_options) is None:
                raise
            log.warning("%s: another run created the table first; merging into it", self.uri)
            return False
        return True

    def _merge(self, table: DeltaTable, changes: pa.Table, properties: CommitProperties,
               hooks: PostCommitHookProperties) -> None:
        before = table.version()
        if changes.num_rows:
            self._merge_rows(table, changes, properties, hooks)
        if table.version() == before:  # no rows, or none matched: deltalake commits nothing
            table.create_write_transaction(
                [], "append", changes.drop_columns([_OPERATION]).schema,
                partition_by=table.metadata().partition_columns, commit_properties=properties,
                post_commithook_properties=hooks)

    def _merge_rows(self, table: DeltaTable, changes: pa.Table,
                    properties: CommitProperties, hooks: PostCommitHookProperties) -> None:
        on = " AND ".join(f't."{k}" = s."{k}"' for k in self.keys)
        # Not streamed: deltalake then prunes target files by the changes' key ranges (and
        # partition values) and reads only those; the changes are in memory anyway.
        (table.merge(changes, on, source_alias="s", target_alias="t", streamed_exec=False,
                     commit_properties=properties, post_commithook_properties=hooks)
         .when_matched_delete(predicate=f"s.{_OPERATION} = '{_DELETE}'")
         .when_matched_update_all(predicate=f"s.{_OPERATION} = '{_UPSERT}'",
                                  except_cols=[_OPERATION])
         .when_not_matched_insert_all(predicate=f"s.{_OPERATION} = '{_UPSERT}'",
                                      except_cols=[_OPERATION])
         .execute())


def _first_of_each_key(rows: pa.Table, keys: list[str]) -> pa.Array:
    """True on each row of a key-sorted table whose key differs from the previous row's."""
    if not rows.num_rows:
        return pa.array([], pa.bool_())
    changed = [pc.not_equal(rows[k].slice(1), rows[k].slice(0, rows.num_rows - 1)) for k in keys]
    return pa.concat_arrays([pa.array([True]),
                             pc.fill_null(reduce(pc.or_, changed), True).combine_chunks()])


def _data_schema(rows: pa.Table) -> Schema:
    return Schema.from_arrow(rows.select(_data_columns(rows.column_names)).schema)


def _data_columns(columns: list[str]) -> list[str]:
    return [c for c in columns if c not in FEED_COLUMNS]
