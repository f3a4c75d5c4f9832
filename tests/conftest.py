"""Fixtures shared by every test: the reference tables, one SparkSession, one Airflow home."""

from __future__ import annotations

import atexit
import itertools
import json
import logging
import os
import shutil
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests import time_limit, xdist_groups

# Airflow reads its configuration at import time, so the test home is set before any import.
# A pytest-xdist worker inherits the home its controller set: each worker takes one of its own
# (two processes creating and writing one SQLite metadata DB fail: "table xcom already exists").
_AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="airflow-home-"))
atexit.register(shutil.rmtree, _AIRFLOW_HOME, ignore_errors=True)  # one a pytest process
# Only the home the controller set is replaced: this module is imported twice in a process
# ("conftest", then "tests.conftest" by the tests that import from it), and processes the tests
# start may import it too; they keep their worker's home.
if (os.environ.get("PYTEST_XDIST_WORKER")
        and os.environ.get("AIRFLOW_HOME") == os.environ.get("DELTA_TESTS_CONTROLLER_HOME")):
    os.environ.pop("AIRFLOW_HOME", None)
    os.environ.pop("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", None)
os.environ.setdefault("AIRFLOW_HOME", str(_AIRFLOW_HOME))
os.environ.setdefault("DELTA_TESTS_CONTROLLER_HOME", os.environ["AIRFLOW_HOME"])
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "True")
os.environ.setdefault("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", f"sqlite:///{_AIRFLOW_HOME}/airflow.db")

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_TABLES = Path(
    os.environ.get("DELTA_SHARED_TABLES", REPO_ROOT.parent / "shared" / "delta-tables")
)


# Jars from Maven Central (spark.jars.packages) into ./.ivy2, cold in a fresh clone; resolved
# against Maven Central only (tests/ivysettings.xml). Each pytest-xdist worker resolves into a
# folder of its own: Ivy takes no lock, and two JVMs filling one cache at once can leave it
# corrupt (a jar half written, an ivy.xml listing the wrong files).
_IVY_DIR = REPO_ROOT / ".ivy2"
if os.environ.get("PYTEST_XDIST_WORKER"):
    _IVY_DIR = _IVY_DIR / os.environ["PYTEST_XDIST_WORKER"]
IVY_CONFS = {"spark.jars.ivy": str(_IVY_DIR),
             "spark.jars.ivySettings": str(REPO_ROOT / "tests" / "ivysettings.xml")}
# hadoop-aws of pyspark's Hadoop (3.5.0) with the AWS SDK modules S3A uses, instead of the SDK's
# 686 MB bundle.
AWS_SDK = "2.35.4"  # hadoop-project 3.5.0's aws-java-sdk-v2.version
S3A_PACKAGES = ("org.apache.hadoop:hadoop-aws:3.5.0",
                *(f"software.amazon.awssdk:{m}:{AWS_SDK}"
                  for m in ("s3", "s3-transfer-manager", "sts", "apache-client")))
S3A_EXCLUDES = ("software.amazon.awssdk:bundle",)


def maven_confs(packages: tuple[str, ...], excludes: tuple[str, ...] = ()) -> dict[str, str]:
    """Spark confs that fetch ``packages`` (without ``excludes``) from Maven Central."""
    return {"spark.jars.packages": ",".join(packages),
            "spark.jars.excludes": ",".join(excludes), **IVY_CONFS}


def shared_table_names() -> list[str]:
    """Every table listed in the shared MANIFEST.tsv, e.g. ``delta-golden/snapshot-data1``."""
    lines = (SHARED_TABLES / "MANIFEST.tsv").read_text().splitlines()[1:]
    return [line.split("\t", 1)[0] for line in lines if line.strip()]


def shared_manifest() -> dict[str, dict[str, str]]:
    """MANIFEST.tsv as {table: {column: value}}."""
    header, *rows = (SHARED_TABLES / "MANIFEST.tsv").read_text().splitlines()
    names = header.split("\t")
    return {
        row.split("\t")[0]: dict(zip(names, row.split("\t"))) for row in rows if row.strip()
    }


