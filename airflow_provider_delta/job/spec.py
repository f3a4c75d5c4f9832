"""The job spec: what the operator asks the Spark driver to do, as a small JSON file.

The operator writes a :class:`JobSpec`; the driver program (:mod:`.driver`) reads it, runs the
batches and writes a :class:`JobResult` back. Both are plain JSON so that they survive the trip
through ``spark-submit`` (a file shipped with ``--files``, or an object-store URI in cluster mode).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, TypedDict

from airflow_provider_delta.core.model import LoadStart


class SinkKind(StrEnum):
    """What the driver does with the rows (:attr:`SinkSpec.kind`)."""

    DELTA = "delta"
    DELTA_MERGE = "delta-merge"
    FORMAT = "format"
    NONE = "none"


# The operators' ``sink`` names that are Delta sinks; any other name is a Spark format.
DELTA_SINK_NAMES = {"delta": SinkKind.DELTA, "delta-spark": SinkKind.DELTA,
                    "delta-merge": SinkKind.DELTA_MERGE}


def sink_kind(sink: str | None) -> SinkKind:
    """The kind of the operators' ``sink`` parameter (None: the transform writes by itself)."""
    return SinkKind.NONE if sink is None else DELTA_SINK_NAMES.get(sink, SinkKind.FORMAT)


@dataclass(frozen=True)
class SinkSpec:
    """Where the rows go.

    ``kind`` is ``"delta"`` (append to a Delta table through ``deltalake``, exactly once),
    ``"delta-merge"`` (apply a change feed to a Delta table by ``merge_keys``, exactly once),
    ``"format"`` (any Spark data source format, one folder per batch, overwritten on re-run)
    or ``"none"`` (the transform writes by itself).
    """

    kind: SinkKind = SinkKind.NONE
    path: str | None = None
    format: str = "parquet"
    partition_by: tuple[str, ...] = ()
    options: dict[str, str] = field(default_factory=dict)
    app_id: str | None = None  # Delta txn appId; set by the operator for delta sinks
    # The appId older versions of this provider gave the same DAG, task and target: its txn
    # is the resume point while the target holds no commit of ``app_id`` yet.
    legacy_app_id: str | None = None
    use_delta_spark: bool = False  # write with format("delta") (needs the Delta jars)
    storage_options: dict[str, str] | None = None
    merge_keys: tuple[str, ...] = ()  # the key columns of a delta-merge sink
    # The source's normalised location, recorded in each commit: another appId's commits of
    # the same source that overlap a request are refused unless overlapping writers are allowed.
    source: str | None = None
    allow_overlapping_writers: bool = False

    def __post_init__(self) -> None:
        if self.kind not in set(SinkKind):
            raise ValueError(f"sink kind {self.kind!r} is not one of {', '.join(SinkKind)}")
        object.__setattr__(self, "kind", SinkKind(self.kind))
        if self.kind != SinkKind.NONE and not self.path:
            raise ValueError(f"a '{self.kind}' sink needs a path")
        if (self.kind == SinkKind.DELTA_MERGE) != bool(self.merge_keys):
            raise ValueError("merge_keys go with a delta-merge sink, and it needs them")
        object.__setattr__(self, "partition_by", tuple(self.partition_by))
        object.__setattr__(self, "merge_keys", tuple(self.merge_keys))


