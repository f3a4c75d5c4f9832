"""SIGKILL the Spark JVM in the middle of a batch's write, then re-run: every row lands once."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest
from airflow.sdk import DAG
from deltalake import DeltaTable

from airflow_provider_delta.job.sinks.targets import STAGING_FOLDER
from airflow_provider_delta.storage import normalised_location
from airflow_provider_delta.job.spec import stable_app_id
from airflow_provider_delta.operators import DeltaIncrementalOperator

from .conftest import (
    SPARK_CONF, delta_rows, driver_env, four_commit_source, jvm_tmp_in, recorded, watermark,
)
from .transforms import KILL_MARKER_ENV

pytestmark = pytest.mark.slow


def _dag(conn_id, source, target, marker, jvm_tmp):
    with DAG("killed_load", schedule=None) as dag:
        DeltaIncrementalOperator(
            task_id="load", table_uri=source, target=target, conn_id=conn_id,
            conf=jvm_tmp_in(SPARK_CONF, jvm_tmp),
            watermark_store="variable", watermark_key="wm_kill", initial="earliest",
            max_files=1, transform="operators.transforms:kill_during_write",
            env_vars={**driver_env(), KILL_MARKER_ENV: marker},
        )
    return dag


def _committed_paths(target: str) -> set[str]:
    """Every data file path any commit of the target's log added."""
    paths = set()
    for commit in sorted((Path(target) / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                paths.add(action["add"]["path"])
    return paths


def _staged_files(target: str, end_version: int) -> dict[str, list[str]]:
    """{staging folder: the files under it} of the attempts at batch ``end_version``."""
    staging = Path(target) / STAGING_FOLDER
    return {
        folder.name: [str(f.relative_to(folder)) for f in folder.rglob("*") if f.is_file()]
        for folder in sorted(staging.glob(f"{end_version:020d}-*"))
    }


def test_sigkill_mid_write_then_rerun_loads_each_row_once(spark_local_conn, run_dag, xcom_value,
                                                          task_states, tmp_path):
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    marker = str(tmp_path / "killed-once")
    jvm_tmp = tmp_path / "jvm-tmp"
    expected = four_commit_source(source)
    app_id = stable_app_id("killed_load", "load", normalised_location(target),
                           normalised_location(source))

    # Batches 0 and 1 commit; the JVM is SIGKILLed while batch 2 is being written.
    run = run_dag(_dag(spark_local_conn, source, target, marker, jvm_tmp))
    assert task_states(run) == {"load": "failed"}
    # The worker really SIGKILLed the JVM (spark-submit exits -9), and the JVM is gone.
    jvm = int(Path(f"{marker}.killed").read_text())
    assert not os.path.exists(f"/proc/{jvm}")
    # Its temporary folders, never deleted, are in the test's folder (not in /tmp).
    assert {p.name.split("-")[0] for p in jvm_tmp.iterdir() if p.is_dir()} == {
        "spark", "blockmgr", "artifacts"}
    table = DeltaTable(target)
    assert table.version() == 1 and table.transaction_version(app_id) == 1
    assert delta_rows(target) == Counter({r: n for r, n in expected.items() if r[2] < 2})
    assert watermark("wm_kill") is None
    (killed_folder, killed_files), = _staged_files(target, 2).items()
    # Its task's Parquet file was open (under Hadoop's _temporary/) when the JVM died.
    assert any(name.endswith(".parquet") for name in killed_files), killed_files

    run = run_dag(_dag(spark_local_conn, source, target, marker, jvm_tmp))
    assert task_states(run) == {"load": "success"}
    assert delta_rows(target) == expected
    assert [b["end_version"] for b in xcom_value(run, "load")["batches"]] == [2, 3]
    assert watermark("wm_kill") == {source: recorded(source, 3)}

    # One commit per batch, in order; the killed attempt's staged files are in none of them.
    table = DeltaTable(target)
    assert table.transaction_version(app_id) == 3
    history = sorted(table.history(), key=lambda commit: commit["version"])
    assert [c["version"] for c in history] == [0, 1, 2, 3]
    assert [c["airflow_provider_delta.source_versions"] for c in history] == [
        "0..0", "1..1", "2..2", "3..3"]
    attempts = _staged_files(target, 2)
    assert len(attempts) == 2 and killed_folder in attempts
    committed = _committed_paths(target)
    assert not any(path.startswith(f"{STAGING_FOLDER}/{killed_folder}/") for path in committed)
    (rerun_folder,) = set(attempts) - {killed_folder}
    assert any(path.startswith(f"{STAGING_FOLDER}/{rerun_folder}/") for path in committed)
