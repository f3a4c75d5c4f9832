"""The job's files: private while the job runs, one folder per map index and try, gone when the
task ends, and no credential in any of them, nor on the command line, in XCom, rendered fields
or logs."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
from airflow.sdk import DAG
from deltalake import DeltaTable

from airflow_provider_delta.core import LoadStart
from airflow_provider_delta.operators import DeltaIncrementalOperator, DeltaTimeTravelOperator

from .conftest import SPARK_CONF, append_rows, delta_rows, driver_env
from .transforms import CREDENTIAL_CONF, JOB_FILES_LOG_ENV, STARTED_MARKER_ENV

pytestmark = pytest.mark.slow


def _files_under(folder: Path) -> list[Path]:
    return [path for path in folder.rglob("*") if path.is_file()]


def test_mapped_jobs_have_private_folders_of_their_own_removed_at_the_end(
        spark_local_conn, run_dag, private_tmp, tmp_path, monkeypatch):
    log = tmp_path / "job_files.jsonl"
    monkeypatch.setenv(JOB_FILES_LOG_ENV, str(log))
    work_dir = tmp_path / "jobs"
    loads = []
    for name in ("a", "b", "failing"):
        append_rows(str(tmp_path / name), [0, 1])
        transform = "raise_error" if name == "failing" else "record_job_files"
        loads.append({"table_uri": str(tmp_path / name), "target": str(tmp_path / f"{name}_copy"),
                      "watermark_key": f"wm_files_{name}",
                      "transform": f"operators.transforms:{transform}"})
    with DAG("mapped_job_files", schedule=None) as dag:
        DeltaIncrementalOperator.partial(
            task_id="load", conn_id=spark_local_conn, conf=SPARK_CONF, work_dir=str(work_dir),
            watermark_store="variable", env_vars=driver_env(),
        ).expand_kwargs(loads)

    run = run_dag(dag)

    states = {ti.map_index: ti.state for ti in run.get_task_instances()}
    assert states == {0: "success", 1: "success", 2: "failed"}
    for name in ("a", "b"):
        assert delta_rows(str(tmp_path / f"{name}_copy")) == delta_rows(str(tmp_path / name))
    seen = [json.loads(line) for line in log.read_text().splitlines()]
    folders = sorted(Path(entry["spec"]).parent.name for entry in seen)
    run_name = f"mapped_job_files.load.{run.run_id}".replace(":", "_").replace("+", "_")
    assert folders == [f"{run_name}.0.1", f"{run_name}.1.1"]
    assert {(entry["spec_mode"], entry["folder_mode"]) for entry in seen} == {(0o600, 0o700)}
    assert _files_under(work_dir) == [] and list(private_tmp.iterdir()) == []


def test_a_work_dir_on_shared_storage_holds_the_job_files_only_while_the_task_runs(
        spark_local_conn, s3_options, s3_store, run_dag, private_tmp, tmp_path, monkeypatch):
    """As in cluster mode: spec and result in an S3 work_dir, which worker and driver reach
    with the credentials of their own environment."""
    import obstore

    for name, value in s3_options.items():
        monkeypatch.setenv(name, value)
    source, target = str(tmp_path / "source"), str(tmp_path / "copy")
    append_rows(source, [0, 1, 2])
    with DAG("shared_work_dir", schedule=None) as dag:
        DeltaIncrementalOperator(
            task_id="load", table_uri=source, target=target, conn_id=spark_local_conn,
            conf=SPARK_CONF, work_dir="s3://lake/delta-jobs", watermark_store="variable",
            watermark_key="wm_shared_work_dir")

    (load,) = run_dag(dag).get_task_instances()

    assert load.state == "success"
    assert delta_rows(target) == delta_rows(source)
    assert [meta for chunk in obstore.list(s3_store, prefix="delta-jobs/") for meta in chunk] == []
    assert list(private_tmp.iterdir()) == []


def test_on_kill_removes_the_job_files(spark_local_conn, private_tmp, tmp_path, monkeypatch):
    started = tmp_path / "driver_started"
    monkeypatch.setenv(STARTED_MARKER_ENV, str(started))
    source = str(tmp_path / "source")
    append_rows(source, [0, 1])
    load = DeltaIncrementalOperator(
        task_id="load", table_uri=source, target=str(tmp_path / "copy"), start_version=0,
        end_version=0, conn_id=spark_local_conn, conf=SPARK_CONF, env_vars=driver_env(),
        transform="operators.transforms:wait_until_killed")
    failures = []
    running = threading.Thread(target=_recording_failure, args=(
        failures, load.execute, {"run_id": "manual__kill"}))
    running.start()
    deadline = time.monotonic() + 300
    while not started.exists() and running.is_alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert started.exists(), failures

    load.on_kill()  # what the task runner does on SIGTERM

    assert list(private_tmp.iterdir()) == []
    running.join(timeout=120)
    assert not running.is_alive() and len(failures) == 1


def _recording_failure(failures: list, call, *args) -> None:
    try:
        call(*args)
    except Exception as error:  # noqa: BLE001 - the test inspects it
        failures.append(error)


SECRET = "moto-secret-key-98765"  # the shared S3 fixture's secret key
SINK_SECRET = "sink-option-secret-13579"


@pytest.mark.parametrize("given_as", ["storage_options", "aws_connection"])
def test_credentials_reach_the_driver_only_through_its_environment(
        spark_local_conn, recorded_command_lines, s3_options, run_dag, private_tmp, tmp_path,
        capfd, caplog, request, monkeypatch, given_as):
    """The source is on S3 (moto): the driver can plan it only with the credentials, given
    directly or as the Amazon provider's ``aws`` connection."""
    source = _empty_s3_table(s3_options, request.node.originalname + given_as)
    target = str(tmp_path / "copy")
    credentials = {"storage_options": s3_options}
    if given_as == "aws_connection":
        monkeypatch.setenv("AIRFLOW_CONN_LAKE_AWS", json.dumps({
            "conn_type": "aws", "login": "testing", "password": SECRET, "extra": {
                "region_name": "us-east-1",
                "service_config": {"s3": {"endpoint_url": s3_options["AWS_ENDPOINT_URL"]}}}}))
        credentials = {"delta_conn_id": "lake_aws"}
    with DAG("s3_credentials", schedule=None) as dag:
        DeltaIncrementalOperator(
            task_id="load", table_uri=source, target=target, conn_id=spark_local_conn,
            conf=SPARK_CONF, watermark_store="variable", watermark_key=f"wm_{given_as}",
            **credentials)

    run = run_dag(dag)

    (load,) = run.get_task_instances()
    assert load.state == "success"
    assert DeltaTable(target).schema().to_arrow() == pa.schema([("id", pa.int64())])
    assert SECRET not in "".join(capfd.readouterr()) + caplog.text
    assert SECRET not in recorded_command_lines.read_text()
    assert list(private_tmp.iterdir()) == []
    assert not [path for path in _files_under(tmp_path) if SECRET.encode() in path.read_bytes()]
    assert SECRET not in str(_xcoms(run)) + str(_rendered(load))


