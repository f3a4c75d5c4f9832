"""Where a batch's rows go, each write committed exactly once.

* :class:`DeltaAppendSink` needs no Delta jars: Spark writes Parquet files into a fresh staging
  folder inside the target table, then ``deltalake`` commits them in ONE transaction that also
  carries a ``txn`` action (appId, version = the batch's last source version), as Delta's
  idempotent writes do. Files of a failed attempt stay uncommitted orphans (VACUUM removes them).
* :class:`FormatSink` writes any Spark format, one folder per batch, overwritten on re-run.
* :class:`NoSink`: the transform wrote by itself.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import struct
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import obstore
import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, Field, Schema
from deltalake.exceptions import CommitFailedError, DeltaError
from deltalake.exceptions import TableNotFoundError as DeltaTableNotFound
from deltalake.transaction import (
    AddAction,
    CommitProperties,
    Transaction,
    create_table_with_add_actions,
)

from obstore.exceptions import NotFoundError

from airflow_provider_delta.errors import (
    SinkRangeOverlapError,
    SinkSchemaMismatchError,
    SinkTargetError,
    SinkWriterOverlapError,
)
from airflow_provider_delta.job.spec import SinkSpec
from airflow_provider_delta.storage import (
    list_files,
    open_store,
    spark_uri,
    split_uri,
    to_uri,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

STAGING_FOLDER = "airflow_staging"
MERGE_SCHEMA_OPTION = "mergeSchema"  # as Delta's writer option
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
# Spark's default INT96 timestamps are deprecated in Parquet and misread at the extremes
# (0001-01-01, 9999-12-31) by other readers; set per write, so the session keeps its own conf.
PARQUET_TIMESTAMPS = {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS"}


@dataclass(frozen=True)
class SinkWrite:
    """What one batch's write left in the target."""

    rows: int | None
    sink_version: int | None = None


class Sink(ABC):
    """One target. ``committed_version`` tells the driver which source versions are in already."""

    def committed_version(self) -> int | None:
        """The last source version the target holds for this job, None if unknown or none."""
        return None

    def held_through(self, first: int | None) -> int | None:
        """The last source version this job holds contiguously from ``first`` (None: from its
        first write); None if it holds none. Here, without ranges to tell: the last one."""
        return self.committed_version()

    def check(self, df: DataFrame) -> None:  # noqa: B027 - optional hook
        """Refuse rows that cannot be written, before anything is written."""

    def check_target(self, source_uri: str) -> None:  # noqa: B027 - optional hook
        """Refuse a target that must not be written, before any Spark starts."""

    def check_not_source(self, source_uri: str, source_table_id: str) -> None:  # noqa: B027
        """Refuse a target that is the source table under another name (its table id)."""

    def first_unwritten(self, start: int, end: int | None) -> int:
        """The first source version of ``start..end`` the target does not hold yet
        (``end + 1``: all of it)."""
        committed = self.committed_version()
        return start if committed is None else max(start, committed + 1)

    @abstractmethod
    def write(self, df: DataFrame | None, start_version: int, end_version: int) -> SinkWrite:
        """Write one batch (source versions ``start_version..end_version``)."""


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


