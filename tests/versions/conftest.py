"""Running a DAG file as a DAG author does on any supported Airflow: in a fresh process, from
the DAG folder, with the installed wheel."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_delta.compat import airflow_at_least

SPARK_CONF = {"spark.ui.enabled": "false", "spark.log.level": "WARN",
              "spark.sql.shuffle.partitions": "2", "spark.driver.memory": "1g",
              "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}


@pytest.fixture
def user_env(airflow_db) -> dict[str, str]:
    """The environment of a user's process: this test's Airflow home and metadata DB, not in
    Airflow's unit-test mode (whose configuration differs by version), without this checkout on
    the path, and with this venv's spark-submit and a local Spark connection."""
    from airflow.configuration import conf

    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "AIRFLOW__CORE__UNIT_TEST_MODE")}
    env.update({
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}",
        # Unit-test mode makes up a Fernet key per process; all must read the same Variables.
        "AIRFLOW__CORE__FERNET_KEY": conf.get("core", "fernet_key"),
        "AIRFLOW_CONN_SPARK_LOCAL": '{"conn_type": "spark", "host": "local[2]"}',
        "DELTA_SPARK_CONF": json.dumps(SPARK_CONF),
    })
    return env


@pytest.fixture
def run_dag_file(tmp_path):
    """``run_dag_file(path, env, *command)``: copy the DAG file into the DAG folder and run
    ``python <copy> *command`` there in a fresh process (the command runs ``dag.test()`` and
    prints the run's task states as JSON on its last line). Returns those states."""
    from airflow.configuration import conf

    dags = Path(conf.get("core", "dags_folder"))
    dags.mkdir(parents=True, exist_ok=True)

    def run(path: Path, env: dict[str, str], *command: str) -> dict[str, str]:
        dag_file = dags / path.name
        shutil.copy(path, dag_file)
        if airflow_at_least("3.0.0") and not airflow_at_least("3.1.0"):
            # Airflow 3.0's dag.test() does not parse the DAG folder, so the target is no active
            # asset and a load with an outlet fails; its DAG processor's step first.
            subprocess.run([str(Path(sys.executable).with_name("airflow")), "dags",
                            "reserialize"], cwd=tmp_path, env=env, check=True,
                           capture_output=True, timeout=600)
        done = subprocess.run([sys.executable, *command, str(dag_file)], cwd=tmp_path,
                              capture_output=True, text=True, timeout=900, env=env)
        states = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {}
        assert states and set(states.values()) == {"success"}, (
            done.stdout[-6000:] + done.stderr[-4000:])
        return states

    return run