def widened_schema(schema: dict, widenings: list[tuple[list[str], str]], table_version: int) -> dict:
    """A copy of a Delta schema (parsed JSON) with each ``(field path, new type)`` applied and
    recorded in ``delta.typeChanges`` of the top-level field, as Delta's type widening does.
    A path is field names, then ``element``, ``key`` or ``value`` inside arrays and maps."""
    schema = json.loads(json.dumps(schema))
    for path, new_type in widenings:
        top = next(f for f in schema["fields"] if f["name"] == path[0])
        holder, key = top, "type"
        for step in path[1:]:
            node = holder[key]
            if node["type"] == "struct":
                holder = next(f for f in node["fields"] if f["name"] == step)
            else:
                holder, key = node, f"{step}Type"
        change = {"toType": new_type, "fromType": holder[key], "tableVersion": table_version}
        if len(path) > 1:
            change["fieldPath"] = ".".join(path[1:])
        top["metadata"].setdefault("delta.typeChanges", []).append(change)
        holder[key] = new_type
    return schema


def upgraded_to_name_mapping(meta_action: dict) -> dict:
    """A copy of a ``metaData`` action switched to column mapping mode ``name`` the way Delta
    upgrades a table: every field, nested ones too, gets an id and its own name as physical
    name (the name existing files use)."""
    schema = json.loads(meta_action["schemaString"])
    ids = itertools.count(1)

    def assign(fields: list[dict]) -> None:
        for field in fields:
            field["metadata"]["delta.columnMapping.id"] = next(ids)
            field["metadata"]["delta.columnMapping.physicalName"] = field["name"]
            if isinstance(field["type"], dict) and field["type"]["type"] == "struct":
                assign(field["type"]["fields"])

    assign(schema["fields"])
    configuration = dict(meta_action.get("configuration") or {})
    configuration.update({"delta.columnMapping.mode": "name",
                          "delta.columnMapping.maxColumnId": str(next(ids) - 1)})
    return dict(meta_action, schemaString=json.dumps(schema), configuration=configuration)


NAME_MAPPING_PROTOCOL = {"protocol": {"minReaderVersion": 2, "minWriterVersion": 5}}


@pytest.fixture
def shared_table(tmp_path):
    """Copy a shared reference table into a temp folder and return its local path."""

    def copy(name: str) -> str:
        target = tmp_path / "shared" / name
        shutil.copytree(SHARED_TABLES / name, target)
        return str(target)

    return copy


def pytest_collection_modifyitems(config, items):
    """Tests that share a costly session fixture, or must not run side by side, go to one
    pytest-xdist worker (``--dist loadgroup``, as ``bash scripts/dev.sh test`` runs them):

    - ``tests/package``: the distribution built once (``python -m build`` writes its
      ``*.egg-info`` into the checkout, so two builds at once would collide);
    - the loads over Spark Connect: one ``connect_server`` (a JVM of 1 GiB and its jars'
      resolution, about a minute) instead of one a worker.
    """
    groups = {}
    for item in items:
        group = _worker_group(item)
        if group:
            groups[item.nodeid.rsplit("@", 1)[0]] = group
            item.add_marker(pytest.mark.xdist_group(group))
    xdist_groups.write_groups(groups)


def _worker_group(item) -> str | None:
    callspec = getattr(item, "callspec", None)
    params = [value if isinstance(value, tuple) else (value,)
              for value in (callspec.params.values() if callspec else ())]
    if item.nodeid.startswith("tests/package/"):
        return "package"
    if "connect_server" in item.fixturenames or any("spark-connect" in p for p in params):
        return "spark-connect"
    return None