class DeltaAppendSink(Sink):
    """Append to a Delta table, exactly once per ``(app_id, source version)``."""

    def __init__(self, spec: SinkSpec):
        if not spec.app_id:
            raise ValueError(f"{spec.path}: a delta sink needs an app_id for its txn actions")
        self.spec = spec
        self.uri = to_uri(spec.path)

    def _table(self) -> DeltaTable | None:
        try:
            return DeltaTable(self.uri, storage_options=self.spec.storage_options)
        except DeltaTableNotFound:
            return None

    def committed_version(self) -> int | None:
        """This app's txn version, else (unmapped tasks) the one of the appId older versions of
        this provider used for the same DAG, task and target."""
        table = self._table()
        return None if table is None else _txn_version(table, self.spec)

    def held_through(self, first: int | None) -> int | None:
        """The end of this app's commits that tile the source versions from ``first`` (None:
        from its first commit) without a hole: a txn alone cannot tell whether a backfill of
        this task left versions before it out."""
        table = self._table()
        if table is None:
            return None
        own = [(c.first, c.last) for c in _provider_commits(table) if c.app_id == self.spec.app_id]
        if not own:  # written by older versions, or the commits' history was cleaned up
            return _txn_version(table, self.spec)
        return contiguous_end(own, min(own)[0] if first is None else first)

    def first_unwritten(self, start: int, end: int | None) -> int:
        """Resume after this app's commits that tile ``start..``; refuse any other overlap.

        Each commit records its source range; when the log's history no longer holds any of
        them (cleaned up), the txn version, which checkpoints keep, is the resume point.
        """
        return self._first_unwritten_in(self._table(), start, end)

    def _first_unwritten_in(self, table: DeltaTable | None, start: int, end: int | None) -> int:
        if table is None:
            return start
        commits = _provider_commits(table)
        committed = [(c.first, c.last) for c in commits if c.app_id == self.spec.app_id]
        if committed:
            resume = resume_after(self.uri, start, end, committed)
        else:
            txn = _txn_version(table, self.spec)
            resume = start if txn is None else max(start, txn + 1)
        if end is None or resume <= end:
            self._refuse_other_writers(commits, resume, end)
        return resume

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

    def check_target(self, source_uri: str) -> None:
        """Not the source's location, not a file, not a folder of files of another kind."""
        refuse_source_as_target(source_uri, self.uri)
        refuse_file_target(self.uri, self.spec.storage_options)
        if self._table() is None:
            refuse_non_delta_folder(self.uri, self.spec.storage_options)

    def check_not_source(self, source_uri: str, source_table_id: str) -> None:
        table = self._table()
        if table is not None and table.metadata().id == source_table_id:
            raise SinkTargetError(
                self.uri, f"it is the source table {source_uri} (same table id "
                f"{source_table_id}): every row would be appended to the table it came from",
                SOURCE_AS_TARGET_FIX)

    def check(self, df: DataFrame) -> None:
        """Compare names, types and partitioning with the target, if it exists."""
        variants = [f.name for f in df.schema.fields if _holds_variant(f.dataType)]
        if variants:  # deltalake would commit a VARIANT as a plain struct of two binaries
            raise SinkSchemaMismatchError(
                self.uri, f"column(s) {variants} hold VARIANT values, which this sink cannot "
                "commit; turn them into strings with to_json(...) in the sql or transform, or "
                "use sink='delta-spark' where the cluster has the Delta jars")
        self.check_schema(_delta_schema(df))

    def check_schema(self, rows: Schema) -> None:
        """Compare the rows' names and types (a Delta schema) with the target's, if it exists."""
        names = [f.name for f in rows.fields]
        missing = [c for c in self.spec.partition_by if c not in names]
        if missing:
            raise SinkSchemaMismatchError(self.uri, f"partition columns {missing} not in the rows")
        table = self._table()
        if table is None:
            return
        self._new_columns(table, rows)
        existing = tuple(table.metadata().partition_columns)
        if self.spec.partition_by and tuple(self.spec.partition_by) != existing:
            raise SinkSchemaMismatchError(
                self.uri, f"target is partitioned by {list(existing)}, "
                f"partition_by asks for {list(self.spec.partition_by)}"
            )

    def _new_columns(self, table: DeltaTable, rows: Schema) -> list[Field]:
        """Columns of the rows that the target lacks, when ``mergeSchema`` lets them in.

        Columns match by name, as Delta reads them; any other difference is refused.
        """
        wanted = dict(_field_types(table.schema()))
        got = dict(_field_types(rows))
        added = [f for f in rows.fields if f.name not in wanted]
        differs = any(got.get(name) != kind for name, kind in wanted.items())
        if differs:
            raise SinkSchemaMismatchError(self.uri, f"target has {wanted}, rows have {got}")
        if added and not self._merge_schema:
            names = [f.name for f in added]
            raise SinkSchemaMismatchError(
                self.uri, f"the rows add column(s) {names}; set sink_options="
                f"{{'{MERGE_SCHEMA_OPTION}': 'true'}} to add them to the target, older rows "
                "reading null")
        return [Field(f.name, f.type, nullable=True) for f in added]

    @property
    def _merge_schema(self) -> bool:
        return str(self.spec.options.get(MERGE_SCHEMA_OPTION, "false")).lower() == "true"

    def _add_new_columns(self, rows: Schema) -> None:
        """Evolve the target before staging: a run killed after this commit finds the columns
        in place and appends its rows, so the rows still land once."""
        table = self._table()
        added = [] if table is None else self._new_columns(table, rows)
        if added:
            table.alter.add_columns(added)
            log.info("%s: added column(s) %s (mergeSchema)", self.uri, [f.name for f in added])

    def _partition_by(self) -> list[str]:
        table = self._table()
        if table is not None:
            return list(table.metadata().partition_columns)
        return list(self.spec.partition_by)

    def write(self, df: DataFrame | None, start_version: int, end_version: int) -> SinkWrite:
        if self.spec.use_delta_spark:
            return self._write_with_delta_spark(df, end_version)
        self._add_new_columns(_delta_schema(df))
        partition_by = self._partition_by()
        staging = f"{STAGING_FOLDER}/{end_version:020d}-{uuid.uuid4().hex}"
        log.info("writing batch %s..%s to %s/%s", start_version, end_version, self.uri, staging)
        df.write.mode("error").options(**PARQUET_TIMESTAMPS).partitionBy(
            *partition_by).parquet(f"{spark_uri(self.uri)}/{staging}")
        adds, rows = self._staged_add_actions(staging)
        schema = _arrow_schema(df)
        for _ in range(COMMIT_ATTEMPTS):
            # Delta's optimistic concurrency: check the snapshot the commit builds on; a commit
            # made since then is caught as a conflict by deltalake, and checked again here.
            table = self._table()
            if self._committed_by_another_run(table, start_version, end_version):
                log.warning("%s: another run committed source versions %s..%s (target version "
                            "%s) while this one wrote them; its staged files are dropped",
                            self.uri, start_version, end_version, table.version())
                self._drop_staged(staging)
                return SinkWrite(rows=0, sink_version=table.version())
            if self._commit(table, adds, schema, partition_by, start_version, end_version):
                return SinkWrite(rows=rows, sink_version=self._table().version())
        raise RuntimeError(f"{self.uri}: {COMMIT_ATTEMPTS} commits of source versions "
                           f"{start_version}..{end_version} lost to concurrent writers")

    def _committed_by_another_run(self, table: DeltaTable | None, start: int, end: int) -> bool:
        """Whether ``table`` holds ``start..end`` already: another run committed it since this
        one looked. Another split of the same versions is an overlap."""
        resume = self._first_unwritten_in(table, start, end)
        if start < resume <= end:
            raise SinkRangeOverlapError(self.uri, start, end, [(start, resume - 1)])
        return resume > end

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

    def _commit(self, table: DeltaTable | None, adds: list[AddAction], schema: pa.Schema,
                partition_by: list[str], start_version: int, end_version: int) -> bool:
        """One commit of ``adds`` with this app's txn on top of ``table`` (None: create it);
        False if a concurrent commit won."""
        # deltalake would retry a lost create as the next version, with the same rows: no retry
        properties = self.batch_commit_properties(start_version, end_version,
                                                  retries=0 if table is None else None)
        try:
            if table is None:
                create_table_with_add_actions(
                    self.uri, Schema.from_arrow(schema), adds, mode="error",
                    partition_by=partition_by or None, storage_options=self.spec.storage_options,
                    commit_properties=properties,
                )
            else:
                table.create_write_transaction(adds, "append", schema, partition_by=partition_by,
                                               commit_properties=properties)
        except CommitFailedError as error:
            log.warning("%s: concurrent commit, checking the log again: %s", self.uri, error)
            return False
        except DeltaError:
            if table is None and self._table() is not None:
                log.warning("%s: another run created the table first; checking it", self.uri)
                return False
            raise
        log.info("committed %d file(s) to %s with txn %s=%s", len(adds), self.uri,
                 self.spec.app_id, end_version)
        return True

    def batch_commit_properties(self, start_version: int, end_version: int, *,
                                retries: int | None = None) -> CommitProperties:
        """The batch's txn (appId, last source version) and its source range, for its commit."""
        return CommitProperties(
            max_commit_retries=retries,
            app_transactions=[Transaction(self.spec.app_id, end_version)],
            custom_metadata={SOURCE_VERSIONS_KEY: f"{start_version}..{end_version}",
                             APP_ID_KEY: self.spec.app_id,
                             **({SOURCE_KEY: self.spec.source} if self.spec.source else {})},
        )

    def _write_with_delta_spark(self, df: DataFrame, end_version: int) -> SinkWrite:
        # Delta's own idempotent-write options: the same txn semantics, through the Delta jars.
        (df.write.format("delta").mode("append")
           .option("txnAppId", self.spec.app_id).option("txnVersion", end_version)
           .partitionBy(*self.spec.partition_by).save(spark_uri(self.uri)))
        return SinkWrite(rows=None, sink_version=self._table().version())


