"""Errors a DAG author must be able to tell apart.

Every message names the table, the version where one applies, and what to do next.
Errors are *permanent* (retrying cannot help) unless the class says otherwise; the
trigger and the sensor use :attr:`DeltaProviderError.permanent` to choose between
failing at once and retrying with backoff.
"""

from __future__ import annotations

from collections.abc import Iterable


class DeltaProviderError(Exception):
    """Base class of every error this provider raises on purpose."""

    permanent = True

    def __init__(self, message: str, *, table_uri: str | None = None, version: int | None = None):
        super().__init__(message)
        self.table_uri = table_uri
        self.version = version


class TableNotFoundError(DeltaProviderError):
    """The path does not exist or holds no ``_delta_log`` with commits or checkpoints."""

    def __init__(self, table_uri: str, detail: str = ""):
        extra = f" ({detail})" if detail else ""
        super().__init__(
            f"{table_uri} is not a Delta table: no commit or checkpoint under "
            f"{table_uri.rstrip('/')}/_delta_log/{extra}. Check the table_uri and the "
            "connection's credentials, or create the table first.",
            table_uri=table_uri,
        )


class VersionNotAvailableError(DeltaProviderError):
    """A requested version (or timestamp) lies outside what the log can recreate."""

    def __init__(self, table_uri: str, requested: object, earliest: int | None, latest: int | None,
                 hint: str = ""):
        window = f"versions {earliest}..{latest}" if earliest is not None else "no versions"
        super().__init__(
            f"{table_uri}: {requested} is not available; the log can recreate {window}. "
            + (hint or "Choose a version inside that window."),
            table_uri=table_uri,
            version=requested if isinstance(requested, int) else None,
        )
        self.earliest = earliest
        self.latest = latest


class LogGapError(DeltaProviderError):
    """Commits are missing inside a range (Delta's failOnDataLoss)."""

    def __init__(self, table_uri: str, missing: Iterable[int]):
        missing = sorted(missing)
        shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
        super().__init__(
            f"{table_uri}: the transaction log has a gap, commit(s) {shown} are missing "
            "(data loss, as Delta's failOnDataLoss reports it). The log was cleaned or "
            "damaged; restart from a version after the gap, e.g. reset the watermark or "
            "read a snapshot with DeltaTimeTravelOperator.",
            table_uri=table_uri,
            version=missing[0] if missing else None,
        )
        self.missing = missing


class InvalidLogError(DeltaProviderError):
    """The log is not a valid Delta log (no protocol or metadata, a missing sidecar, ...)."""

    def __init__(self, table_uri: str, version: int | None, detail: str):
        super().__init__(self._message(table_uri, version, detail), table_uri=table_uri,
                         version=version)

    def _message(self, table_uri: str, version: int | None, detail: str) -> str:
        at = f" at version {version}" if version is not None else ""
        return (f"{table_uri}: the transaction log cannot be read{at}: {detail}. The log is "
                "damaged or was not written by a Delta writer; repair it or read a version "
                "where it is valid.")


class UnsupportedFeatureError(DeltaProviderError):
    """The table needs a reader feature (or protocol version) this provider does not read."""

    def __init__(self, table_uri: str, feature: str, version: int | None = None, hint: str = ""):
        at = f" at version {version}" if version is not None else ""
        super().__init__(
            f"{table_uri}{at} requires reader feature {feature!r}, which this provider does "
            "not support. "
            + (hint or "Read it with an engine that supports the feature (e.g. delta-spark on a "
               "cluster with the Delta jars), or drop the feature from the table."),
            table_uri=table_uri,
            version=version,
        )
        self.feature = feature


class DataChangeError(DeltaProviderError):
    """A commit inside the range removed or rewrote data (RemoveFile with dataChange=true)."""

    def __init__(self, table_uri: str, version: int, removed_path: str, allowed_by: str):
        super().__init__(
            f"{table_uri}: version {version} changes existing data (it removes {removed_path}); "
            "an incremental read only accepts appends. Set "
            f"{allowed_by} to read past it, or reload the table with a snapshot read.",
            table_uri=table_uri,
            version=version,
        )
        self.removed_path = removed_path
        self.allowed_by = allowed_by


