"""The probe: secrets planted in every documented form and transport, searched for in
everything a person or another process can read while and after real DAGs run."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from airflow.sdk import DAG, task

from .conftest import CONNECT_TOKEN, SPARK_CONF, append_rows, connect_connection, driver_env
from .planted_secrets import (
    CONF_LITERAL,
    CONF_TEMPLATED_KEY,
    CONF_TEMPLATED_SECRET,
    CONNECTIONS,
    PRIVATE_KEY,
    SINK_OPTIONS,
    SINK_TEMPLATED_SECRET,
    STORAGE_OPTIONS_SECRET,
    connection_secrets,
    option_secrets,
)
from .transforms import PROBE_ENV


def test_every_connection_credential_is_masked_in_a_task_log_line(
        run_dag, task_states, monkeypatch, tmp_path):
    """Registered by value: a task that logs each credential of each connection type shows
    ``***`` in its place, whatever Airflow's name list says about the field. The lines go
    through the processors Airflow writes task logs with (``dag.test()``'s console has no
    masking of its own)."""
    logging_processors = pytest.importorskip("airflow.sdk.log").logging_processors
    for conn_id, (connection, _) in CONNECTIONS.items():
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(connection))
    task_log = tmp_path / "task.log"

    with DAG("probe_connection_logs", schedule=None) as dag:
        @task
        def log_credentials():
            import structlog

            from airflow_provider_delta.hooks.delta import DeltaHook

            with task_log.open("w") as out:
                log = structlog.wrap_logger(structlog.PrintLogger(out),
                                            processors=logging_processors(json_output=False, colors=False))
                for conn_id, (_, secrets) in CONNECTIONS.items():
                    DeltaHook(conn_id).get_storage_options()
                    for number, secret in enumerate(secrets):
                        log.info(f"probe {conn_id} {number}: <{secret}>")

        log_credentials()

    run = run_dag(dag)

    assert task_states(run) == {"log_credentials": "success"}
    text = task_log.read_text()
    for conn_id, (_, secrets) in CONNECTIONS.items():
        for number, _ in enumerate(secrets):
            assert f"probe {conn_id} {number}: <***>" in text, (conn_id, number, text)
    assert [secret for secret in connection_secrets() if secret in text] == []
    assert PRIVATE_KEY.splitlines()[1] not in text



REDACTED = "*********(redacted)"
# Where a literal in the DAG file is kept as written (the DAG's code and its serialized form)
# and where the templates' values come from: the author's own storage, not a leak. The DB's
# file is searched table by table, without these.
AS_WRITTEN = {"dag_code", "serialized_dag", "variable"}
DB_FILE = "airflow.db"
PROBE = "operators.transforms:probe_while_running"
# The driver's UI listens on SPARK_LOCAL_IP (all interfaces without it).
LOOPBACK_DRIVER_ENV = {**driver_env(), "SPARK_LOCAL_IP": "127.0.0.1"}


@pytest.fixture
def probe(tmp_path, monkeypatch, recorded_command_lines, private_tmp, run_dag, capfd, caplog):
    """Plant everything (connections, the Variables the templates read, the probing
    transform's instructions); ``probe(dag, ui_url)`` runs the DAG and returns the run, what
    the transform saw while the job ran, and which secrets were found where."""
    for conn_id, (connection, _) in CONNECTIONS.items():
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(connection))
    _set_variables({"probe_sink_options": json.dumps(SINK_OPTIONS),
                    "probe_conf_secret": CONF_TEMPLATED_SECRET,
                    "probe_sink_secret": SINK_TEMPLATED_SECRET})
    out, instructions = tmp_path / "probe.jsonl", tmp_path / "probe.json"
    monkeypatch.setenv(PROBE_ENV, str(instructions))
    secrets = [*connection_secrets(), *option_secrets(), CONNECT_TOKEN]
    airflow_home = Path(os.environ["AIRFLOW_HOME"])

    def run(dag, ui_url=None):
        instructions.write_text(json.dumps({
            "secrets": secrets, "out": str(out), "ui_url": ui_url,
            "folders": [str(tmp_path), str(airflow_home)], "db_file": DB_FILE}))
        dag_run = run_dag(dag)
        seen = [json.loads(line) for line in out.read_text().splitlines()]
        out.unlink()
        texts = {
            "logs": "".join(capfd.readouterr()) + caplog.text,
            "spark-submit command lines": (recorded_command_lines.read_text()
                                           if recorded_command_lines.exists() else ""),
            "files": _file_texts([tmp_path, airflow_home], skip=instructions),
            "metadata DB": _metadata_db_text(),
        }
        for entry in seen:
            texts[f"{entry['task_id']}, running: command lines"] = "\n".join(
                entry["command_lines"])
            texts[f"{entry['task_id']}, running: files"] = str(
                {path: hits for path, hits in entry["files"].items() if hits})
            texts.update({f"{entry['task_id']}, running: {page}": text
                          for page, text in entry["ui"].items()})
        found = {where: [s for s in secrets if s in text] for where, text in texts.items()}
        return dag_run, seen, {where: hits for where, hits in found.items() if hits}

    return run


def _set_variables(values: dict[str, str]) -> None:
    from airflow.models import Variable

    for key, value in values.items():
        Variable.set(key, value)


def _file_texts(folders: list[Path], skip: Path) -> str:
    """Every file under ``folders`` as text (what any process of the user could read)."""
    texts = []
    for folder in folders:
        for path in folder.rglob("*"):
            if path.is_file() and path != skip and not path.name.startswith(DB_FILE):
                texts.append(f"{path}: " + path.read_bytes().decode(errors="replace"))
    return "\n".join(texts)


def _metadata_db_text() -> str:
    """Every row of every metadata DB table but those in ``AS_WRITTEN``."""
    from sqlalchemy import MetaData

    from airflow.settings import engine

    metadata = MetaData()
    metadata.reflect(engine)
    with engine.connect() as connection:
        return "\n".join(f"{name}: {connection.execute(table.select()).fetchall()}"
                         for name, table in metadata.tables.items() if name not in AS_WRITTEN)


def _probe_load(task_id: str, source: str, target: str, **kwargs):
    from airflow_provider_delta.operators import DeltaIncrementalOperator

    return DeltaIncrementalOperator(
        task_id=task_id, table_uri=source, target=target, sink="parquet", transform=PROBE,
        watermark_store="variable", watermark_key=f"wm_probe_{task_id}", **kwargs)


def _assert_redacted_while_running(entry: dict, keys: list[str]) -> None:
    """The Environment answer lists each credential key of ``conf``, its value redacted."""
    (environment,) = [json.loads(text) for page, text in entry["ui"].items()
                      if page.endswith("/environment")]
    shown = dict(map(tuple, environment["sparkProperties"]))
    hadoop = dict(map(tuple, environment["hadoopProperties"]))
    for key in keys:
        assert shown[key] == REDACTED, key
        assert hadoop[key.removeprefix("spark.hadoop.")] == REDACTED, key
    assert any("SparkSubmit" in line for line in entry["command_lines"])
    assert any(path.endswith("spec.json") for path in entry["files"])


@pytest.mark.slow
def test_no_secret_is_shown_anywhere_by_a_spark_submit_load_and_a_failing_one(
        probe, spark_local_conn, standalone_master, monkeypatch, tmp_path):
    """Local master, successful; standalone master (client mode), failing in the driver."""
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CLUSTER", json.dumps(
        {"conn_type": "spark", "host": "spark://127.0.0.1", "port": standalone_master}))
    source = str(tmp_path / "source")
    append_rows(source, [0, 1])
    conf = {**SPARK_CONF, "spark.ui.enabled": "true", "spark.ui.port": "0", **CONF_LITERAL,
            CONF_TEMPLATED_KEY: "{{ var.value.probe_conf_secret }}"}
    with DAG("probe_spark_submit", schedule=None) as dag:
        _probe_load("load", source, str(tmp_path / "copy"), conn_id=spark_local_conn,
                    conf=conf, env_vars=LOOPBACK_DRIVER_ENV, delta_conn_id="probe_delta_s3",
                    sink_options="{{ var.value.probe_sink_options }}")
        _probe_load("failing", source, str(tmp_path / "copy_failing"), conn_id="spark_cluster",
                    conf={**conf, "spark.pyspark.python": sys.executable},
                    env_vars=LOOPBACK_DRIVER_ENV, total_executor_cores=1, executor_memory="512m",
                    storage_options={"AZURE_STORAGE_ACCOUNT_KEY": STORAGE_OPTIONS_SECRET},
                    sink_options={"fs.azure.account.key.sink.dfs.core.windows.net":
                                  "{{ var.value.probe_sink_secret }}"})

    run, seen, found = probe(dag)

    assert {ti.task_id: ti.state for ti in run.get_task_instances()} == {
        "load": "success", "failing": "failed"}
    assert found == {}
    assert sorted(entry["task_id"] for entry in seen) == ["failing", "load"]
    for entry in seen:
        _assert_redacted_while_running(entry, [*CONF_LITERAL, CONF_TEMPLATED_KEY])
    assert "***" in str(_rendered(run, "load")["sink_options"])


@pytest.mark.slow
def test_no_secret_is_shown_anywhere_by_spark_connect_loads(probe, connect_server,
                                                              monkeypatch, tmp_path):
    """The session's credential confs and the writer's credential options stay out of the
    server's UI (Environment and SQL answers), while the jobs run and after."""
    import urllib.request

    conn_id = connect_connection(monkeypatch, connect_server.port)
    source = str(tmp_path / "source")
    append_rows(source, [0, 1])
    conf = {**CONF_LITERAL, CONF_TEMPLATED_KEY: "{{ var.value.probe_conf_secret }}"}
    with DAG("probe_spark_connect", schedule=None) as dag:
        _probe_load("load", source, str(tmp_path / "copy"), conn_id=conn_id, conf=conf,
                    delta_conn_id="probe_aws", sink_options="{{ var.value.probe_sink_options }}")
        _probe_load("failing", source, str(tmp_path / "copy_failing"), conn_id=conn_id,
                    conf=conf, storage_options={"AZURE_STORAGE_ACCOUNT_KEY":
                                                STORAGE_OPTIONS_SECRET},
                    sink_options={"fs.azure.account.key.sink.dfs.core.windows.net":
                                  "{{ var.value.probe_sink_secret }}"})

    run, seen, found = probe(dag, ui_url=connect_server.ui_url)

    assert {ti.task_id: ti.state for ti in run.get_task_instances()} == {
        "load": "success", "failing": "failed"}
    assert sorted(entry["task_id"] for entry in seen) == ["failing", "load"]
    api = f"{connect_server.ui_url}/api/v1/applications"
    (app,) = json.loads(urllib.request.urlopen(api, timeout=60).read())
    sql = urllib.request.urlopen(f"{api}/{app['id']}/sql?details=true&planDescription=true",
                                 timeout=60).read().decode()
    assert CONF_TEMPLATED_KEY in sql  # the session's confs are listed, their values hidden
    found.update({"the server's SQL answer, after": [
        s for s in [*option_secrets(), *connection_secrets()] if s in sql]})
    assert {where: hits for where, hits in found.items() if hits} == {}
    assert "***" in str(_rendered(run, "load")["sink_options"])


def _rendered(dag_run, task_id: str) -> dict:
    from airflow.models.renderedtifields import RenderedTaskInstanceFields

    (ti,) = [ti for ti in dag_run.get_task_instances() if ti.task_id == task_id]
    return RenderedTaskInstanceFields.get_templated_fields(ti)


@pytest.mark.parametrize("conf_as", ["dict", "one template"])
def test_templates_rendering_to_a_dict_are_masked_before_the_rendered_fields_are_stored(conf_as):
    """What Airflow stores as the rendered fields (the task runner's own serialization),
    right after rendering: the text of a dict is read as that dict before masking."""
    serialize = pytest.importorskip("airflow.sdk.execution_time.task_runner")
    from airflow_provider_delta.operators import DeltaIncrementalOperator

    conf_secret, sink_secret = f"rendered-conf-{conf_as}-2222", f"rendered-sink-{conf_as}-2323"
    conf = ({CONF_TEMPLATED_KEY: "{{ params.conf_secret }}"} if conf_as == "dict"
            else "{{ params.conf }}")
    load = DeltaIncrementalOperator(
        task_id="load", table_uri="/tmp/probe_source", target="/tmp/probe_copy", sink="parquet",
        conf=conf, sink_options="{{ params.sink }}", conn_id="spark_default")
    params = {"conf_secret": conf_secret, "conf": {CONF_TEMPLATED_KEY: conf_secret},
              "sink": {"fs.azure.account.key.sink.dfs.core.windows.net": sink_secret,
                       "compression": "zstd"}}

    load.render_template_fields({"params": params})
    stored = json.dumps(serialize._serialize_rendered_fields(load))

    assert conf_secret not in stored and sink_secret not in stored
    assert "zstd" in stored and stored.count("***") >= 2
    load.check_rendered()  # at task start the texts become the dicts the job is given
    assert load.conf == {CONF_TEMPLATED_KEY: conf_secret}
    assert load.sink_options["fs.azure.account.key.sink.dfs.core.windows.net"] == sink_secret
