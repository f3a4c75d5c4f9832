"""The demo: ``python -m dags_examples.demo`` in the repository root (``bash scripts/dev.sh demo``).

Everything runs on this machine, in ``./.demo/`` (wiped at every start): an Airflow home with a
SQLite metadata DB, a Delta source table written with ``deltalake``, and a Delta target table.
The DAG is sensor -> incremental load -> watermark, the load a real ``spark-submit`` to
``local[2]``. It runs twice: the first run loads versions 0..1, then two more commits arrive
and the second run loads only versions 2..3.

With ``--connect`` (``bash scripts/dev.sh demo --connect``) the same DAG runs on a Spark Connect
server that the demo starts on 127.0.0.1 from the pyspark wheel and stops by its PID at the end:
the connection ``spark_demo`` is then of type ``spark_connect``, and nothing is submitted.

The terminal shows what each run read and wrote and the watermark; Airflow's and Spark's logs
go to ``.demo/demo.log`` (printed at the end if a run fails; ``--verbose`` shows them live).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path

DEMO_DIR = Path.cwd() / ".demo"
SOURCE = DEMO_DIR / "source"
TARGET = DEMO_DIR / "target"
DEMO_LOG = DEMO_DIR / "demo.log"
WATERMARK_VARIABLE = "demo_delta_watermark"


def prepare_environment() -> None:
    """A fresh ``.demo`` Airflow home; must run before Airflow is imported."""
    shutil.rmtree(DEMO_DIR, ignore_errors=True)
    (DEMO_DIR / "airflow" / "dags").mkdir(parents=True)
    bin_dir = os.path.dirname(sys.executable)  # spark-submit of this venv
    os.environ.update({
        "AIRFLOW_HOME": str(DEMO_DIR / "airflow"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(DEMO_DIR / "airflow" / "dags"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{DEMO_DIR / 'airflow' / 'airflow.db'}",
        "AIRFLOW_CONN_SPARK_DEMO": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
    })


def append_orders(first_id: int, count: int) -> int:
    """One commit of ``count`` orders to the source table; returns its version."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    ids = list(range(first_id, first_id + count))
    orders = pa.table({
        "order_id": pa.array(ids, pa.int64()),
        "amount": pa.array([round(10 + i * 1.5, 2) for i in ids], pa.float64()),
        "country": pa.array(["DE", "FR", "US"][i % 3] for i in ids),
    })
    write_deltalake(str(SOURCE), orders, mode="append", partition_by=["country"])
    return DeltaTable(str(SOURCE)).version()


SPARK_SUBMIT_CONF = {
    "spark.ui.enabled": "false", "spark.log.level": "WARN", "spark.sql.shuffle.partitions": "2",
    # a short job: C1-only JIT and the serial GC start the JVM faster
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
}
CONNECT_CONF = {"spark.sql.shuffle.partitions": "2"}  # a session takes runtime confs only


def build_dag(conf: dict[str, str]):
    from airflow.providers.common.compat.sdk import DAG

    from airflow_provider_delta.operators import DeltaIncrementalOperator
    from airflow_provider_delta.sensors import DeltaVersionSensor

    with DAG("delta_incremental_demo", schedule=None, catchup=False) as dag:
        watermark = {"watermark_store": "variable", "watermark_key": WATERMARK_VARIABLE}
        new_versions = DeltaVersionSensor(
            task_id="new_versions", table_uri=str(SOURCE), initial="earliest", poke_interval=1,
            timeout=60, **watermark,
        )
        load = DeltaIncrementalOperator(
            task_id="load", table_uri=str(SOURCE), sensor_task_id="new_versions",
            target=str(TARGET), partition_by=["country"],
            sql="select order_id, amount, country, amount * 0.2 as tax from changes",
            conn_id="spark_demo", conf=conf, **watermark,
        )
        new_versions >> load
    return dag