class SchemaChangeError(DeltaProviderError):
    """A non-additive schema change (drop, rename, type change) inside the range."""

    def __init__(self, table_uri: str, version: int, detail: str):
        super().__init__(
            f"{table_uri}: version {version} changes the schema in a non-additive way "
            f"({detail}). Split the range so it ends at version {version - 1} and starts a "
            f"new load from version {version}, or reload the table with a snapshot read.",
            table_uri=table_uri,
            version=version,
        )


class MissingDataFileError(DeltaProviderError):
    """A data file the log references no longer exists (vacuumed)."""

    def __init__(self, table_uri: str, version: int | None, path: str):
        at = f"version {version}" if version is not None else "the requested version"
        super().__init__(
            f"{table_uri}: data file {path} of {at} is gone (vacuumed?). Read a newer "
            "version, or restore the file; raise the table's "
            "delta.deletedFileRetentionDuration to keep files for longer.",
            table_uri=table_uri,
            version=version,
        )
        self.path = path


class TransientStorageError(DeltaProviderError):
    """The store failed in a way that a retry may fix (network, throttling)."""

    permanent = False

    def __init__(self, table_uri: str, detail: str):
        super().__init__(
            f"{table_uri}: storage request failed ({detail}); it will be retried.",
            table_uri=table_uri,
        )
        self.detail = detail


class WatermarkError(DeltaProviderError):
    """A stored watermark is malformed, or ahead of the table (recreated or replaced)."""


class SinkSchemaMismatchError(DeltaProviderError):
    """The rows to write do not fit the existing target table (names, types or partitioning)."""

    def __init__(self, target_uri: str, detail: str):
        super().__init__(
            f"{target_uri}: the rows to write do not match the target table ({detail}); nothing "
            "was committed. Change the transform or sql so it returns the target's columns and "
            "types, or point the sink at a new table path.",
            table_uri=target_uri,
        )


class DamagedLogFileError(InvalidLogError):
    """A file of ``_delta_log`` cannot be read: torn or garbage JSON, an empty commit, a
    truncated or empty checkpoint, a ``_last_checkpoint`` naming a checkpoint that is gone."""

    def __init__(self, table_uri: str, version: int, file_name: str, damage: str, remedy: str = ""):
        self.file_name = file_name
        self.damage = damage
        self.remedy = remedy
        super().__init__(table_uri, version, damage)

    def _message(self, table_uri: str, version: int | None, detail: str) -> str:
        return (f"{table_uri}: _delta_log/{self.file_name} (version {version}) is damaged: "
                f"{detail}. " + (self.remedy or "Restore the file from a backup or from the "
                                 "writer; versions that need it cannot be read until then."))


class StorageAccessError(DeltaProviderError):
    """The store refused the credentials (HTTP 401/403): retrying cannot help."""

    def __init__(self, table_uri: str, detail: str, credentials: str):
        super().__init__(
            f"{table_uri}: the store refused access ({detail}). Check {credentials}: they must "
            f"allow listing and reading {table_uri.rstrip('/')}/_delta_log/.",
            table_uri=table_uri,
        )


class StorageLocationError(DeltaProviderError):
    """The table URI or the storage options do not address a store: an unknown scheme, an
    unknown option, a request the store rejects as malformed. Retrying cannot help."""

    def __init__(self, table_uri: str, detail: str):
        super().__init__(
            f"{table_uri}: the store cannot be used ({detail}). Check the table_uri (scheme "
            "s3://, s3a://, gs://, az://, abfss:// or a local path, then bucket or container) and "
            "the storage options of the connection given as delta_conn_id (endpoint, region).",
            table_uri=table_uri,
        )


class InvalidParameterError(DeltaProviderError, ValueError):
    """A parameter that cannot work: an operator's, sensor's or trigger's, refused before any
    Spark job is submitted, or an argument of the core's and the Spark layer's functions
    (``task_id`` None). A ``ValueError`` too, so that code catching those keeps working."""

    def __init__(self, task_id: str | None, parameter: str, value: object, problem: str,
                 fix: str, table_uri: str | None = None):
        task = f"{task_id}: " if task_id is not None else ""
        table = f"{table_uri}: " if table_uri else ""
        super().__init__(f"{task}{table}{parameter}={value!r} {problem}; {fix}",
                         table_uri=table_uri)
        self.parameter = parameter


