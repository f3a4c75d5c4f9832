"""The Spark Connect transport: the job module run in the task's own process on a remote session.

On a ``spark_connect`` connection nothing is submitted: the task opens a Spark Connect session
and calls :func:`~airflow_provider_delta.job.driver.run_job` itself, so planning, reading, the
sinks and the exactly-once rules are the same code as under ``spark-submit``. Each task gets a
session of its own (created, never the process's default one), so the confs it sets end with
it; ``stop()`` releases it on the server; :meth:`ConnectJob.interrupt` cancels its operations.

A Connect client cannot learn where the server's web UI is (its bound port and a host the user
can reach are not in the protocol), so the session link comes from the user: given the UI's
address (the connection's extra ``ui_url``), the job reports the page of its own session in
the UI's Connect tab.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlencode, urlparse

from airflow_provider_delta.credential_keys import with_sql_options_redaction
from airflow_provider_delta.errors import SparkConnectError, SparkConnectUnavailableError
from airflow_provider_delta.job.driver import job_session_confs, run_job
from airflow_provider_delta.job.spec import JobResult, JobSpec

if TYPE_CHECKING:
    from pyspark.sql.connect.session import SparkSession

log = logging.getLogger(__name__)

# pyspark.sql.functions build Connect columns only while this is set (pyspark's is_remote()).
_CONNECT_MODE = "SPARK_CONNECT_MODE_ENABLED"
# Retries while a session opens and is released: a server that is down fails the task within
# seconds, not after the client's default ten minutes; the task's own retries take over.
_FAIL_FAST_RETRIES = 4
_UNREACHABLE = ("UNAVAILABLE", "DEADLINE_EXCEEDED")
_REFUSED = ("UNAUTHENTICATED", "PERMISSION_DENIED")


class ConnectJob:
    """One task's job on a Spark Connect server; ``interrupt`` may be called from any thread."""

    def __init__(self, url: str, conn_id: str, ui_url: str | None = None):
        self.url = url
        self.conn_id = conn_id
        self.endpoint = urlparse(url).netloc  # host:port, never the token
        self.ui_url = ui_url  # the server's web UI, as the user reaches it
        self._session: SparkSession | None = None
        self._lock = threading.Lock()

    def run(self, spec: JobSpec, confs: Mapping[str, str] | None = None) -> JobResult:
        """Run ``spec`` on a new session with ``confs`` (runtime confs of this task only)."""
        from pyspark.errors.exceptions.connect import SparkConnectGrpcException

        try:
            with _connect_mode(), self._session_for_task(spec, confs or {}) as spark:
                result = run_job(spark, spec)
                return dataclasses.replace(result, spark_ui_url=self.session_page(spark.session_id))
        except SparkConnectGrpcException as error:
            translated = self._translated(error, spec)
            if translated is None:
                raise
            raise translated from error

    def session_page(self, session_id: str) -> str | None:
        """The session's page in the Connect tab of the server's UI (None: no ``ui_url``).
        The UI finds a session by its id and user id; without a user id, the tab itself."""
        if not self.ui_url:
            return None
        tab = f"{self.ui_url.rstrip('/')}/connect/"
        user_id = _client_user_id(self.url)
        if not user_id:
            return tab
        return f"{tab}session/?{urlencode({'id': session_id, 'userId': user_id})}"

    def interrupt(self) -> None:
        """Cancel every running operation of the task's session (its only user)."""
        with self._lock:
            session = self._session
        if session is not None:
            interrupted = session.interruptAll()
            log.info("interrupted %d Spark Connect operation(s) on %s", len(interrupted),
                     self.endpoint)

    @contextmanager
    def _session_for_task(self, spec: JobSpec, confs: Mapping[str, str]) -> Iterator[SparkSession]:
        from pyspark.sql.connect.session import SparkSession

        session = SparkSession.builder.remote(self.url).create()
        defaults = session.client.get_retry_policies()
        _fail_fast(session)
        try:
            self._configure(session, spec, confs)
            session.client.set_retry_policies(defaults)
            with self._lock:
                self._session = session
            log.info("Spark Connect session %s on %s (connection %r)", session.session_id,
                     self.endpoint, self.conn_id)
            yield session
        finally:
            with self._lock:
                self._session = None
            _fail_fast(session)  # the release is best effort: the server expires idle sessions
            session.stop()  # releases the session and its confs on the server

    def _configure(self, session: SparkSession, spec: JobSpec, confs: Mapping[str, str]) -> None:
        """The task's confs, then the job's own (UTC): the first calls to the server, all in
        one request. The first is the SQL options redaction: a session cannot set
        ``spark.redaction.regex``, but this one hides the session's credential confs and
        writer options in the UI."""
        from pyspark.errors import AnalysisException

        task_confs = with_sql_options_redaction(confs)
        try:
            _set_confs(session, {**task_confs, **job_session_confs(session.version)})
        except AnalysisException:
            for key, value in task_confs.items():  # which conf the server refused
                self._set_task_conf(session, spec, key, value)
            raise

    def _set_task_conf(self, session: SparkSession, spec: JobSpec, key: str, value: str
                       ) -> None:
        from pyspark.errors import AnalysisException

        try:
            session.conf.set(key, value)
        except AnalysisException as error:
            raise SparkConnectError(
                f"{spec.table_uri}: {_what(spec)} not loaded: conf {key!r} cannot be set on "
                f"a Spark Connect session of connection {self.conn_id!r} "
                f"({error.getCondition()}); set it on the server, or drop it from the "
                "operator's conf (only runtime SQL confs apply per task)",
                table_uri=spec.table_uri,
            ) from error

    def _translated(self, error: Exception, spec: JobSpec) -> SparkConnectError | None:
        code = getattr(error.getGrpcStatusCode(), "name", "")
        if code in _UNREACHABLE:
            return SparkConnectUnavailableError(self.conn_id, self.endpoint, spec.table_uri,
                                                _what(spec), code)
        if code in _REFUSED:
            return SparkConnectError(
                f"{spec.table_uri}: {_what(spec)} not loaded: the Spark Connect server of "
                f"connection {self.conn_id!r} ({self.endpoint}) refused the client ({code}); "
                "fix the connection's token (password) or user id (login)",
                table_uri=spec.table_uri,
            )
        return None