@dataclass(frozen=True)
class JobSpec:
    """One Spark job: the snapshot at ``start.version``, or the changes from ``start.version``
    to ``end_version`` (None: the latest). A snapshot's ``end_version`` is its own version."""

    table_uri: str
    start: LoadStart
    sink: SinkSpec
    end_version: int | None = None
    ignore_deletes: bool = False
    ignore_changes: bool = False
    skip_change_commits: bool = False
    max_files: int | None = None
    max_bytes: int | None = None
    change_feed: bool = False  # read the row changes (read_change_feed), not the added files
    transform: str | None = None  # "module:function" taking (spark, df, context)
    sql: str | None = None  # runs over the temp view ``changes``
    storage_options: dict[str, str] | None = None
    context: dict[str, Any] = field(default_factory=dict)  # handed to the transform

    def __post_init__(self) -> None:
        start = LoadStart(*self.start)  # a JSON list, read back
        if start.mode not in ("changes", "snapshot"):
            raise ValueError(f"job mode {start.mode!r} is not 'changes' or 'snapshot'")
        if self.transform and self.sql:
            raise ValueError("give either transform or sql, not both")
        object.__setattr__(self, "start", start)
        if start.mode == "snapshot":
            object.__setattr__(self, "end_version", start.version)

    @property
    def mode(self) -> str:
        """``"snapshot"`` or ``"changes"``, as the result and the logs name it."""
        return self.start.mode

    def covered_range(self) -> tuple[int, int | None]:
        """The source versions the job writes. In a Delta sink a snapshot covers every version
        up to its own (its commit records ``0..v``); a format sink's folder is named ``v-v``."""
        if self.mode == "snapshot" and self.sink.kind == SinkKind.DELTA:
            return 0, self.end_version
        return self.start.version, self.end_version

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True, default=str)

    @classmethod
    def from_json(cls, text: str) -> JobSpec:
        raw = json.loads(text)
        return cls(**{**raw, "sink": SinkSpec(**raw["sink"])})


class BatchRecord(TypedDict):
    """One batch in :class:`LoadResult`: the source versions it read and what it wrote."""

    start_version: int
    end_version: int
    files: int
    bytes: int
    rows: int | None
    sink_version: int | None


class LoadResult(TypedDict):
    """What a load task returns, its XCom ``return_value`` (a stable shape: keys may be
    added, none removed or renamed).

    ``table_uri``: the source. ``mode``: ``"changes"`` or ``"snapshot"``.
    ``start_version``/``end_version``: the source versions covered (both None: nothing new).
    ``batches``: each batch (:class:`BatchRecord`). ``files``/``bytes``: the data files read.
    ``rows``: rows written (None when the transform wrote by itself). ``sink_version``: the
    target's newest Delta version written (None: no Delta sink, or nothing written).
    ``spark_ui_url``: the Spark driver's web UI, where it had one.
    """

    table_uri: str
    mode: str
    start_version: int | None
    end_version: int | None
    batches: list[BatchRecord]
    spark_ui_url: str | None
    files: int
    bytes: int
    rows: int | None
    sink_version: int | None


@dataclass(frozen=True)
class BatchResult:
    """What one batch read and wrote."""

    start_version: int
    end_version: int
    files: int
    bytes: int
    rows: int | None  # rows written; None when the transform wrote by itself
    sink_version: int | None  # the target's Delta version holding this batch, if a Delta sink


@dataclass(frozen=True)
class JobResult:
    """The driver's report: the source range it covered and every batch."""

    table_uri: str
    mode: str
    start_version: int | None
    end_version: int | None
    batches: tuple[BatchResult, ...] = ()
    spark_ui_url: str | None = None  # the driver's web UI, where it had one

    @property
    def rows(self) -> int | None:
        counts = [b.rows for b in self.batches if b.rows is not None]
        return sum(counts) if counts else None

    @property
    def sink_version(self) -> int | None:
        versions = [b.sink_version for b in self.batches if b.sink_version is not None]
        return max(versions) if versions else None

    def to_dict(self) -> LoadResult:
        """The JSON form, with totals, as the operator pushes it to XCom."""
        return {
            **asdict(self),
            "batches": [BatchRecord(**asdict(b)) for b in self.batches],
            "files": sum(b.files for b in self.batches),
            "bytes": sum(b.bytes for b in self.batches),
            "rows": self.rows,
            "sink_version": self.sink_version,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> JobResult:
        raw = json.loads(text)
        batches = tuple(BatchResult(**b) for b in raw["batches"])
        return cls(
            table_uri=raw["table_uri"],
            mode=raw["mode"],
            start_version=raw["start_version"],
            end_version=raw["end_version"],
            batches=batches,
            spark_ui_url=raw.get("spark_ui_url"),
        )


def stable_app_id(dag_id: str, task_id: str, target: str, source: str | None = None,
                  map_index: int = -1) -> str:
    """The Delta ``txn`` appId of one (DAG, task, map index, source, target): the same on every
    run and retry. Without ``source``, the appId older versions used (DAG, task, target only)."""
    parts = [dag_id, task_id, target.rstrip("/")]
    if source is not None:
        parts += [source.rstrip("/"), str(map_index)]
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()
    return f"airflow-provider-delta-{digest[:32]}"
