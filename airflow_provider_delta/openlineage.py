"""OpenLineage facets of the operators and the sensor.

Delta tables are datasets named by OpenLineage's naming convention (namespace = the storage's
scheme and authority, name = the table's path) with the standard ``version`` facet (the
source version read, the target version committed) and ``schema`` facet, and a run facet
``airflowProviderDelta`` holding the source range and the target version.

Only the ``get_openlineage_facets_on_complete`` methods import this module, and only the
OpenLineage provider calls them: without that provider nothing here is imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import attr
from airflow.providers.common.compat.openlineage.facet import (
    Dataset,
    RunFacet,
    SchemaDatasetFacet,
    SchemaDatasetFacetFields,
)
from airflow.providers.openlineage.extractors import OperatorLineage
from openlineage.client.generated.dataset_version_dataset import DatasetVersionDatasetFacet

from airflow_provider_delta.core.model import TableMetadata
from airflow_provider_delta.job.spec import JobResult
from airflow_provider_delta.storage import to_uri

RUN_FACET = "airflowProviderDelta"


@attr.define
class DeltaVersionsRunFacet(RunFacet):
    """The versions of a Delta source a run covered, and the target version it committed."""

    sourceTable: str  # noqa: N815 (OpenLineage facets use camelCase)
    mode: str  # "changes" or "snapshot"
    sourceStartVersion: int | None  # noqa: N815
    sourceEndVersion: int | None  # noqa: N815
    targetVersion: int | None = None  # noqa: N815


def dataset_name(table_uri: str) -> tuple[str, str]:
    """(namespace, name) of a table: ``("file", "/lake/t")``, ``("s3://bucket", "lake/t")``."""
    uri = to_uri(table_uri)
    if uri.startswith("file://"):  # a local path, which urlsplit would cut at "#" or "?"
        return "file", uri[len("file://"):]
    parts = urlsplit(uri)
    scheme = "s3" if parts.scheme == "s3a" else parts.scheme
    return f"{scheme}://{parts.netloc}", parts.path.lstrip("/")


def delta_dataset(table_uri: str, version: int | None,
                  metadata: TableMetadata | None = None) -> Dataset:
    """A Delta table as a dataset, at ``version`` (if known), with its schema (if known)."""
    facets: dict[str, Any] = {}
    if version is not None:
        facets["version"] = DatasetVersionDatasetFacet(datasetVersion=str(version))
    if metadata is not None:
        facets["schema"] = SchemaDatasetFacet(fields=_fields(metadata.schema))
    namespace, name = dataset_name(table_uri)
    return Dataset(namespace=namespace, name=name, facets=facets)


def load_lineage(table_uri: str, target: str | None, result: JobResult | None,
                 source_metadata: TableMetadata | None) -> OperatorLineage:
    """What a load read (the source at the range's end) and wrote (the target's commit)."""
    if result is None:
        return OperatorLineage(inputs=[delta_dataset(table_uri, None)])
    outputs = [delta_dataset(target, result.sink_version)] if target else []
    facet = DeltaVersionsRunFacet(
        sourceTable=to_uri(table_uri), mode=result.mode, sourceStartVersion=result.start_version,
        sourceEndVersion=result.end_version, targetVersion=result.sink_version)
    return OperatorLineage(
        inputs=[delta_dataset(table_uri, result.end_version, source_metadata)],
        outputs=outputs, run_facets={RUN_FACET: facet})


def sensor_lineage(table_uri: str, found: Mapping[str, Any] | None) -> OperatorLineage:
    """The table the sensor watched, at the end of the range it found."""
    if not found:
        return OperatorLineage(inputs=[delta_dataset(table_uri, None)])
    facet = DeltaVersionsRunFacet(
        sourceTable=to_uri(table_uri), mode=found["mode"],
        sourceStartVersion=found["start_version"], sourceEndVersion=found["end_version"])
    return OperatorLineage(inputs=[delta_dataset(table_uri, found["end_version"])],
                           run_facets={RUN_FACET: facet})


def _fields(struct: Mapping[str, Any]) -> list[SchemaDatasetFacetFields]:
    """Delta's schema JSON as the schema facet's fields, nested structs included."""
    fields = []
    for field in struct.get("fields", []):
        kind = field["type"]
        nested = _fields(kind) if isinstance(kind, Mapping) and kind["type"] == "struct" else None
        fields.append(SchemaDatasetFacetFields(name=field["name"], type=_type_name(kind),
                                               fields=nested))
    return fields


def _type_name(kind: str | Mapping[str, Any]) -> str:
    """``long``, ``struct``, ``array<string>``, ``map<string,long>``."""
    if isinstance(kind, str):
        return kind
    if kind["type"] == "array":
        return f"array<{_type_name(kind['elementType'])}>"
    if kind["type"] == "map":
        return f"map<{_type_name(kind['keyType'])},{_type_name(kind['valueType'])}>"
    return kind["type"]
