"""S3 end to end: Spark reads and writes ``s3a://`` through hadoop-aws (pyspark's Hadoop 3.5.0,
from Maven Central) against the suite's moto server, with the credentials of a ``delta`` or an
``aws`` connection, over spark-submit and Spark Connect; deltalake's S3 commits under racing
writers."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections import Counter

import pyarrow as pa
import pytest
from airflow.sdk import DAG
from deltalake import DeltaTable, QueryBuilder, write_deltalake

from airflow_provider_delta.operators import DeltaIncrementalOperator, DeltaTimeTravelOperator
from airflow_provider_delta.sensors import DeltaVersionSensor
from tests.conftest import S3_BUCKET, S3_SECRET, S3A_EXCLUDES, S3A_PACKAGES, maven_confs

from .conftest import (
    SPARK_CONF, append_rows, connect_connection, delta_rows, driver_env, forget_watermark,
    watermark,
)

pytestmark = pytest.mark.slow


def _rows(uri: str, options: dict, version: int | None = None) -> Counter:
    """The oracle on a local copy of the table: DataFusion's reads of the moto server in this
    process would wait for the interpreter lock its query holds."""
    import tempfile
    from pathlib import Path

    import obstore

    from airflow_provider_delta.storage import list_files, open_store

    local, store = Path(tempfile.mkdtemp()), open_store(uri, options)
    for meta in list_files(uri, "", options):
        try:
            data = bytes(obstore.get(store, meta["path"]).bytes())
        except FileNotFoundError:
            continue  # a folder marker S3A left (listed without its "/"): no file of the table
        (local / meta["path"]).parent.mkdir(parents=True, exist_ok=True)
        (local / meta["path"]).write_bytes(data)
    table = DeltaTable(str(local), version=version)
    result = QueryBuilder().register("t", table).execute("select * from t").read_all()
    return Counter(zip(*(result.column(i).to_pylist() for i in range(result.num_columns))))


def _append(uri: str, options: dict, ids: list[int]) -> None:
    write_deltalake(uri, pa.table({"id": pa.array(ids, pa.int64()),
                                   "name": pa.array([f"n{i}" for i in ids])}),
                    mode="append", storage_options=options)


def _connection(monkeypatch, kind: str, s3_options: dict) -> str:
    """A ``delta`` or an ``aws`` connection to the moto bucket (environment variables)."""
    endpoint = s3_options["AWS_ENDPOINT_URL"]
    if kind == "delta":
        conn = {"conn_type": "delta", "host": endpoint, "login": "testing",
                "password": S3_SECRET, "extra": {"region": "us-east-1", "allow_http": True}}
    else:
        conn = {"conn_type": "aws", "login": "testing", "password": S3_SECRET,
                "extra": {"region_name": "us-east-1", "endpoint_url": endpoint}}
    monkeypatch.setenv(f"AIRFLOW_CONN_LAKE_{kind.upper()}", json.dumps(conn))
    return f"lake_{kind}"


@pytest.fixture(params=[("spark-submit", "delta"), ("spark-connect", "aws")],
                ids=["spark-submit-delta-conn", "spark-connect-aws-conn"])
def s3_load(request, monkeypatch, s3_options):
    """Operator keywords: a transport with hadoop-aws, and a connection of one type."""
    transport, kind = request.param
    if transport == "spark-submit":
        request.getfixturevalue("spark_local_conn")
        keywords = {"conn_id": "spark_local", "env_vars": driver_env(),
                    "conf": {**SPARK_CONF, **maven_confs(S3A_PACKAGES, S3A_EXCLUDES)}}
    else:
        server = request.getfixturevalue("connect_server")
        keywords = {"conn_id": connect_connection(monkeypatch, server.port)}
    return {**keywords, "delta_conn_id": _connection(monkeypatch, kind, s3_options)}


def test_sensor_incremental_load_and_time_travel_from_s3_to_s3(
        s3_load, s3_options, run_dag, task_states, xcom_value, request):
    prefix = f"s3://{S3_BUCKET}/e2e-{request.node.callspec.id}"
    source, target, snapshot = f"{prefix}/source", f"{prefix}/target", f"{prefix}/at_v1"
    _append(source, s3_options, [0, 1, 2])
    _append(source, s3_options, [3, 4])
    forget_watermark("wm_s3")
    with DAG("s3_load", schedule=None) as dag:
        wait = DeltaVersionSensor(task_id="wait", table_uri=source, watermark_store="variable",
                                  watermark_key="wm_s3", poke_interval=1, timeout=60,
                                  delta_conn_id=s3_load["delta_conn_id"])
        load = DeltaIncrementalOperator(task_id="load", table_uri=source, target=target,
                                        sensor_task_id="wait", watermark_store="variable",
                                        watermark_key="wm_s3", max_files=1, **s3_load)
        travel = DeltaTimeTravelOperator(task_id="travel", table_uri=source, target=snapshot,
                                         version=0, **s3_load)
        wait >> load >> travel

    first = run_dag(dag)
    assert task_states(first) == {"wait": "success", "load": "success", "travel": "success"}
    assert _rows(target, s3_options) == _rows(source, s3_options)
    _append(source, s3_options, [5, 6])
    second = run_dag(dag)
    assert task_states(second)["load"] == "success"
    assert [(b["start_version"], b["end_version"]) for b in
            xcom_value(second, "load")["batches"]] == [(2, 2)]
    assert _rows(target, s3_options) == _rows(source, s3_options)
    assert _rows(snapshot, s3_options) == _rows(source, s3_options, version=0)
    assert list(watermark("wm_s3").values())[0]["version"] == 2
    # Spark wrote the target's data files: they sit beside its log in the bucket.
    assert DeltaTable(target, storage_options=s3_options).file_uris()[0].startswith(target)


def test_a_fault_mid_load_then_an_exact_rerun(s3_load, s3_options, run_dag, task_states,
                                              request):
    prefix = f"s3://{S3_BUCKET}/fault-{request.node.callspec.id}"
    source, target = f"{prefix}/source", f"{prefix}/target"
    for ids in ([0, 1, 2], [3, 4], [5, 6], [7]):
        _append(source, s3_options, ids)
    forget_watermark("wm_s3_fault")

    def dag(transform):
        with DAG("s3_fault", schedule=None) as built:
            DeltaIncrementalOperator(task_id="load", table_uri=source, target=target,
                                     watermark_store="variable", watermark_key="wm_s3_fault",
                                     initial="earliest", max_files=1, transform=transform,
                                     **s3_load)
        return built

    # Rows of id 6 (version 2) fail inside the Spark write: versions 0 and 1 are committed.
    assert task_states(run_dag(dag("operators.transforms:fail_inside_write"))) == {
        "load": "failed"}
    assert sorted(r[0] for r in _rows(target, s3_options)) == [0, 1, 2, 3, 4]
    assert watermark("wm_s3_fault") is None
    assert task_states(run_dag(dag("operators.transforms:add_batch_end"))) == {"load": "success"}
    assert sorted(r[0] for r in _rows(target, s3_options)) == list(range(8))


class SerialRequests:
    """A WSGI app that serves one request at a time: moto checks ``If-None-Match: *`` and then
    stores the object in two steps, which concurrent requests can interleave; S3 does both
    atomically. Serialised, moto behaves as S3 does."""

    def __init__(self, app):
        self.app, self.lock = app, threading.Lock()

    def __call__(self, environ, start_response):
        with self.lock:
            return list(self.app(environ, start_response))


@pytest.fixture
def serial_moto():
    """A moto S3 server on 127.0.0.1 that serves one request at a time; its storage options."""
    import boto3
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication, MotoRequestHandler, create_backend_app,
    )
    from werkzeug.serving import make_server

    app = SerialRequests(DomainDispatcherApplication(create_backend_app))
    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=MotoRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                 aws_access_key_id="testing", aws_secret_access_key=S3_SECRET
                 ).create_bucket(Bucket="race")
    yield {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": S3_SECRET,
           "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true"}
    server.shutdown()
    thread.join()


def test_writers_racing_on_an_s3_target_each_commit_once(serial_moto):
    """deltalake commits to S3 with a conditional put (``If-None-Match: *``) of the commit file:
    of writers racing for one version, one wins and the others retry on the next; no lock, no
    unsafe rename. Eight appends at once leave eight commits and every row once."""
    uri = "s3://race/target"
    _append(uri, serial_moto, [0])
    threads = [threading.Thread(target=_append, args=(uri, serial_moto, [i]))
               for i in range(1, 9)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert DeltaTable(uri, storage_options=serial_moto).version() == 8
    assert sorted(r[0] for r in _rows(uri, serial_moto)) == list(range(9))


class _LosesOneAnswer:
    """A TCP relay to the moto server that passes every byte both ways, except that it hangs
    up on the client instead of passing the answer of the first request whose first line has
    ``lose`` in it: the request took effect, its answer never came (as when a network drops
    it)."""

    def __init__(self, upstream: str, lose: bytes):
        host, _, port = upstream.removeprefix("http://").partition(":")
        self.upstream, self.lose, self.lost = (host, int(port)), lose, threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:  # closed: the test is over
                return
            server = socket.create_connection(self.upstream)
            doomed = threading.Event()  # the request in flight is the one to lose
            threading.Thread(target=self._requests, args=(client, server, doomed),
                             daemon=True).start()
            threading.Thread(target=self._answers, args=(server, client, doomed),
                             daemon=True).start()

    def _requests(self, client: socket.socket, server: socket.socket,
                  doomed: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                first_line = data.split(b"\r\n", 1)[0]
                if self.lose in first_line and not self.lost.is_set():
                    self.lost.set()
                    doomed.set()
                server.sendall(data)
        server.close()

    def _answers(self, server: socket.socket, client: socket.socket,
                 doomed: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while data := server.recv(65536):
                if doomed.is_set():
                    break  # the answer arrived: drop it and hang up
                client.sendall(data)
        for end in (client, server):  # shutdown wakes the other thread's recv; close alone not
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()

    def close(self) -> None:
        self.listener.close()


def test_a_commit_whose_answer_was_lost_keeps_its_staged_files(
        spark_local_conn, s3_options, monkeypatch, run_dag, task_states, xcom_value, tmp_path):
    """deltalake creates the target (its own commit); the answer to the put of commit 0 is
    lost, object_store puts it again and finds the version taken, by this very commit, and
    deltalake reports a failed commit. The sink must not take the batch for another run's and
    drop its staged files: the commit that landed adds them."""
    source, target = str(tmp_path / "source"), f"s3://{S3_BUCKET}/unclear-commit"
    append_rows(source, [0, 1, 2])
    append_rows(source, [3, 4])
    relay = _LosesOneAnswer(s3_options["AWS_ENDPOINT_URL"],
                            b"PUT /lake/unclear-commit/_delta_log/00000000000000000000.json ")
    try:
        conn_id = _connection(monkeypatch, "delta", dict(s3_options, AWS_ENDPOINT_URL=relay.url))
        with DAG("unclear_commit", schedule=None) as dag:
            DeltaIncrementalOperator(
                task_id="load", table_uri=source, target=target, start_version=0,
                end_version=1, delta_conn_id=conn_id, conn_id=spark_local_conn,
                env_vars=driver_env(), conf={**SPARK_CONF, **maven_confs(S3A_PACKAGES,
                                                                        S3A_EXCLUDES)})
        run = run_dag(dag)
    finally:
        relay.close()

    assert relay.lost.is_set()  # the fault happened
    assert task_states(run) == {"load": "success"}
    assert [b["rows"] for b in xcom_value(run, "load")["batches"]] == [5]
    table = DeltaTable(target, storage_options=s3_options)
    assert table.version() == 0
    assert _rows(target, s3_options) == delta_rows(source)