def test_credentials_in_conf_and_sink_options_stay_out_of_command_line_files_logs_and_ui(
        spark_local_conn, recorded_command_lines, run_dag, private_tmp, tmp_path, capfd, caplog,
        monkeypatch):
    """A storage key in ``conf`` (whose name Spark's and Airflow's redaction do not know) and
    one in ``sink_options`` (a Hadoop option of the writer) reach the driver, and nowhere else."""
    log = tmp_path / "job_files.jsonl"
    monkeypatch.setenv(JOB_FILES_LOG_ENV, str(log))
    source, target = str(tmp_path / "source"), str(tmp_path / "copy")
    append_rows(source, [0, 1])
    with DAG("credentials_in_options", schedule=None) as dag:
        DeltaIncrementalOperator(
            task_id="load", table_uri=source, target=target, sink="parquet",
            sink_options={"fs.azure.account.key.lake.dfs.core.windows.net": SINK_SECRET},
            conn_id=spark_local_conn, conf={**SPARK_CONF, CREDENTIAL_CONF: SECRET},
            env_vars=driver_env(), transform="operators.transforms:record_job_files",
            watermark_store="variable", watermark_key="wm_credentials_in_options")

    run = run_dag(dag)

    (load,) = run.get_task_instances()
    assert load.state == "success"
    (seen,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert seen["credential_conf_length"] == len(SECRET)  # the driver's Spark has the key
    logs = "".join(capfd.readouterr()) + caplog.text
    for secret in (SECRET, SINK_SECRET):
        assert secret not in seen["spec_text"]
        assert secret not in logs
        assert secret not in recorded_command_lines.read_text()
        assert secret not in str(_xcoms(run)) + str(_rendered(load))
    log.unlink()
    assert not [path for path in _files_under(tmp_path) if SECRET.encode() in path.read_bytes()]


def test_credentials_stay_off_a_yarn_command_line(recorded_command_lines, s3_options,
                                                  monkeypatch, private_tmp, tmp_path, request):
    """The Spark provider puts env_vars on the command line for YARN: none are sent there."""
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_YARN", '{"conn_type": "spark", "host": "yarn"}')
    load = DeltaTimeTravelOperator(
        task_id="load", table_uri=_empty_s3_table(s3_options, request.node.name), version=0,
        storage_options=s3_options, target=str(tmp_path / "copy"), conn_id="spark_yarn")

    with pytest.raises(Exception, match="Cannot execute"):  # no YARN here
        load.execute({"run_id": "manual__yarn"})

    (command,) = recorded_command_lines.read_text().splitlines()
    assert "--master yarn" in command and SECRET not in command
    # The cluster's own credentials (spark-defaults) are hidden in its driver's UI too.
    assert "--conf spark.redaction.regex=(?i)secret|password|token|access[.]?key|credential|" \
        in command
    assert list(private_tmp.iterdir()) == []


def _empty_s3_table(s3_options: dict[str, str], name: str) -> str:
    """A table with a schema and no rows in the moto bucket (Spark here cannot read s3a://)."""
    assert s3_options["AWS_SECRET_ACCESS_KEY"] == SECRET
    uri = f"s3://lake/{name}"
    DeltaTable.create(uri, pa.schema([("id", pa.int64())]), storage_options=s3_options)
    return uri


def _xcoms(dag_run) -> list:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.scalars(XComModel.get_many(run_id=dag_run.run_id,
                                                  dag_ids=dag_run.dag_id)).all()
        return [XComModel.deserialize_value(row) for row in rows]


def _rendered(task_instance) -> dict:
    from airflow.models.renderedtifields import RenderedTaskInstanceFields

    return RenderedTaskInstanceFields.get_templated_fields(task_instance)


def test_the_driver_gets_back_every_credential_kept_out_of_the_spec(tmp_path):
    from airflow_provider_delta.job.credentials import (
        credentials_env, spark_conf_from, with_credentials_from, without_credentials)

    load = DeltaIncrementalOperator(
        task_id="load", table_uri=str(tmp_path / "source"), target=str(tmp_path / "copy"),
        sink="parquet", sink_options={"compression": "zstd", "fs.s3a.secret.key": SINK_SECRET},
        storage_options={"AWS_SECRET_ACCESS_KEY": SECRET}, conn_id="no_spark_needed")
    spec = load.job_spec({"run_id": "r"}, LoadStart("changes", 0), 1)
    conf = {"spark.executor.memory": "1g", CREDENTIAL_CONF: SECRET}

    written = without_credentials(spec).to_json()
    environ = credentials_env(spec, conf)

    assert SECRET not in written and SINK_SECRET not in written and "zstd" in written
    assert with_credentials_from(environ, type(spec).from_json(written)) == spec
    assert spark_conf_from(environ) == {CREDENTIAL_CONF: SECRET}


@pytest.mark.parametrize(("key", "holds_a_credential"), [
    (CREDENTIAL_CONF, True),
    ("spark.hadoop.fs.s3a.secret.key", True),
    ("spark.hadoop.fs.s3a.access.key", True),
    ("spark.hadoop.fs.s3a.session.token", True),
    ("spark.ssl.keyPassword", True),
    ("spark.hadoop.google.cloud.auth.service.account.json.keyfile", True),
    ("AZURE_STORAGE_SAS_KEY", True),
    ("spark.hadoop.fs.s3a.aws.credentials.provider", False),  # a class name
    ("spark.hadoop.fs.azure.sas.token.provider.type", False),
    ("spark.ssl.keyStore", False),
    ("spark.driver.extraJavaOptions", False),
    ("spark.sql.shuffle.partitions", False),
    ("mergeSchema", False),
])
def test_credential_keys_are_told_from_settings(key, holds_a_credential):
    from airflow_provider_delta.credential_keys import is_credential_key

    assert is_credential_key(key) is holds_a_credential
