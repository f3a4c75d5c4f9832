"""Which transport runs a load: ``spark-submit``, or Spark Connect for a ``spark_connect`` conn_id.

The Spark Connect URL comes from the Spark provider's :class:`SparkConnectHook` (host, port,
token, user id, TLS), the server's web UI from the connection's extra ``ui_url``; the token is
registered with the secrets masker before anything can log it. Options that only mean
something to ``spark-submit`` (they ship code, files or environment to a driver process that
does not exist here) are refused rather than silently ignored.

Where ``spark-submit`` puts the driver (:class:`~airflow_provider_delta.job.submit.SubmitTarget`)
is read from the ``spark`` connection's documented fields, not from the Spark provider's
private hook state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

from airflow_provider_delta.compat import AirflowNotFoundException, BaseHook, mask_secret
from airflow_provider_delta.errors import SparkConnectError
from airflow_provider_delta.job.connect import ConnectJob
from airflow_provider_delta.job.submit import SubmitTarget

__all__ = ["SubmitTarget", "connect_job", "refuse_spark_submit_options",
           "resolve_submit_target"]

if TYPE_CHECKING:
    from airflow_provider_delta.job.spec import JobSpec

# Operator parameters (public attributes of the same name) only spark-submit uses.
_SPARK_SUBMIT_ONLY = ("ship_package", "py_files", "files", "archives", "jars", "packages",
                      "env_vars")


def connect_job(conn_id: str) -> ConnectJob | None:
    """A :class:`ConnectJob` when ``conn_id`` is a ``spark_connect`` connection, else None."""
    try:
        connection = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return None  # the spark-submit path reports a missing connection itself
    if connection.conn_type != SparkConnectHook.conn_type:
        return None
    if connection.password:
        mask_secret(connection.password)
        mask_secret(quote(connection.password))  # as it appears inside the URL
    return ConnectJob(SparkConnectHook(conn_id).get_connection_url(), conn_id,
                      ui_url=connection.extra_dejson.get("ui_url"))


def refuse_spark_submit_options(operator: Any, conn_id: str, spec: JobSpec) -> None:
    """Fail, naming the parameter, when the operator sets an option only spark-submit has."""
    given = [name for name in _SPARK_SUBMIT_ONLY if getattr(operator, name, None)]
    if given:
        raise SparkConnectError(
            f"{spec.table_uri}: {operator.task_id} sets {', '.join(given)}, which only "
            f"spark-submit uses, but connection {conn_id!r} is a spark_connect "
            "connection: the job runs in the task's own process. Install the code the transform "
            "needs on the worker and drop these parameters, or use a spark connection.",
            table_uri=spec.table_uri,
        )


def resolve_submit_target(conn_id: str, deploy_mode: str | None) -> SubmitTarget:
    """Read the connection as the Spark provider documents it: the master is the host (a URL,
    ``local[n]`` or ``yarn``; a bare host takes the connection type as its scheme) plus the
    port; the operator's ``deploy_mode`` wins over extra ``deploy-mode``."""
    conn = BaseHook.get_connection(conn_id)
    host = conn.host or ""
    full_url_in_host = conn.conn_type == "spark" and host and ("://" in host or not conn.port)
    master = host if full_url_in_host else f"{conn.conn_type}://{host}"
    if conn.port:
        master = f"{master}:{conn.port}"
    return SubmitTarget(master, deploy_mode or conn.extra_dejson.get("deploy-mode"))