def make_sink(spec: SinkSpec) -> Sink:
    """The sink a :class:`SinkSpec` describes."""
    from airflow_provider_delta.job.merge_sink import DeltaMergeSink  # it builds on this module

    kinds: dict[str, type[Sink]] = {
        "delta": DeltaAppendSink, "delta-merge": DeltaMergeSink, "format": FormatSink,
    }
    return kinds[spec.kind](spec) if spec.kind in kinds else NoSink()


SOURCE_AS_TARGET_FIX = "Give a target path other than the source table's."
SOURCE_VERSIONS_KEY = "airflow_provider_delta.source_versions"
APP_ID_KEY = "airflow_provider_delta.app_id"
SOURCE_KEY = "airflow_provider_delta.source"
COMMIT_ATTEMPTS = 10


def _txn_version(table: DeltaTable, spec: SinkSpec) -> int | None:
    version = table.transaction_version(spec.app_id)
    if version is None and spec.legacy_app_id:
        return table.transaction_version(spec.legacy_app_id)
    return version


@dataclass(frozen=True)
class ProviderCommit:
    """A commit this provider made to the target: who (appId), from where, which versions."""

    app_id: str | None
    source: str | None  # None: committed before sources were recorded
    first: int
    last: int
    target_version: int


def _provider_commits(table: DeltaTable) -> list[ProviderCommit]:
    """The commits of this provider still in the target's log history."""
    commits = []
    for info in table.history():
        if SOURCE_VERSIONS_KEY in info:
            first, _, last = info[SOURCE_VERSIONS_KEY].partition("..")
            commits.append(ProviderCommit(info.get(APP_ID_KEY), info.get(SOURCE_KEY),
                                          int(first), int(last), info["version"]))
    return commits


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


