"""The Spark driver program the operators submit: ``driver.py <spec uri> <result uri>``.

It plans from the Delta log through the one plan path (:mod:`.plan`, which the operator ran
before submitting), splits the range into batches, reads each batch with the Spark layer,
applies the transform, writes through the sink, and reports a
:class:`~airflow_provider_delta.job.spec.JobResult` as JSON. Batches the sink already holds
(its ``txn`` version, or its published batch folders) are skipped, so re-running a job after a
crash writes nothing twice.

The file runs as a script (``spark-submit .../driver.py``) and needs this package importable on
the driver: installed, or shipped with ``py_files`` (see the operators' ``ship_package``).
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_provider_delta.core import ChangeFeedPlan, commit_timestamp
from airflow_provider_delta.core.model import Plan
from airflow_provider_delta.errors import InvalidParameterError
from airflow_provider_delta.job.arrow_feed import read_feed_on_driver
from airflow_provider_delta.job.plan import plan_load
from airflow_provider_delta.job.sinks import DeltaMergeSink, Sink
from airflow_provider_delta.job.spec import BatchResult, JobResult, JobSpec, SinkKind
from airflow_provider_delta.job.credentials import spark_conf_from, with_credentials_from
from airflow_provider_delta.spark import read_plan
from airflow_provider_delta.spark.change_feed import read_feed, snapshot_as_inserts
from airflow_provider_delta.spark.s3a import s3a_settings
from airflow_provider_delta.storage import read_text, write_text

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("airflow_provider_delta.job")


# Delta partition values and the oracle are in UTC; a local default would shift timestamps.
_JOB_SESSION_CONFS = {"spark.sql.session.timeZone": "UTC"}
# Spark 4.2.0 hangs a transform's Python UDF over a Parquet read: its columnar Arrow UDF input
# sends the UDF in a layout the Python worker misreads, and both then wait for each other
# (SPARK-58241, fixed on branch-4.2 later). Delta's jars for Spark 4.2 need pyspark <= 4.2.0, so
# sink="delta-spark" meets it; the row path is what Spark used before 4.2.
_SPARK_4_2_CONFS = {"spark.sql.execution.arrow.pythonUDF.columnarInput.enabled": "false"}


def configure_session(spark: SparkSession) -> None:
    """Set the runtime confs every job runs with (spark-submit and Spark Connect alike)."""
    for key, value in job_session_confs(spark.version).items():
        spark.conf.set(key, value)


def job_session_confs(spark_version: str) -> dict[str, str]:
    """The runtime confs every job runs with, on a Spark of ``spark_version``."""
    confs = dict(_JOB_SESSION_CONFS)
    if spark_version.startswith("4.2."):
        confs.update(_SPARK_4_2_CONFS)
    return confs


def run_job(spark: SparkSession, spec: JobSpec) -> JobResult:
    """Run every batch of ``spec`` that the sink does not hold yet; return what was done."""
    configure_s3a(spark, spec)
    load = plan_load(spec)
    batches = load.batches(spec)
    log.info("%s: %d batch(es) to run (sink holds versions before %s)", spec.table_uri,
             len(batches), load.resume)
    first, last = spec.covered_range()
    results = []
    for number, batch in enumerate(batches, start=1):
        log.info("batch %d/%d: versions %d..%d, %d file(s), %d bytes", number, len(batches),
                 batch.start_version, batch.end_version, len(batch), batch.total_bytes)
        results.append(_run_batch(spark, spec, load.sink, batch,
                                  first if load.whole_snapshot else None))
    start = last if spec.mode == "snapshot" else load.resume
    return JobResult(spec.table_uri, spec.mode, start, last, tuple(results),
                     spark_ui_url=spark_ui_url(spark))


def configure_s3a(spark: SparkSession, spec: JobSpec) -> None:
    """Spark's S3A settings for the source's and the target's buckets, from their storage
    options (on the job's session, never on a command line). Without a session (every batch
    read on the driver) there is nothing to set."""
    if spark is None:
        return
    for uri, options in ((spec.table_uri, spec.storage_options),
                         (spec.sink.path, spec.sink.storage_options)):
        for key, value in (s3a_settings(uri, options) if uri else {}).items():
            spark.conf.set(key, value)


def spark_ui_url(spark: SparkSession) -> str | None:
    """The driver's web UI (None when disabled)."""
    context = getattr(spark, "sparkContext", None)  # a Spark Connect session has none to ask
    return context.uiWebUrl if context is not None else None