class MergeInputError(DeltaProviderError):
    """A batch a ``delta-merge`` sink cannot apply by its ``merge_keys``."""

    def __init__(self, target_uri: str, detail: str):
        super().__init__(
            f"{target_uri}: the delta-merge sink refuses the batch: {detail}. Nothing was "
            "committed; the watermark stays where it was.",
            table_uri=target_uri,
        )


class CorruptDeletionVectorError(DeltaProviderError):
    """A deletion vector's bytes do not match its descriptor (size, checksum or format)."""


class SinkTargetError(DeltaProviderError):
    """The sink's target cannot be written: it is the source table, a file, or a folder of
    files that are not a Delta table. Raised before any Spark starts."""

    def __init__(self, target_uri: str, problem: str, fix: str):
        super().__init__(f"{target_uri}: {problem}; nothing was written. {fix}",
                         table_uri=target_uri)


class SinkRangeOverlapError(DeltaProviderError):
    """A requested source range overlaps what this task already committed to its target
    (other than a prefix a re-run resumes after): loading it would duplicate rows."""

    def __init__(self, target_uri: str, start: int, end: int | None,
                 committed: list[tuple[int, ...]]):
        requested = f"{start}..{'latest' if end is None else end}"
        after = max(c[1] for c in committed) + 1
        super().__init__(self._message(target_uri, requested, committed, after),
                         table_uri=target_uri, version=start)
        self.committed = [(c[0], c[1]) for c in committed]

    def _message(self, target_uri: str, requested: str, committed: list[tuple[int, ...]],
                 after: int) -> str:
        shown = ", ".join(f"{first}..{last}" for first, last in committed)
        return (f"{target_uri}: source versions {requested} overlap the ranges this task "
                f"already committed there ({shown}); nothing was written, as loading them again "
                f"would duplicate rows. Load a range that starts after them "
                f"(start_version={after}), or write this range to a new target.")


class SparkConnectError(DeltaProviderError):
    """A ``spark_connect`` connection refused the client, or cannot honour an option."""


class SparkConnectUnavailableError(SparkConnectError):
    """The Spark Connect server cannot be reached; a retry may find it back."""

    permanent = False

    def __init__(self, conn_id: str, endpoint: str, table_uri: str, what: str, detail: str):
        super().__init__(
            f"{table_uri}: {what} not loaded: the Spark Connect server of connection "
            f"{conn_id!r} ({endpoint}) cannot be reached ({detail}). Start the server or fix "
            "the connection's host and port; a retry of the task reconnects and loads only "
            "what the target does not hold yet.",
            table_uri=table_uri,
        )


class MissingSparkExtraError(DeltaProviderError, ImportError):
    """The operators run Spark jobs; an install without the ``spark`` or ``connect`` extra
    lacks the Spark provider they are built on."""

    def __init__(self, what: str):
        super().__init__(
            f"{what} need the Apache Spark provider (apache-airflow-providers-apache-spark), "
            "which is not installed. Install 'airflow-provider-delta[spark]' (spark-submit and "
            "local Spark, with the full pyspark) or 'airflow-provider-delta[connect]' (Spark "
            "Connect only, with pyspark-client); the sensor, trigger and hook need neither."
        )


def _writers(committed: list[tuple[int, ...]]) -> str:
    """Committed ranges with the appId and target version of each."""
    return ", ".join(f"{first}..{last} by appId {app_id} (target version {version})"
                     for first, last, app_id, version in committed)


class SinkWriterOverlapError(SinkRangeOverlapError):
    """A requested source range overlaps what another task (another appId) committed to the
    same target from the same source table: loading it would duplicate rows."""

    def __init__(self, target_uri: str, source_uri: str, start: int, end: int | None,
                 committed: list[tuple[int, int, str, int]]):
        self.source_uri = source_uri
        super().__init__(target_uri, start, end, committed)

    def _message(self, target_uri: str, requested: str, committed: list[tuple[int, ...]],
                 after: int) -> str:
        shown = _writers(committed)
        return (f"{target_uri}: source versions {requested} of {self.source_uri} overlap what "
                f"another task committed there ({shown}); nothing was written, as loading them "
                f"again would duplicate rows. Load a range outside them (e.g. "
                f"start_version={after}, or move this task's watermark past them), write to a "
                "new target, or set allow_overlapping_writers=True on every task writing this "
                "target if each writes different rows (e.g. filtered subsets).")


