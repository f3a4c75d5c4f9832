"""The ``delta-spark`` sink: Delta's own writer (``format("delta")``, the Delta jars on the
cluster) appends each batch in one commit, exactly once through Delta's idempotent writes.

The commit carries the writer options ``txnAppId``/``txnVersion`` (the same appId and version
as the ``delta`` sink's ``txn``) and, in ``userMetadata``, the keys :mod:`.target_log` reads
(source range, appId, source), so both Delta sinks answer the same resume, overlap and
other-writer rules on one target. Delta itself skips a write whose txn version the table
holds already, and its optimistic concurrency refuses a second commit of the same appId
racing this one; a killed attempt leaves only uncommitted files (VACUUM removes them).
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from airflow_provider_delta.errors import SinkSchemaMismatchError
from airflow_provider_delta.job.sinks.base import SinkWrite
from airflow_provider_delta.job.sinks.delta_append import DeltaAppendSink
from airflow_provider_delta.job.sinks.target_log import TargetLog
from airflow_provider_delta.storage import spark_uri

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

# Delta's error classes for a commit that lost to a concurrent one (checked again, not retried).
CONCURRENT_COMMIT = ("DELTA_CONCURRENT", "ConcurrentTransactionException",
                     "ConcurrentAppendException", "DELTA_PROTOCOL_CHANGED",
                     "DELTA_METADATA_CHANGED")
SCHEMA_REFUSED = ("DELTA_FAILED_TO_MERGE_FIELDS", "_LEGACY_ERROR_TEMP_DELTA_0007",
                  "DELTA_SCHEMA_MISMATCH", "DELTA_PARTITION_SCHEMA_MISMATCH",
                  "A schema mismatch detected")
WRITER_OPTIONS = ("txnAppId", "txnVersion", "userMetadata")  # set by the sink, never by a user


class DeltaSparkSink(DeltaAppendSink):
    """Append with ``format("delta")``, exactly once per ``(app_id, source version)``: the
    ``delta`` sink's target, records and rules, Delta's writer instead of staged files and a
    ``deltalake`` commit."""

    def refuse_unwritable(self, target: TargetLog) -> None:
        """Delta's own writer writes every feature Delta has."""

    def check(self, df: DataFrame) -> None:
        missing = [c for c in self.spec.partition_by if c not in df.columns]
        if missing:
            raise SinkSchemaMismatchError(self.uri, f"partition columns {missing} not in the rows")

    def write(self, df: DataFrame | None, start_version: int, end_version: int) -> SinkWrite:
        if self._holds(start_version, end_version):
            return SinkWrite(rows=0, sink_version=self._target.latest().version)
        metadata = self._target.commit_metadata(start_version, end_version)
        options = {k: v for k, v in self.spec.options.items() if k not in WRITER_OPTIONS}
        writer = (df.write.format("delta").mode("append").options(**options)
                  .option("txnAppId", self.spec.app_id).option("txnVersion", end_version)
                  .option("userMetadata", json.dumps(metadata, sort_keys=True)))
        if self.spec.partition_by:
            writer = writer.partitionBy(*self.spec.partition_by)
        log.info("writing batch %s..%s to %s with Delta's writer", start_version, end_version,
                 self.uri)
        try:
            writer.save(spark_uri(self.uri))
        except Exception as error:  # Py4J and Spark Connect raise different classes
            self._raise_unless_lost_race(error, start_version, end_version)
            return SinkWrite(rows=0, sink_version=self._target.latest().version)
        version, rows = self._target.own_commit(start_version, end_version)
        log.info("committed batch %s..%s to %s as version %s with txn %s=%s", start_version,
                 end_version, self.uri, version, self.spec.app_id, end_version)
        return SinkWrite(rows=rows, sink_version=version)

    def _holds(self, start: int, end: int) -> bool:
        if not self._target.latest().holds_batch(start, end):
            return False
        log.warning("%s: source versions %s..%s are committed already (another run); "
                    "nothing written", self.uri, start, end)
        return True

    def _raise_unless_lost_race(self, error: Exception, start: int, end: int) -> None:
        """A commit that lost to another run of the same batch is fine once the target holds
        the batch; a schema Delta refuses is the DAG author's to fix; anything else raises."""
        text = str(error)
        if any(code in text for code in CONCURRENT_COMMIT) and self._holds(start, end):
            return
        if any(code in text for code in SCHEMA_REFUSED):
            raise SinkSchemaMismatchError(
                self.uri, f"Delta's writer refused the rows of source versions {start}..{end}: "
                f"{text.splitlines()[0][:300]}; set sink_options={{'mergeSchema': 'true'}} to "
                "add new columns") from error
        raise error