def _run_batch(spark: SparkSession, spec: JobSpec, sink: Sink, batch: Plan | ChangeFeedPlan,
               covered_from: int | None) -> BatchResult:
    """Read, transform and write one batch; its commit records ``covered_from`` (a snapshot
    covers versions from 0) or the batch's own first version."""
    first = batch.start_version if covered_from is None else covered_from
    changes = _feed_on_driver(spec, sink, batch)
    if changes is not None:
        sink.check_changes(changes)
        written = sink.write_changes(changes, first, batch.end_version)
    else:
        df = _read_batch(spark, spec, batch)
        context = {**spec.context, "table_uri": spec.table_uri,
                   "start_version": batch.start_version, "end_version": batch.end_version}
        out = transform(spark, df, spec, context)
        if out is not None:
            sink.check(out)
        written = sink.write(out, first, batch.end_version)
    return BatchResult(
        start_version=batch.start_version, end_version=batch.end_version, files=len(batch),
        bytes=batch.total_bytes, rows=written.rows, sink_version=written.sink_version,
    )


def _feed_on_driver(spec: JobSpec, sink: Sink, batch: Plan | ChangeFeedPlan) -> pa.Table | None:
    """A merge batch's feed read without Spark, where the sink takes it as read (no transform
    or sql) and the batch is one the Arrow reader reads exactly; None: read it with Spark."""
    if not (isinstance(sink, DeltaMergeSink) and isinstance(batch, ChangeFeedPlan)
            and not (spec.transform or spec.sql)):
        return None
    changes = read_feed_on_driver(batch, storage_options=spec.storage_options)
    log.info("versions %d..%d: the feed is read %s", batch.start_version, batch.end_version,
             "on the driver with Arrow" if changes is not None else "with Spark")
    return changes


def _read_batch(spark: SparkSession, spec: JobSpec, batch: Plan | ChangeFeedPlan) -> DataFrame:
    options = {"storage_options": spec.storage_options}
    if isinstance(batch, ChangeFeedPlan):
        return read_feed(spark, batch, **options)
    df = read_plan(spark, batch, **options)
    if spec.change_feed:  # a first load from a snapshot: its rows are the feed's inserts
        committed_at = commit_timestamp(spec.table_uri, batch.end_version, **options)
        return snapshot_as_inserts(df, batch.end_version, committed_at)
    return df


def transform(spark: SparkSession, df: DataFrame, spec: JobSpec,
              context: dict[str, Any]) -> DataFrame | None:
    """Apply ``spec.transform`` (``"module:function"``) or ``spec.sql`` (over view ``changes``)."""
    if spec.sql:
        df.createOrReplaceTempView("changes")
        return spark.sql(spec.sql)
    if spec.transform:
        out = load_callable(spec.transform)(spark, df, context)
        if out is None and spec.sink.kind != SinkKind.NONE:
            raise InvalidParameterError(
                spec.context.get("task_id"), "transform", spec.transform,
                f"returned None for versions {context['start_version']}..{context['end_version']}",
                "return the DataFrame to write, or set sink=None if it writes by itself",
                spec.table_uri)
        return out
    return df


def load_callable(reference: str) -> Any:
    """Import ``"package.module:function"``."""
    module_name, _, attribute = reference.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"transform {reference!r} is not of the form 'module:function'")
    return getattr(importlib.import_module(module_name), attribute)


def main(argv: list[str]) -> int:
    """Entry point under ``spark-submit``: read the spec, run it, write the result."""
    from pyspark.sql import SparkSession

    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    spec_uri, result_uri = argv
    spec = with_credentials_from(os.environ, JobSpec.from_json(read_text(spec_uri)))
    builder = SparkSession.builder.appName(f"delta-load {spec.table_uri}")
    for key, value in spark_conf_from(os.environ).items():  # kept off the command line
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    configure_session(spark)
    try:
        result = run_job(spark, spec)
        write_text(result_uri, result.to_json())
        log.info("done: %s", result.to_json())
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
