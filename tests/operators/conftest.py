"""Helpers for the operator tests: the deltalake/DataFusion oracle, source tables, DAG runs."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyspark
import pytest
from deltalake import DeltaTable, QueryBuilder, write_deltalake

from tests.conftest import S3A_EXCLUDES, S3A_PACKAGES, maven_confs
from tests.delta_spark.conftest import HAS_DELTA_JARS, delta_confs


def delta_rows(table_uri: str, version: int | None = None) -> Counter:
    """The rows of a Delta table as a multiset of tuples, read by deltalake through DataFusion."""
    table = DeltaTable(table_uri, version=version)
    result = QueryBuilder().register("t", table).execute("select * from t").read_all()
    columns = [result.column(i).to_pylist() for i in range(result.num_columns)]
    return Counter(zip(*columns))


TESTS_DIR = Path(__file__).resolve().parent
SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.log.level": "WARN",
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.memory": "1g",
    # Short jobs: C1-only JIT and the serial GC halve the JVM's start-up cost on 2 cores.
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
}


def jvm_tmp_in(conf: dict[str, str], folder: Path) -> dict[str, str]:
    """``conf`` with the driver JVM's ``java.io.tmpdir`` in ``folder``: where Spark makes its
    spark-*, blockmgr-* and artifacts-* folders, which a JVM the test SIGKILLs never deletes
    (its shutdown hooks do not run), so that they do not stay in /tmp."""
    folder.mkdir(exist_ok=True)
    options = f"{conf['spark.driver.extraJavaOptions']} -Djava.io.tmpdir={folder}"
    return {**conf, "spark.driver.extraJavaOptions": options}


@pytest.fixture
def spark_local_conn(monkeypatch):
    """A ``spark`` connection to ``local[2]`` and ``spark-submit`` of this venv on PATH."""
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_LOCAL", '{"conn_type": "spark", "host": "local[2]"}')
    bin_dir = os.path.dirname(sys.executable)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return "spark_local"


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """A temp dir of its own, so a test sees every job folder a task leaves in it."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


@pytest.fixture
def recorded_command_lines(tmp_path, monkeypatch, spark_local_conn):
    """A ``spark-submit`` first on PATH that appends its command line to a file, then runs
    the real one."""
    bin_dir, lines = tmp_path / "bin", tmp_path / "command_lines.txt"
    bin_dir.mkdir()
    wrapper = bin_dir / "spark-submit"
    real = Path(sys.executable).parent / "spark-submit"
    wrapper.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{lines}"\nexec "{real}" "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return lines


