"""The credentials' trip to the driver: through its environment, never in a job file or on a
command line. Credentials are the storage options, and the entries of the sink's options and
of the Spark conf whose keys name a credential
(:func:`~airflow_provider_delta.credential_keys.is_credential_key`).

URIs, stores and file access are in :mod:`airflow_provider_delta.storage`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from airflow_provider_delta.credential_keys import credential_entries, without_credential_entries

if TYPE_CHECKING:
    from airflow_provider_delta.job.spec import JobSpec

# The environment variable of the spark-submit process that carries the credentials.
CREDENTIALS_ENV = "AIRFLOW_PROVIDER_DELTA_CREDENTIALS"


def credentials_env(spec: JobSpec, spark_conf: Mapping[str, Any] | None) -> dict[str, str]:
    """The environment that hands ``spec``'s credentials and those of ``spark_conf`` to the
    driver."""
    credentials = {"source": spec.storage_options, "sink": spec.sink.storage_options,
                   "sink_options": credential_entries(spec.sink.options),
                   "spark_conf": credential_entries(spark_conf)}
    return {CREDENTIALS_ENV: json.dumps(credentials)}


def without_credentials(spec: JobSpec) -> JobSpec:
    """``spec`` as it may be written to a file: no credentials."""
    sink = replace(spec.sink, storage_options=None,
                   options=without_credential_entries(spec.sink.options))
    return replace(spec, storage_options=None, sink=sink)


def with_credentials_from(environ: Mapping[str, str], spec: JobSpec) -> JobSpec:
    """``spec`` with the credentials the operator put into the driver's environment."""
    if CREDENTIALS_ENV not in environ:
        return spec
    credentials = json.loads(environ[CREDENTIALS_ENV])
    sink = replace(spec.sink, storage_options=credentials["sink"],
                   options={**spec.sink.options, **credentials.get("sink_options", {})})
    return replace(spec, storage_options=credentials["source"], sink=sink)


def spark_conf_from(environ: Mapping[str, str]) -> dict[str, str]:
    """The Spark conf entries holding credentials that the operator kept off the command line."""
    if CREDENTIALS_ENV not in environ:
        return {}
    return json.loads(environ[CREDENTIALS_ENV]).get("spark_conf", {})
