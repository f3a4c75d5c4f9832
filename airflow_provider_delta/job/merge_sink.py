"""The ``delta-merge`` sink: apply a batch of a change feed to a Delta table by key, exactly once.

Per key only the last change of the batch counts: the highest ``_commit_version``, and inside
one commit the new image over the old (``update_postimage`` and ``insert`` over ``delete`` and
``update_preimage``). A last change that is a new image is upserted, one that is an old image
deletes the key. The batch is one ``deltalake`` MERGE whose commit carries the ``txn`` action
(appId, the batch's last source version): a re-run after a crash finds the batch committed, or
not at all, and never applies it twice.

Refused before anything is written: key columns missing from the rows, null keys, two new
images of one key in one commit, rows without the change feed's columns, and rows whose data
columns do not match the target's.
"""

from __future__ import annotations

import logging
import operator
from functools import reduce
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import write_deltalake
from deltalake.transaction import CommitProperties, Transaction

from airflow_provider_delta.errors import MergeInputError
from airflow_provider_delta.job.sinks import DeltaAppendSink, SinkWrite
from airflow_provider_delta.job.spec import SinkSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

CHANGE_TYPE, COMMIT_VERSION, COMMIT_TIMESTAMP = "_change_type", "_commit_version", "_commit_timestamp"
FEED_COLUMNS = (CHANGE_TYPE, COMMIT_VERSION, COMMIT_TIMESTAMP)
# Inside one commit: old images first, new images last (the row's state after the commit).
_ORDER_IN_COMMIT = {"update_preimage": 0, "delete": 1, "insert": 2, "update_postimage": 3}
_NEW_IMAGES = ("insert", "update_postimage")
_OPERATION = "__delta_provider_merge_operation"
_UPSERT, _DELETE = "upsert", "delete"


class DeltaMergeSink(DeltaAppendSink):
    """Keep a Delta table equal to its source by applying the source's change feed."""

    def __init__(self, spec: SinkSpec):
        super().__init__(spec)
        self.keys = list(spec.merge_keys)

    def check(self, df: DataFrame) -> None:
        missing_feed = [c for c in FEED_COLUMNS if c not in df.columns]
        if missing_feed:
            raise MergeInputError(self.uri, f"the rows lack the change feed columns "
                                  f"{missing_feed}; load with change_feed=True")
        missing = [k for k in self.keys if k not in df.columns]
        if missing:
            raise MergeInputError(self.uri, f"merge_keys {missing} are not columns of the rows "
                                  f"(they have {_data_columns(df)}); fix merge_keys")
        super().check(df.drop(*FEED_COLUMNS))

    def write(self, df: DataFrame | None, start_version: int, end_version: int) -> SinkWrite:
        from pyspark.sql import functions as F

        self._refuse_bad_keys(df)
        last = _last_change_per_key(df, self.keys)
        operation = F.when(F.col(CHANGE_TYPE).isin(*_NEW_IMAGES), _UPSERT).otherwise(_DELETE)
        changes = last.select(*[F.col(f"`{c}`") for c in _data_columns(df)],
                              operation.alias(_OPERATION)).toArrow()
        properties = CommitProperties(
            app_transactions=[Transaction(self.spec.app_id, end_version)],
            custom_metadata={"airflow_provider_delta.source_versions":
                             f"{start_version}..{end_version}"},
        )
        self._merge(changes, properties)
        log.info("merged %d key change(s) into %s with txn %s=%s", changes.num_rows, self.uri,
                 self.spec.app_id, end_version)
        return SinkWrite(rows=changes.num_rows, sink_version=self._table().version())

    def _refuse_bad_keys(self, df: DataFrame) -> None:
        from pyspark.sql import functions as F

        null_key = reduce(operator.or_, [F.col(f"`{k}`").isNull() for k in self.keys])
        if df.where(null_key).limit(1).count():
            raise MergeInputError(self.uri, f"some rows have a null in merge_keys {self.keys}; "
                                  "choose key columns that are never null")
        duplicate = (df.where(F.col(CHANGE_TYPE).isin(*_NEW_IMAGES))
                     .groupBy(*[F.col(f"`{k}`") for k in self.keys], F.col(COMMIT_VERSION))
                     .count().where("count > 1").limit(1).collect())
        if duplicate:
            found = duplicate[0].asDict()
            raise MergeInputError(
                self.uri, f"version {found[COMMIT_VERSION]} holds {found['count']} rows with "
                f"merge_keys {self.keys} = {[found[k] for k in self.keys]}; merge_keys must "
                "identify a row: add columns to them")

    def _merge(self, changes: pa.Table, properties: CommitProperties) -> None:
        table = self._table()
        if table is None:
            upserts = changes.filter(pc.equal(changes[_OPERATION], _UPSERT))
            write_deltalake(self.uri, upserts.drop_columns([_OPERATION]), mode="error",
                            partition_by=list(self.spec.partition_by) or None,
                            storage_options=self.spec.storage_options,
                            commit_properties=properties)
            return
        if not changes.num_rows:  # still record the batch as applied
            table.create_write_transaction(
                [], "append", changes.drop_columns([_OPERATION]).schema,
                partition_by=table.metadata().partition_columns, commit_properties=properties)
            return
        on = " AND ".join(f't."{k}" = s."{k}"' for k in self.keys)
        (table.merge(changes, on, source_alias="s", target_alias="t",
                     commit_properties=properties)
         .when_matched_delete(predicate=f"s.{_OPERATION} = '{_DELETE}'")
         .when_matched_update_all(predicate=f"s.{_OPERATION} = '{_UPSERT}'",
                                  except_cols=[_OPERATION])
         .when_not_matched_insert_all(predicate=f"s.{_OPERATION} = '{_UPSERT}'",
                                      except_cols=[_OPERATION])
         .execute())


def _last_change_per_key(df: DataFrame, keys: list[str]) -> DataFrame:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    order = F.create_map(*[F.lit(x) for pair in _ORDER_IN_COMMIT.items() for x in pair])
    latest_first = Window.partitionBy(*[F.col(f"`{k}`") for k in keys]).orderBy(
        F.col(COMMIT_VERSION).desc(), order[F.col(CHANGE_TYPE)].desc())
    rank = "__delta_provider_rank"
    return df.withColumn(rank, F.row_number().over(latest_first)).where(F.col(rank) == 1)


def _data_columns(df: DataFrame) -> list[str]:
    return [c for c in df.columns if c not in FEED_COLUMNS]
