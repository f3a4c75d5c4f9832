"""The storage options' trip to the driver: through its environment, never in a job file.

URIs, stores and file access are in :mod:`airflow_provider_delta.storage`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from airflow_provider_delta.job.spec import JobSpec

# The environment variable of the spark-submit process that carries the storage options.
STORAGE_OPTIONS_ENV = "AIRFLOW_PROVIDER_DELTA_STORAGE_OPTIONS"


def storage_options_env(spec: JobSpec) -> dict[str, str]:
    """The environment that hands ``spec``'s storage options to the driver."""
    options = {"source": spec.storage_options, "sink": spec.sink.storage_options}
    return {STORAGE_OPTIONS_ENV: json.dumps(options)}


def without_storage_options(spec: JobSpec) -> JobSpec:
    """``spec`` as it may be written to a file: no credentials."""
    return replace(spec, storage_options=None, sink=replace(spec.sink, storage_options=None))


def with_storage_options_from(environ: Mapping[str, str], spec: JobSpec) -> JobSpec:
    """``spec`` with the storage options the operator put into the driver's environment."""
    if STORAGE_OPTIONS_ENV not in environ:
        return spec
    options = json.loads(environ[STORAGE_OPTIONS_ENV])
    return replace(spec, storage_options=options["source"],
                   sink=replace(spec.sink, storage_options=options["sink"]))