def normalised_location(path_or_uri: str) -> str:
    """One spelling per location: plain path or ``file://``, ``..``, a trailing ``/``,
    ``%``-escapes, symbolic links (local paths), ``s3a://`` for ``s3://``."""
    scheme, _, rest = to_uri(path_or_uri).partition("://")
    scheme = "s3" if scheme.lower() in ("s3a", "s3n") else scheme.lower()
    authority, _, path = rest.partition("/")
    path = posixpath.normpath("/" + unquote(path))
    if scheme == "file":
        path = os.path.realpath(path)
    return f"{scheme}://{authority}{path}".rstrip("/")


def refuse_source_as_target(source_uri: str, target: str) -> None:
    """A target at the source's own location would append the source's rows to itself."""
    if normalised_location(source_uri) == normalised_location(target):
        raise SinkTargetError(
            to_uri(target), f"it is the source table {source_uri}: every row would be "
            "appended to the table it came from", SOURCE_AS_TARGET_FIX)


def refuse_file_target(target_uri: str, storage_options: dict[str, str] | None) -> None:
    if _is_object(target_uri, storage_options):
        raise SinkTargetError(target_uri, "it is a file, not a folder",
                              "Give a folder path as target: a new or empty one, or a Delta table.")


def refuse_non_delta_folder(target_uri: str, storage_options: dict[str, str] | None) -> None:
    """A target that is no Delta table yet must be a new or empty folder (staged files of an
    attempt that never committed are ours and allowed)."""
    stray = _first_foreign_file(target_uri, storage_options)
    if stray is not None:
        raise SinkTargetError(
            target_uri, f"it is a folder of files that are not a Delta table (e.g. {stray}); "
            "the delta sink would create a _delta_log beside them and leave them untracked "
            "(a VACUUM would delete them)",
            "Give a new path or an empty folder as target, or convert the folder to a Delta "
            "table first (e.g. deltalake's convert_to_deltalake).")


