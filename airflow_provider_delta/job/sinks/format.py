"""The ``format`` sink (any Spark data source format, one folder per batch) and the ``none``
sink (the transform wrote by itself)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_delta.job.sinks.base import Sink, SinkWrite
from airflow_provider_delta.job.sinks.target_log import resume_after
from airflow_provider_delta.job.sinks.targets import refuse_source_as_target
from airflow_provider_delta.job.sinks.written_files import (
    PARQUET_TIMESTAMPS, written_parquet_files,
)
from airflow_provider_delta.job.spec import SinkSpec
from airflow_provider_delta.storage import list_files, spark_uri, to_uri

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class NoSink(Sink):
    """The transform wrote the rows itself; nothing to do."""

    def write(self, df: DataFrame | None, start_version: int, end_version: int) -> SinkWrite:
        return SinkWrite(rows=None)


class FormatSink(Sink):
    """Any Spark data source format; batch ``s..e`` goes to ``<path>/source_versions=s-e``.

    Spark's output committer publishes a batch folder (with ``_SUCCESS``) only when the whole
    job succeeded, and a re-run overwrites it, so a batch never lands twice.
    """

    def __init__(self, spec: SinkSpec):
        self.spec = spec

    def check_target(self, source_uri: str) -> None:
        refuse_source_as_target(source_uri, self.spec.path)

    def committed_version(self) -> int | None:
        return max((last for _, last in self._published_ranges()), default=None)

    def first_unwritten(self, start: int, end: int | None) -> int:
        """Resume after the published batches that tile ``start..``; refuse any other overlap
        (a batch beyond a gap is not the end of everything loaded)."""
        return resume_after(to_uri(self.spec.path), start, end, self._published_ranges())

    def _published_ranges(self) -> list[tuple[int, int]]:
        """The source ranges of the batch folders Spark published (with ``_SUCCESS``)."""
        ranges = []
        for meta in list_files(self.spec.path, "", self.spec.storage_options):
            if meta["path"].startswith("source_versions=") and meta["path"].endswith("/_SUCCESS"):
                first, _, last = meta["path"].split("/")[0].partition("=")[2].partition("-")
                ranges.append((int(first), int(last)))
        return ranges

    def write(self, df: DataFrame | None, start_version: int, end_version: int) -> SinkWrite:
        folder = f"source_versions={start_version}-{end_version}"
        defaults = PARQUET_TIMESTAMPS if self.spec.format == "parquet" else {}
        writer = (df.write.mode("overwrite").format(self.spec.format)
                  .options(**{**defaults, **self.spec.options}))
        writer.partitionBy(*self.spec.partition_by).save(f"{spark_uri(self.spec.path)}/{folder}")
        if self.spec.format == "parquet":  # footers hold the counts: no second Spark job
            files = written_parquet_files(self.spec.path, folder, self.spec.storage_options)
            return SinkWrite(rows=sum(rows for _, _, rows in files))
        written = df.sparkSession.read.format(self.spec.format).options(**self.spec.options)
        return SinkWrite(rows=written.load(f"{spark_uri(self.spec.path)}/{folder}").count())
