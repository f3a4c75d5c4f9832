"""Backfill of an explicit range from DAG params, time travel by version and by timestamp."""

from __future__ import annotations

import os
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from airflow.sdk import DAG, Param

from airflow_provider_delta.operators import DeltaIncrementalOperator, DeltaTimeTravelOperator

from .conftest import append_rows, delta_rows, watermark

pytestmark = pytest.mark.slow

COMMIT_0 = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)


def _source(path: Path) -> str:
    """Versions 0..2 committed one minute apart (the commit files' mtimes)."""
    for ids in ([0, 1, 2], [3, 4], [5, 6]):
        append_rows(str(path), ids)
    for version in range(3):
        moment = (COMMIT_0 + timedelta(minutes=version)).timestamp()
        os.utime(path / "_delta_log" / f"{version:020d}.json", (moment, moment))
    return str(path)


def test_backfill_and_time_travel(spark_transport, run_dag, xcom_value, task_states, tmp_path):
    source = _source(tmp_path / "source")
    targets = {name: str(tmp_path / name) for name in ("backfill", "by_version", "by_time")}
    with DAG("backfill_and_time_travel", schedule=None,
             params={"start": Param(1, type="integer"), "end": Param(2, type="integer")}) as dag:
        common = {"table_uri": source, **spark_transport}
        DeltaIncrementalOperator(
            task_id="backfill", target=targets["backfill"], start_version="{{ params.start }}",
            end_version="{{ params.end }}", watermark_store="variable", watermark_key="wm_bf",
            **common,
        )
        DeltaTimeTravelOperator(task_id="by_version", target=targets["by_version"], version=0,
                                **common)
        DeltaTimeTravelOperator(
            task_id="by_time", target=targets["by_time"], sink="parquet",
            timestamp=(COMMIT_0 + timedelta(seconds=90)).isoformat(), **common,
        )

    run = run_dag(dag)

    assert task_states(run) == {"backfill": "success", "by_version": "success", "by_time": "success"}
    assert delta_rows(targets["backfill"]) == delta_rows(source, 2) - delta_rows(source, 0)
    assert watermark("wm_bf") is None  # a backfill leaves the watermark alone
    backfill = xcom_value(run, "backfill")
    assert (backfill["start_version"], backfill["end_version"], backfill["rows"]) == (1, 2, 4)

    assert delta_rows(targets["by_version"]) == delta_rows(source, 0)
    assert xcom_value(run, "by_version")["end_version"] == 0

    # 90 s after version 0's commit: version 1 is the latest commit at or before it.
    by_time = xcom_value(run, "by_time")
    assert (by_time["mode"], by_time["end_version"], by_time["rows"]) == ("snapshot", 1, 5)
    written = ds.dataset(f"{targets['by_time']}/source_versions=1-1", format="parquet").to_table()
    assert Counter(zip(*written.to_pydict().values())) == delta_rows(source, 1)