class SinkRecordsExpiredError(SinkRangeOverlapError):
    """A requested source range was loaded to the target, but the records proving it expired
    under the target's ``delta.setTransactionRetentionDuration`` (Delta forgets them at its next
    checkpoint): loading it again would duplicate rows."""

    def __init__(self, target_uri: str, start: int, end: int | None,
                 committed: list[tuple[int, int, str, int]], retention: str | None):
        self.retention = retention
        super().__init__(target_uri, start, end, committed)

    def _message(self, target_uri: str, requested: str, committed: list[tuple[int, ...]],
                 after: int) -> str:
        shown = _writers(committed)
        return (f"{target_uri}: source versions {requested} were loaded there already ({shown}), "
                "but the records of those loads expired under the target's "
                f"delta.setTransactionRetentionDuration={self.retention!r}; nothing was written, "
                f"as loading them again would duplicate rows. Load a range after them "
                f"(start_version={after}), or raise the retention above the longest pause "
                "between this task's loads.")


class SinkCommitConflictError(DeltaProviderError):
    """Every commit attempt of a batch lost to other writers committing to the same target:
    a retry of the task resumes after what the target holds by then."""

    permanent = False

    def __init__(self, target_uri: str, start: int, end: int, attempts: int):
        super().__init__(
            f"{target_uri}: {attempts} commits of source versions {start}..{end} lost to "
            "concurrent writers; nothing of this batch was committed. The task's retry loads it "
            "again; if other jobs keep committing to this target, give this load a target of "
            "its own or run the writers one after the other.",
            table_uri=target_uri, version=start,
        )


class SinkHardLinksError(DeltaProviderError):
    """A local target's file system refuses hard links, which put-if-absent commits use."""

    def __init__(self, target_uri: str, version: int, detail: str):
        super().__init__(
            f"{target_uri}: version {version} was not committed: the file system refuses hard "
            f"links ({detail}), with which this sink and deltalake write a commit file only "
            "where none is. Put the target on a file system with hard links or, if no other "
            "writer commits to it at the same time, set its storage option "
            "allow_unsafe_rename to \"true\" (deltalake then commits by a plain rename).",
            table_uri=target_uri, version=version,
        )


class IntervalNotOverError(DeltaProviderError):
    """A time range whose versions are not all committed yet: it ends in the future, and no
    commit at or after its end exists."""

    def __init__(self, table_uri: str, start: str, end: str, newest_version: int,
                 newest_time: str, now: str):
        super().__init__(
            f"{table_uri}: the interval [{start}, {end}) is not over (now is {now}) and the "
            f"newest commit, version {newest_version}, is at {newest_time}: commits may still "
            "come in it. Load it after its end (a data-interval schedule runs it then), or "
            "retry the task later.",
            table_uri=table_uri,
        )


class MergeOrderError(DeltaProviderError):
    """A change feed range older than what a ``delta-merge`` target holds: merged now, its
    changes would overwrite the newer rows."""

    def __init__(self, table_uri: str, target: str, first: int, last: int, held: int,
                 interval: str):
        super().__init__(
            f"{table_uri}: {interval} holds versions {first}..{last}, but the delta-merge "
            f"target {target} holds the changes up to version {held} already: merged now, "
            "their older values would overwrite newer rows. Load the intervals in order "
            "(catch-up runs do), or rebuild the target from the first one.",
            table_uri=table_uri,
        )


class AirflowVersionError(DeltaProviderError):
    """A feature of a newer Airflow than the installed one (raised at DAG parse where possible)."""

    def __init__(self, feature: str, needs: str, installed: str, instead: str, *,
                 table_uri: str | None = None):
        where = f"{table_uri}: " if table_uri else ""
        super().__init__(
            f"{where}{feature} needs Airflow >= {needs}, but this is Airflow {installed}. "
            f"Upgrade Airflow, or {instead}.",
            table_uri=table_uri,
        )
        self.feature = feature
        self.needs = needs
