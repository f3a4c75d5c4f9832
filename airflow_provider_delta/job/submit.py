"""The job's side of a spark-submit run, around the Spark provider's own submission: the sink's
spec, where the driver runs, the try's job folder with its spec and result files, the package
zip for ``py_files``, the driver's environment, and the removal of it all.

The operators hold the parameters and call these; the Spark provider's hook runs
``spark-submit``. Credentials reach the driver through its environment
(:mod:`.credentials`), never through the spec file or the command line.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import airflow_provider_delta
from airflow_provider_delta.credential_keys import credential_key_names
from airflow_provider_delta.job.credentials import credentials_env, without_credentials
from airflow_provider_delta.job.spec import (
    JobResult, JobSpec, SinkKind, SinkSpec, sink_kind, stable_app_id,
)
from airflow_provider_delta.storage import (
    normalised_location, read_text, remove_tree, to_uri, write_text,
)

# task_state_store key: the job folder of the last job submitted in a resumable mode.
JOB_DIR_KEY = "delta_job_dir"


@dataclass(frozen=True)
class SubmitTarget:
    """The master and deploy mode ``spark-submit`` is given for a ``spark`` connection."""

    master: str
    deploy_mode: str | None

    @property
    def driver_runs_here(self) -> bool:
        """The driver is a child of spark-submit on this machine (client mode)."""
        return self.deploy_mode != "cluster"

    @property
    def local(self) -> bool:
        return self.master.startswith("local")

    @property
    def env_goes_on_command_line(self) -> bool:
        """The Spark provider passes env_vars to YARN and Kubernetes drivers as ``--conf``."""
        return "yarn" in self.master or "k8s" in self.master


class JobFolder:
    """One try's job files: ``spec.json`` and ``result.json`` in ``<work_dir>/<name>`` (shared
    storage, for cluster mode) or else in a private (0700) scratch folder, which also holds the
    package zip. :meth:`remove` deletes them however the task ends."""

    def __init__(self, work_dir: str | None, name: str | None):
        self.scratch = tempfile.mkdtemp(prefix="delta-job-")
        if work_dir:
            self.uri = f"{to_uri(work_dir)}/{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}"
        else:
            self.uri = to_uri(self.scratch)

    def write_spec(self, spec: JobSpec) -> list[str]:
        """Write ``spec`` without its credentials; the driver's arguments: spec and result."""
        write_text(f"{self.uri}/spec.json", without_credentials(spec).to_json())
        return [f"{self.uri}/spec.json", f"{self.uri}/result.json"]

    def read_result(self, folder: str | None = None) -> JobResult:
        """The driver's result, from this folder or that of the job a retry reconnected to."""
        return JobResult.from_json(read_text(f"{folder or self.uri}/result.json"))

    def package_zip(self) -> str:
        """A zip of this package for ``py_files``, built in the scratch folder."""
        package_dir = Path(airflow_provider_delta.__file__).parent
        archive = shutil.make_archive(str(Path(self.scratch) / "airflow_provider_delta"), "zip",
                                      root_dir=package_dir.parent, base_dir=package_dir.name)
        return os.fspath(archive)

    def record(self, store: Any) -> None:
        """Keep the folder's place in the task's state ``store`` (Airflow's task_state_store,
        if any), where a durable retry that reconnects to this job finds it."""
        if store is not None:
            store.set(JOB_DIR_KEY, self.uri)

    def remove(self, *others: str | None) -> None:
        """Delete the job folder, the scratch folder and ``others`` (a reconnected job's)."""
        for folder in {self.uri, self.scratch, *filter(None, others)}:
            remove_tree(folder)


def make_sink_spec(sink: str | None, target: str | None, table_uri: str, *, dag_id: str,
                   task_id: str, map_index: int, **settings: Any) -> SinkSpec:
    """The sink of an operator's ``sink`` parameter, as the driver sees it (``settings``: the
    other :class:`SinkSpec` fields). Its txn appId is stable per DAG, task, map index, source
    and target; unmapped tasks also name the appId of older versions (DAG, task and target)
    so that targets they wrote resume where they stopped."""
    if sink is None:
        return SinkSpec(kind=SinkKind.NONE)
    kind = sink_kind(sink)
    location, source = normalised_location(target), normalised_location(table_uri)
    return SinkSpec(
        kind=kind, path=target, format=sink if kind == SinkKind.FORMAT else "parquet",
        app_id=stable_app_id(dag_id, task_id, location, source, map_index),
        legacy_app_id=(stable_app_id(dag_id, task_id, to_uri(target))
                       if map_index == -1 else None),
        use_delta_spark=sink == "delta-spark", source=source, **settings)


def submitted_folder(store: Any) -> str | None:
    """The folder of the job a retry reconnected to (None: none recorded)."""
    return store.get(JOB_DIR_KEY) if store is not None else None


def job_folder_name(dag_id: str, task_id: str, run_id: str, map_index: int,
                    try_number: int) -> str:
    """Keyed by map index and try number: mapped tasks and retries never share a spec or read
    another job's result."""
    return f"{dag_id}.{task_id}.{run_id}.{map_index}.{try_number}"


def driver_env(target: SubmitTarget, env_vars: Mapping[str, Any] | None, spec: JobSpec,
               spark_conf: Mapping[str, Any] | None) -> tuple[dict[str, Any] | None, list[str]]:
    """The spark-submit process's environment, and the credentials it cannot carry.

    On local masters the driver runs on this Python (which has the package). Where the driver
    is a child of spark-submit it gets the storage options and the credentials of the sink
    options and the Spark conf in its environment. Elsewhere only a command line could carry
    them: they are withheld, and their names returned for a warning (the storage options count
    as ``storage_options``)."""
    env = dict(env_vars or {})
    if target.local:
        env = {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable, **env}
    if target.driver_runs_here and not target.env_goes_on_command_line:
        env.update(credentials_env(spec, spark_conf))
        return env or None, []
    withheld = credential_key_names({**spec.sink.options, **(spark_conf or {})})
    if spec.storage_options or spec.sink.storage_options:
        withheld.insert(0, "storage_options")
    return env or None, withheld