def _is_object(uri: str, storage_options: dict[str, str] | None) -> bool:
    if uri.startswith("file://"):
        return os.path.isfile(uri[len("file://"):])
    folder, name = split_uri(uri)
    try:
        obstore.head(open_store(folder, storage_options), name)
    except (NotFoundError, FileNotFoundError):
        return False
    return True


def _first_foreign_file(uri: str, storage_options: dict[str, str] | None) -> str | None:
    """The first file under ``uri`` that neither a Delta log nor our staging explains."""
    if uri.startswith("file://") and not os.path.isdir(uri[len("file://"):]):
        return None  # listing through obstore would create the folder
    for meta in list_files(uri, "", storage_options):
        if meta["path"].split("/")[0] not in (STAGING_FOLDER, "_delta_log"):
            return meta["path"]
    return None


def _arrow_schema(df: DataFrame) -> pa.Schema:
    """The rows' Arrow schema, timestamps in UTC (as Spark writes them to Parquet)."""
    import inspect

    from pyspark.sql.pandas.types import to_arrow_schema

    if "timezone" in inspect.signature(to_arrow_schema).parameters:
        return to_arrow_schema(df.schema, timezone="UTC")
    return to_arrow_schema(df.schema)  # pyspark < 4.2: timestamps are always UTC


def _delta_schema(df: DataFrame) -> Schema:
    return Schema.from_arrow(_arrow_schema(df))


def _holds_variant(kind: Any) -> bool:
    from pyspark.sql.types import ArrayType, MapType, StructType, VariantType

    if isinstance(kind, StructType):
        return any(_holds_variant(f.dataType) for f in kind.fields)
    if isinstance(kind, ArrayType):
        return _holds_variant(kind.elementType)
    if isinstance(kind, MapType):
        return _holds_variant(kind.keyType) or _holds_variant(kind.valueType)
    return isinstance(kind, VariantType)


def _field_types(schema: Schema) -> list[tuple[str, Any]]:
    """(name, type) per column, ignoring nullability and field metadata."""
    return [(f["name"], f["type"]) for f in json.loads(schema.to_json())["fields"]]


def _partition_values(relative_path: str) -> dict[str, str | None]:
    """Hive-style ``k=v`` folders Spark wrote, unescaped, as Delta's string partition values."""
    values: dict[str, str | None] = {}
    for folder in relative_path.split("/")[:-1]:
        key, _, raw = folder.partition("=")
        value = unquote(raw)
        values[unquote(key)] = None if value == HIVE_NULL else value
    return values


def written_parquet_files(root: str, folder: str, storage_options: dict[str, str] | None
                          ) -> list[tuple[dict[str, Any], str, int]]:
    """(obstore metadata, path inside ``folder``, row count) of each data file Spark wrote."""
    store = open_store(root, storage_options)
    files = []
    for meta in list_files(root, folder, storage_options):
        relative = meta["path"][len(folder) + 1:]
        if _is_data_file(relative):
            files.append((meta, relative, _parquet_num_rows(store, meta["path"], meta["size"])))
    return files


def _is_data_file(relative_path: str) -> bool:
    """False for what Spark's committers write beside the data: markers, checksums, scratch.

    Folders are ``key=value`` partitions (whatever their names start with); anything else
    (``_temporary/``, ``.spark-staging-*/``) is a committer's scratch space.
    """
    *folders, name = relative_path.split("/")
    if not all("=" in folder for folder in folders):
        return False
    marker = name == "_SUCCESS" or name.startswith(("_committed_", "_started_"))
    checksum = name.startswith(".") and name.endswith(".crc")
    return not (marker or checksum)


def _parquet_num_rows(store: Any, path: str, size: int) -> int:
    """Row count from a Parquet footer, fetched with two ranged reads instead of the file."""
    tail = bytes(obstore.get_range(store, path, start=size - 8, end=size))
    footer_length = struct.unpack("<I", tail[:4])[0]
    footer = bytes(obstore.get_range(store, path, start=size - 8 - footer_length, end=size))
    return pq.read_metadata(pa.BufferReader(b"PAR1" + footer)).num_rows