def _client_user_id(url: str) -> str | None:
    """The user id the Connect client sends: the URL's ``user_id`` (the connection's login),
    else ``SPARK_USER`` or ``USER``, as pyspark's client chooses it."""
    params = dict(part.split("=", 1) for part in urlparse(url).path.split(";")[1:] if "=" in part)
    if params.get("user_id"):
        return unquote(params["user_id"])
    return os.getenv("SPARK_USER", os.getenv("USER"))


def _set_confs(session: SparkSession, confs: Mapping[str, str]) -> None:
    """``confs`` set in one Config request (``conf.set`` sends one a key)."""
    import pyspark.sql.connect.proto as pb2

    pairs = [pb2.KeyValue(key=key, value=value) for key, value in confs.items()]
    result = session.client.config(
        pb2.ConfigRequest.Operation(set=pb2.ConfigRequest.Set(pairs=pairs)))
    for warning in result.warnings:  # e.g. a deprecated key, as conf.set shows them
        warnings.warn(warning, stacklevel=2)


def _fail_fast(session: SparkSession) -> None:
    from pyspark.sql.connect.client.retries import DefaultPolicy

    session.client.set_retry_policies([DefaultPolicy(max_retries=_FAIL_FAST_RETRIES)])


def _what(spec: JobSpec) -> str:
    if spec.mode == "snapshot":
        return f"the snapshot at version {spec.start.version}"
    return f"versions {spec.start.version}..{spec.end_version}"


@contextmanager
def _connect_mode() -> Iterator[None]:
    """Let ``pyspark.sql.functions`` (ours and the transform's) build Connect columns."""
    before = os.environ.get(_CONNECT_MODE)
    os.environ[_CONNECT_MODE] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(_CONNECT_MODE, None)
        else:
            os.environ[_CONNECT_MODE] = before