SPARK_CLASS = Path(sys.executable).parent / "spark-class"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _alive_workers(ui_port: int) -> int:
    """The master's alive workers; 0 while its UI is not up, or still answers ``/json/``
    with its HTML page (its handlers are attached one by one as it starts)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as reply:
            return int(json.load(reply).get("aliveworkers", 0))
    except (OSError, ValueError):  # json's JSONDecodeError is a ValueError
        return 0


@pytest.fixture
def standalone_master(tmp_path):
    """``spark://127.0.0.1:<port>`` with one 1-core worker; both stopped afterwards.

    The pyspark wheel has no ``sbin/start-master.sh``, so the daemons are started the way
    that script does it: ``spark-class`` with the Master and Worker main classes.
    """
    port, ui_port, worker_ui = _free_port(), _free_port(), _free_port()
    master_url = f"spark://127.0.0.1:{port}"
    env = {**os.environ, "SPARK_HOME": os.path.dirname(pyspark.__file__),
           "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_WORKER_DIR": str(tmp_path / "work")}
    logs = open(tmp_path / "daemons.log", "wb")  # noqa: SIM115 - closed below
    daemons = [subprocess.Popen(
        [str(SPARK_CLASS), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
         "--port", str(port), "--webui-port", str(ui_port)], env=env, stdout=logs, stderr=logs)]
    daemons.append(subprocess.Popen(
        [str(SPARK_CLASS), "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
         "--cores", "1", "--memory", "1g", "--webui-port", str(worker_ui), master_url],
        env=env, stdout=logs, stderr=logs))
    try:
        deadline = time.monotonic() + 120
        while _alive_workers(ui_port) < 1:
            if time.monotonic() > deadline:
                log = (tmp_path / "daemons.log").read_text()[-2000:]
                pytest.fail(f"standalone cluster did not start: {log}")
            time.sleep(1)
        yield port
    finally:
        for daemon in reversed(daemons):
            daemon.terminate()
            daemon.wait(timeout=30)
        logs.close()


CONNECT_TOKEN = "connect-token-4242"  # distinctive, so tests can prove it never reaches a log
# Not UTC, so a task that forgot to set its session's time zone, or a conf that leaked from one
# session to the next, shows.
CONNECT_SERVER_TIME_ZONE = "America/New_York"


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory):
    """One Spark Connect server (local[2]) for the run, with a token; stopped by its PID."""
    from dags_examples.local_connect_server import LocalConnectServer

    log = tmp_path_factory.mktemp("connect") / "server.log"
    ui_port = _free_port()  # its UI, where the secrets probe looks
    server = LocalConnectServer(log, token=CONNECT_TOKEN, confs={
        "spark.ui.enabled": "true", "spark.ui.port": str(ui_port),
        # hadoop-aws for s3a://, and Delta's jars for sink="delta-spark" where they exist.
        **(delta_confs(with_s3a=True) if HAS_DELTA_JARS
           else maven_confs(S3A_PACKAGES, S3A_EXCLUDES)),
        "spark.sql.session.timeZone": CONNECT_SERVER_TIME_ZONE,
        "spark.sql.shuffle.partitions": "2", "spark.driver.memory": "1g",
        "spark.log.level": "WARN",
        "spark.driver.extraJavaOptions": SPARK_CONF["spark.driver.extraJavaOptions"],
    }, env={"SPARK_LOCAL_IP": "127.0.0.1"})  # its UI on the loopback only
    server.ui_url = f"http://127.0.0.1:{ui_port}"
    with server:
        yield server


def connect_connection(monkeypatch, port: int, conn_id: str = "spark_connect_test",
                       token: str = CONNECT_TOKEN) -> str:
    """A ``spark_connect`` Airflow connection to ``localhost:port`` (an environment variable)."""
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({
        "conn_type": "spark_connect", "host": "localhost", "port": port, "password": token,
    }))
    return conn_id


@pytest.fixture(params=["spark-submit", "spark-connect"])
def spark_transport(request, monkeypatch):
    """Operator keywords running the load through spark-submit (``local[2]``) or Spark Connect."""
    if request.param == "spark-submit":
        conn_id = request.getfixturevalue("spark_local_conn")
        return {"conn_id": conn_id, "conf": SPARK_CONF, "env_vars": driver_env()}
    server = request.getfixturevalue("connect_server")
    return {"conn_id": connect_connection(monkeypatch, server.port)}


@pytest.fixture(params=["delta", "delta-spark"])
def delta_sink(request):
    """The two appending Delta sinks: ``deltalake``'s commit and Delta's own writer (where
    Delta's jars exist for this Spark: ``bash scripts/dev.sh test-delta-spark``)."""
    if request.param == "delta-spark" and not HAS_DELTA_JARS:
        pytest.skip("no Delta jars for this Spark (bash scripts/dev.sh test-delta-spark)")
    return request.param


def with_sink(transport: dict, sink: str) -> dict:
    """Operator keywords for ``sink`` over ``transport``: spark-submit gets Delta's jars in its
    conf for ``delta-spark`` (a Connect server has them from its start)."""
    if sink != "delta-spark" or "conf" not in transport:
        return {**transport, "sink": sink}
    return {**transport, "sink": sink, "conf": {**transport["conf"], **delta_confs()}}


def driver_env() -> dict[str, str]:
    """Lets the driver import test transforms (``operators.transforms``), and this checkout's
    package first (not the one the venv has installed, when that is another worktree's)."""
    return {"PYTHONPATH": os.pathsep.join([str(TESTS_DIR.parent), str(TESTS_DIR.parent.parent)])}


def append_rows(uri: str, ids: list[int]) -> None:
    """One deltalake commit of rows ``(id, name)``."""
    names = [f"n{i}" if i % 3 else None for i in ids]
    write_deltalake(uri, pa.table({"id": pa.array(ids, pa.int64()),
                                   "name": pa.array(names, pa.string())}), mode="append")


def four_commit_source(source: str) -> Counter:
    """Write 4 commits (8 rows) to ``source``; return each row tagged with the version that
    added it (snapshot(v) minus snapshot(v - 1)), as the tagging transform writes them."""
    for ids in ([0, 1, 2], [3, 4], [5, 6], [7]):
        append_rows(source, ids)
    expected = Counter()
    for version in range(4):
        before = delta_rows(source, version - 1) if version else Counter()
        added = delta_rows(source, version) - before
        expected.update({row + (version,): n for row, n in added.items()})
    return expected


def recorded(table_uri: str, version: int) -> dict:
    """The watermark the operator records: the version and the table's id (``metaData.id``)."""
    return {"version": version, "table_id": DeltaTable(table_uri).metadata().id}


def forget_watermark(key: str) -> None:
    """Delete the watermarks stored under ``key``: a test run once per transport starts clean."""
    from airflow.models import Variable
    from airflow.utils.session import create_session
    from sqlalchemy import delete

    with create_session() as session:
        session.execute(delete(Variable).where(Variable.key.startswith(f"{key}:")))


def watermark(key: str) -> dict | None:
    """The watermarks stored under ``key`` (Variables ``<key>:<table_uri>``) as
    ``{table_uri: watermark}``; None when there is none."""
    from airflow.models import Variable
    from airflow.utils.session import create_session
    from sqlalchemy import select

    prefix = f"{key}:"
    with create_session() as session:
        rows = session.scalars(select(Variable).where(Variable.key.startswith(prefix)))
        found = {row.key[len(prefix):]: json.loads(row.val) for row in rows}
    return found or None


def run_twice_at_once(write: Callable[[], object]) -> list:
    """``write()`` in two threads at once; their results. An error in either fails the test."""
    results, errors = [], []

    def run():
        try:
            results.append(write())
        except Exception as error:  # noqa: BLE001 - reported by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert errors == []
    return results
