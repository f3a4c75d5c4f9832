"""OpenLineage: a real DAG run with the OpenLineage provider's file transport; the test reads
the events it wrote."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable

import airflow_provider_delta

from operators.conftest import SPARK_CONF, append_rows

# The provider reads its transport once per process: the DAG runs in `airflow dags test`,
# a process of its own started with AIRFLOW__OPENLINEAGE__TRANSPORT.
DAG_FILE = """
from airflow.sdk import DAG
from airflow_provider_delta.operators import DeltaIncrementalOperator, DeltaTimeTravelOperator
from airflow_provider_delta.sensors import DeltaVersionSensor

spark = {{"conn_id": "spark_local", "conf": {conf!r}}}
with DAG("lineage_load", schedule=None):
    sense = DeltaVersionSensor(task_id="sense", table_uri={source!r}, initial="earliest",
                               watermark_store="variable", watermark_key="wm_lineage")
    load = DeltaIncrementalOperator(task_id="load", table_uri={source!r}, target={target!r},
                                    sensor_task_id="sense", watermark_store="variable",
                                    watermark_key="wm_lineage", **spark)
    travel = DeltaTimeTravelOperator(task_id="travel", table_uri={source!r}, version=0,
                                     target={snapshot_target!r}, **spark)
    sense >> load >> travel
"""


def _run_with_openlineage(dag_file, events_file, airflow_db) -> None:
    env = {
        **os.environ,
        "AIRFLOW__CORE__DAGS_FOLDER": str(dag_file.parent),
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
            {"type": "file", "log_file_path": str(events_file), "append": True}),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "lineage_test",
        "AIRFLOW_CONN_SPARK_LOCAL": '{"conn_type": "spark", "host": "local[2]"}',
        "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}",
    }
    airflow = os.path.join(os.path.dirname(sys.executable), "airflow")
    done = subprocess.run([airflow, "dags", "test", "lineage_load", "-f", str(dag_file)],
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]


def _completed(events_file) -> dict[str, dict]:
    """The COMPLETE event of each task, by task id."""
    events = [json.loads(line) for line in events_file.read_text().splitlines() if line]
    return {event["job"]["name"].split(".", 1)[1]: event for event in events
            if event["eventType"] == "COMPLETE" and "." in event["job"]["name"]}


def _dataset(event: dict, side: str) -> list[tuple[str, str, str | None]]:
    return [(d["namespace"], d["name"], d["facets"].get("version", {}).get("datasetVersion"))
            for d in event[side]]


def _versions(event: dict) -> tuple:
    """The run facet's mode, source range and target version."""
    facet = event["run"]["facets"]["airflowProviderDelta"]
    return (facet["mode"], facet["sourceStartVersion"], facet["sourceEndVersion"],
            facet.get("targetVersion"))


@pytest.mark.slow
def test_events_name_the_tables_and_carry_the_versions(airflow_db, tmp_path):
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    snapshot_target = str(tmp_path / "snapshot")
    append_rows(source, [0, 1, 2])
    append_rows(source, [3, 4])
    dag_file = tmp_path / "dags" / "lineage_load.py"
    dag_file.parent.mkdir()
    dag_file.write_text(DAG_FILE.format(conf=SPARK_CONF, source=source, target=target,
                                        snapshot_target=snapshot_target))
    events_file = tmp_path / "events.jsonl"

    _run_with_openlineage(dag_file, events_file, airflow_db)

    completed = _completed(events_file)
    source_end = str(DeltaTable(source).version())
    assert _dataset(completed["sense"], "inputs") == [("file", source, source_end)]
    assert _versions(completed["sense"]) == ("changes", 0, int(source_end), None)

    load = completed["load"]
    assert _dataset(load, "inputs") == [("file", source, source_end)]
    assert _dataset(load, "outputs") == [("file", target, str(DeltaTable(target).version()))]
    assert _versions(load) == ("changes", 0, int(source_end), DeltaTable(target).version())
    schema = load["inputs"][0]["facets"]["schema"]["fields"]
    assert [(f["name"], f["type"]) for f in schema] == [
        (f.name, f.type.type) for f in DeltaTable(source).schema().fields]

    travel = completed["travel"]
    assert _dataset(travel, "inputs") == [("file", source, "0")]
    assert _dataset(travel, "outputs") == [
        ("file", snapshot_target, str(DeltaTable(snapshot_target).version()))]
    assert _versions(travel) == ("snapshot", 0, 0, DeltaTable(snapshot_target).version())


def _module_level_imports(path) -> set[str]:
    """The modules a file imports when it is imported (not those imported inside functions)."""
    names, nodes = set(), [ast.parse(path.read_text())]
    while nodes:
        node = nodes.pop()
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add(node.module or "")
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            nodes.extend(ast.iter_child_nodes(node))
    return names


def test_a_local_path_keeps_its_url_characters_in_the_dataset_name():
    from airflow_provider_delta.openlineage import dataset_name

    assert dataset_name("/lake/t#1 ?x%41 é/") == ("file", "/lake/t#1 ?x%41 é")
    assert dataset_name("file:///lake/t#1") == ("file", "/lake/t#1")
    assert dataset_name("s3a://bucket/lake/t") == ("s3://bucket", "lake/t")


def test_only_the_lineage_module_imports_openlineage():
    """Without the OpenLineage provider installed the operators, the sensor and everything
    they import still import: OpenLineage is imported only by ``openlineage.py``, which only
    the ``get_openlineage_facets_on_*`` methods import, inside their bodies."""
    package = Path(airflow_provider_delta.__file__).parent
    importers = {
        str(path.relative_to(package)) for path in package.rglob("*.py")
        if any(name.startswith(("openlineage", "airflow.providers.openlineage",
                                "airflow.providers.common.compat.openlineage",
                                "airflow_provider_delta.openlineage"))
               for name in _module_level_imports(path))
    }
    assert importers == {"openlineage.py"}
