"""Plain data that the log core hands to the Spark layer and the Airflow skin.

Nothing here touches storage; everything is immutable and cheap to pickle or turn into JSON
(the operator ships a plan's range, never the plan, to the Spark driver).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_delta.core.arrow import combined, to_python


class LoadStart(NamedTuple):
    """Where a load starts: the snapshot at ``version``, or the changes from ``version`` on.

    The one shape of it: the watermark policy decides one, the sensor and the trigger announce
    one, the operator resolves one and the job spec carries it to the driver."""

    mode: Literal["snapshot", "changes"]
    version: int


@dataclass(frozen=True)
class DeletionVectorDescriptor:
    """A file's deletion vector as the log describes it (PROTOCOL.md, "Deletion Vectors")."""

    storage_type: str  # "u" (relative, UUID-named), "p" (absolute path) or "i" (inline)
    path_or_inline_dv: str
    size_in_bytes: int
    cardinality: int
    offset: int | None = None

    @property
    def unique_id(self) -> str:
        """The identity Delta uses to tell two vectors apart."""
        base = f"{self.storage_type}{self.path_or_inline_dv}"
        return base if self.offset is None else f"{base}@{self.offset}"


@dataclass(frozen=True)
class TableMetadata:
    """The ``metaData`` action in force at some version, with the reader protocol."""

    table_id: str
    schema: Mapping[str, Any]  # Delta schema JSON, parsed: {"type": "struct", "fields": [...]}
    partition_columns: tuple[str, ...] = ()
    configuration: Mapping[str, str] = field(default_factory=dict)
    min_reader_version: int = 1
    reader_features: tuple[str, ...] = ()

    @property
    def column_mapping_mode(self) -> str:
        """``none``, ``name`` or ``id``."""
        return self.configuration.get("delta.columnMapping.mode", "none")


@dataclass(frozen=True)
class PlannedFile:
    """One data file to read, from one AddFile action."""

    version: int  # the commit that added it (for a snapshot: the snapshot's version)
    path: str  # absolute, decoded URI, e.g. file:///tmp/t/part=a%20b/x.parquet -> file:///tmp/t/part=a b/x.parquet
    size: int
    partition_values: Mapping[str, Any]  # typed by the table schema; None for null
    metadata: TableMetadata  # schema and configuration in force at ``version``
    deletion_vector: DeletionVectorDescriptor | None = None
    num_records: int | None = None


@dataclass(frozen=True)
class Plan:
    """The files to read for a version range (or a snapshot), in log order.

    ``file_table`` holds them as one Arrow table (columns in
    :mod:`airflow_provider_delta.core.file_table`); ``files`` is a per-file object view of it
    for small plans and tests (its timestamps with a time zone make pyarrow import pandas).
    """

    table_uri: str
    start_version: int
    end_version: int
    file_table: pa.Table
    metadata: TableMetadata  # in force at ``end_version``; the schema the result has
    commit_timestamps: Mapping[int, int] = field(default_factory=dict)  # version -> epoch ms
    # version -> metadata taking effect there, for the start version and every metadata change
    metadata_changes: Mapping[int, TableMetadata] = field(default_factory=dict)

    @property
    def total_bytes(self) -> int:
        return pc.sum(self.file_table.column("size")).as_py() or 0

    def metadata_at(self, version: int) -> TableMetadata:
        """Metadata in force at ``version``, from the plan's metadata changes."""
        earlier = [v for v in self.metadata_changes if v <= version]
        return self.metadata_changes[max(earlier)] if earlier else self.metadata

    @cached_property
    def files(self) -> tuple[PlannedFile, ...]:
        columns = {name: self.file_table.column(name).to_pylist()
                   for name in self.file_table.column_names if name != "partition_values"}
        values = combined(self.file_table.column("partition_values"))
        fields = {f.name: to_python(values.field(f.name)) for f in values.type}
        columns["partition_values"] = [dict(zip(fields, row)) for row in zip(
            *fields.values())] if fields else [{}] * len(values)
        metadata = {v: self.metadata_at(v) for v in set(columns["version"])}
        return tuple(
            PlannedFile(version=version, path=path, size=size, partition_values=values,
                        metadata=metadata[version], num_records=records,
                        deletion_vector=DeletionVectorDescriptor(**dv) if dv else None)
            for version, path, size, records, dv, values in zip(
                columns["version"], columns["path"], columns["size"], columns["num_records"],
                columns["deletion_vector"], columns["partition_values"]))

    def __len__(self) -> int:
        return self.file_table.num_rows

    def __iter__(self) -> Iterator[PlannedFile]:
        return iter(self.files)
