"""The credentials' trip to the driver: through its environment, never in a job file or on a
command line. Credentials are the storage options, and the entries of the sink's options and
of the Spark conf whose keys name a credential (:func:`is_credential_key`).

URIs, stores and file access are in :mod:`airflow_provider_delta.storage`."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_provider_delta.job.spec import JobSpec

# The environment variable of the spark-submit process that carries the credentials.
CREDENTIALS_ENV = "AIRFLOW_PROVIDER_DELTA_CREDENTIALS"
# Spark's own spark.redaction.regex, plus the names object stores give their keys
# (fs.azure.account.key.*, fs.s3a.access.key, aws_secret_access_key, sas tokens, key files).
_CREDENTIAL_KEY = re.compile(
    r"secret|password|passwd|token|private[._-]?key|(^|[._-])(key|keyfile|sas)([._-]|$)",
    re.IGNORECASE)
# Settings that name how credentials are found (a class, a kind), not a credential.
_CREDENTIAL_SETTING = re.compile(r"[._-](provider|type|class|impl)$", re.IGNORECASE)


def is_credential_key(key: str) -> bool:
    """Whether an option or conf named ``key`` holds a credential."""
    return bool(_CREDENTIAL_KEY.search(key)) and not _CREDENTIAL_SETTING.search(key)


def credential_entries(options: Mapping[str, Any] | None) -> dict[str, str]:
    """The entries of ``options`` that hold credentials, as strings."""
    return {key: str(value) for key, value in (options or {}).items()
            if is_credential_key(key)}


def without_credential_entries(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """``options`` without the entries that hold credentials."""
    return {key: value for key, value in (options or {}).items() if not is_credential_key(key)}


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