def run_once(dag, logical_date: datetime) -> dict:
    """One ``dag.test()`` run on the SQLite DB; returns the load task's XCom result."""
    from airflow.dag_processing.collection import update_dag_parsing_results_in_db
    from airflow.models.xcom import XComModel
    from airflow.serialization.serialized_objects import LazyDeserializedDAG
    from airflow.utils.session import create_session

    with create_session() as session:  # dag.test() runs DAGs it finds serialized in the DB
        update_dag_parsing_results_in_db("dags-folder", None, [LazyDeserializedDAG.from_dag(dag)],
                                         {}, None, set(), session=session)
    run = dag.test(logical_date=logical_date)
    if run.state != "success":
        raise SystemExit(f"demo run {run.run_id} ended {run.state}")
    with create_session() as session:
        row = session.scalars(XComModel.get_many(run_id=run.run_id, key="return_value",
                                                 task_ids="load", dag_ids=dag.dag_id)).first()
        return XComModel.deserialize_value(row)


def report(title: str, result: dict, out) -> None:
    from airflow.models import Variable
    from deltalake import DeltaTable, QueryBuilder

    from airflow_provider_delta.watermarks import VariableWatermarkStore

    target = DeltaTable(str(TARGET))
    total = QueryBuilder().register("t", target).execute("select count(*) as n from t")
    print(f"\n=== {title} ===", file=out)
    print(f"read source versions {result['start_version']}..{result['end_version']}: "
          f"{result['files']} file(s), {result['bytes']} bytes", file=out)
    for batch in result["batches"]:
        print(f"  batch {batch['start_version']}..{batch['end_version']}: wrote {batch['rows']} "
              f"row(s) as target version {batch['sink_version']}", file=out)
    print(f"target {TARGET}: version {target.version()}, "
          f"{total.read_all().column(0).to_pylist()[0]} rows in total", file=out)
    variable = VariableWatermarkStore(key=WATERMARK_VARIABLE, table_uri=str(SOURCE)).variable
    print(f"watermark (Variable {variable}): {Variable.get(variable)}\n", file=out)


def main(argv: list[str]) -> None:
    prepare_environment()
    with terminal_and_log(DEMO_LOG, verbose="--verbose" in argv) as out:
        if "--connect" not in argv:
            run_demo(SPARK_SUBMIT_CONF, out)
            return
        from dags_examples.local_connect_server import LocalConnectServer

        with LocalConnectServer(DEMO_DIR / "connect-server.log") as server:
            print(f"Spark Connect server on 127.0.0.1:{server.port}, PID {server.process.pid}",
                  file=out)
            os.environ["AIRFLOW_CONN_SPARK_DEMO"] = json.dumps(
                {"conn_type": "spark_connect", "host": "localhost", "port": server.port})
            run_demo(CONNECT_CONF, out)
        print(f"Spark Connect server PID {server.process.pid} stopped", file=out)


@contextmanager
def terminal_and_log(log_path: Path, *, verbose: bool) -> Iterator:
    """Yields the terminal; file descriptors 1 and 2 (ours and spark-submit's) go to the log."""
    if verbose:
        yield sys.stdout
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(log_path, "ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    terminal = os.fdopen(os.dup(saved[0]), "w", buffering=1)
    try:
        print(f"Airflow and Spark logs: {log_path}", file=terminal)
        yield terminal
    except BaseException:
        restore_output(saved)
        print(log_path.read_text(errors="replace"), file=sys.stderr)
        print(f"The demo failed; its log is above and in {log_path}", file=sys.stderr)
        raise
    else:
        restore_output(saved)
    finally:
        terminal.close()


def restore_output(saved: tuple[int, int]) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    for fd, saved_fd in zip((1, 2), saved):
        os.dup2(saved_fd, fd)
        os.close(saved_fd)


def run_demo(conf: dict[str, str], out) -> None:
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.utils import db

    db.initdb()
    DagBundlesManager().sync_bundles_to_db()
    append_orders(0, 5)
    append_orders(5, 3)
    dag = build_dag(conf)
    today = datetime.now(timezone.utc).replace(microsecond=0)

    report("run 1: first load (versions 0..1)", run_once(dag, today), out)
    append_orders(8, 4)
    append_orders(12, 2)
    report("run 2: only the new versions (2..3)", run_once(dag, today + timedelta(seconds=1)), out)


if __name__ == "__main__":
    main(sys.argv[1:])