def pytest_configure(config):
    xdist_groups.name_the_file()


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: absent under -p no:xdist
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` as pytest-xdist means it, on every pytest (tests/xdist_groups.py)."""
    if config.getoption("dist", None) == "loadgroup":
        return xdist_groups.make_scheduler(config, log)
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Every test (setup, call and teardown) under ``time_limit``'s time limit."""
    timer = time_limit.watch(item)
    try:
        yield
    finally:
        timer.cancel()


# A folder name a file:// URL would cut at "#" (fragment) or "?" (query) and decode at "%41".
URL_CHARACTERS = "t#1 ?x%41 é"


@pytest.fixture
def url_characters_table(tmp_path):
    """A partitioned Delta table of three appends in the folder ``URL_CHARACTERS``; returns
    (its path, the path of a copy under a plain name for deltalake's own reads: deltalake 1.6
    reads ``%41`` in a local path as ``A``). The paths in its log are relative."""
    import pyarrow as pa
    from deltalake import write_deltalake

    plain, table = tmp_path / "plain", tmp_path / URL_CHARACTERS
    for start in (0, 3, 6):
        ids = list(range(start, start + 3))
        write_deltalake(plain, pa.table({"id": ids, "part": ["a", "b#?%41 é", "a"]}),
                        partition_by=["part"], mode="append")
    shutil.copytree(plain, table)
    return str(table), str(plain)


# Commit times of time-travel-start-start20-start40 as the generator wrote them (epoch ms).
TIME_TRAVEL_COMMIT_MS = (1540415658000, 1540415658000 + 20 * 60_000, 1540415658000 + 40 * 60_000)


@pytest.fixture
def time_travel_table(shared_table):
    """A copy of ``time-travel-start-start20-start40`` with its commit files' times restored."""
    path = shared_table("delta-golden/time-travel-start-start20-start40")
    for version, millis in enumerate(TIME_TRAVEL_COMMIT_MS):
        commit = os.path.join(path, "_delta_log", f"{version:020d}.json")
        os.utime(commit, (millis / 1000, millis / 1000))
    return path


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession for the whole run, in UTC."""
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("airflow-provider-delta-tests")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    yield session
    session.stop()
    # py4j logs from __del__ at interpreter exit, after pytest closed the log streams.
    logging.getLogger("py4j").setLevel(logging.WARNING)


@pytest.fixture(scope="session")
def airflow_db():
    """A fresh SQLite metadata DB in the test AIRFLOW_HOME, created once per run."""
    from airflow.utils import db

    db.initdb()
    return os.environ["AIRFLOW_HOME"]


_run_dates = itertools.count(1)


@pytest.fixture
def register_dag(airflow_db):
    """``register_dag(dag)``: serialize a DAG object into the metadata DB, as the DAG
    processor would (dag.test() and the triggerer only run DAGs found there)."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.collection import update_dag_parsing_results_in_db
    from airflow.serialization.serialized_objects import LazyDeserializedDAG
    from airflow.utils.session import create_session

    DagBundlesManager().sync_bundles_to_db()

    def register(dag) -> None:
        with create_session() as session:
            update_dag_parsing_results_in_db(
                "dags-folder", None, [LazyDeserializedDAG.from_dag(dag)], {}, None, set(),
                session=session,
            )

    return register


@pytest.fixture
def run_dag(register_dag):
    """Run a DAG object once with ``dag.test()`` on the SQLite DB; returns the DagRun.

    Each call gets a later logical date, so ``include_prior_dates`` sees earlier runs.
    """

    def run(dag):
        register_dag(dag)
        logical_date = datetime(2024, 1, 1, tzinfo=timezone.utc) + timedelta(days=next(_run_dates))
        return dag.test(logical_date=logical_date)

    return run


@pytest.fixture
def task_states():
    """``task_states(dag_run)``: ``{task_id: state}`` of a finished DagRun, from the DB."""

    def states(dag_run) -> dict[str, str]:
        return {ti.task_id: ti.state for ti in dag_run.get_task_instances()}

    return states


@pytest.fixture
def xcom_value():
    """``xcom_value(dag_run, task_id, key)``: an XCom of ``task_id`` in ``dag_run``, from the DB."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    def value(dag_run, task_id: str, key: str = "return_value"):
        with create_session() as session:
            row = session.scalars(XComModel.get_many(
                run_id=dag_run.run_id, key=key, task_ids=task_id, dag_ids=dag_run.dag_id,
            )).first()
            return None if row is None else XComModel.deserialize_value(row)

    return value


S3_BUCKET = "lake"
S3_SECRET = "moto-secret-key-98765"  # distinctive, so tests can prove it never reaches a log


@pytest.fixture(scope="session")
def s3_options():
    """A moto S3 server on 127.0.0.1 with bucket ``lake``; its object_store options."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    options = {
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": S3_SECRET,
        "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ALLOW_HTTP": "true",
    }
    boto3.client("s3", endpoint_url=options["AWS_ENDPOINT_URL"], region_name="us-east-1",
                 aws_access_key_id="testing", aws_secret_access_key=S3_SECRET,
                 ).create_bucket(Bucket=S3_BUCKET)
    yield options
    server.stop()


@pytest.fixture
def moto_checks_credentials(monkeypatch):
    """moto authenticates every request from now on: keys it does not know get a 403."""
    import moto.settings

    monkeypatch.setattr(moto.settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)


@pytest.fixture
def s3_store(s3_options):
    """An obstore handle on the test bucket."""
    from obstore.store import S3Store

    return S3Store(S3_BUCKET, endpoint=s3_options["AWS_ENDPOINT_URL"], region="us-east-1",
                   access_key_id="testing", secret_access_key=S3_SECRET,
                   client_options={"allow_http": True})


@pytest.fixture
def upload(s3_store):
    """``upload(local_folder, prefix)``: copy a table into the bucket; returns its s3:// URI."""
    import obstore

    def put_tree(local: str, prefix: str) -> str:
        for folder, _, names in os.walk(local):
            for name in names:
                source = Path(folder) / name
                obstore.put(s3_store, f"{prefix}/{source.relative_to(local)}", source.read_bytes())
        return f"s3://{S3_BUCKET}/{prefix}"

    return put_tree


@pytest.fixture
def statsd_lines(monkeypatch):
    """``[metrics] statsd_on`` towards a UDP socket on 127.0.0.1, with InfluxDB-style tags;
    ``statsd_lines()`` returns the StatsD lines received so far. Stats is set up as Airflow's task runner sets it up
    (dag.test() and triggers run in the test process, where nothing else does)."""
    import socket
    import threading

    from airflow.sdk._shared.observability.metrics.base_stats_logger import NoStatsLogger
    from airflow.sdk.observability import stats
    from airflow.sdk.observability.metrics import stats_utils

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.2)
    lines: list[str] = []
    done = threading.Event()

    def receive():
        while not done.is_set():
            try:
                lines.extend(sock.recv(65535).decode().splitlines())
            except socket.timeout:
                continue

    for key, value in {"STATSD_ON": "True", "STATSD_HOST": "127.0.0.1",
                       "STATSD_PORT": str(sock.getsockname()[1]),
                       "STATSD_INFLUXDB_ENABLED": "True"}.items():
        monkeypatch.setenv(f"AIRFLOW__METRICS__{key}", value)
    stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=False)
    thread = threading.Thread(target=receive, daemon=True)
    thread.start()

    def received() -> list[str]:
        # Loopback datagrams queue in order on the one socket: once a marker sent now is read,
        # so is everything sent before it.
        marker = f"marker.{len(lines)}.{id(lines)}:1|c"
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
            sender.sendto(marker.encode(), sock.getsockname())
        while marker not in lines:
            done.wait(0.05)
        return [line for line in lines if not line.startswith("marker.")]

    try:
        yield received
    finally:
        stats.initialize(factory=NoStatsLogger, export_legacy_names=False)
        done.set()
        thread.join()
        sock.close()
