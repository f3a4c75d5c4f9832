"""SIGKILL the Spark job at each point of a load, in order, re-running after each: before the
first batch, inside a batch's write (after batches committed), after a commit before the result
and the watermark, and a task lost after the watermark. The target always ends equal to the
source's rows, each once, and the killed write's files are in no commit."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest
from airflow.sdk import DAG

from airflow_provider_delta.operators import DeltaIncrementalOperator

from .conftest import (
    SPARK_CONF,
    append_rows,
    delta_rows,
    driver_env,
    forget_watermark,
    four_commit_source,
    jvm_tmp_in,
    recorded,
    watermark,
    with_sink,
)
from .test_faults import Crash
from .test_kill import _committed_paths
from .transforms import KILL_POINT_ENV

pytestmark = pytest.mark.slow


class LostAfterWatermark(DeltaIncrementalOperator):
    """The real operator; the task dies right after the watermark write (no Spark runs then)."""

    def advance_watermark(self, context, version):
        super().advance_watermark(context, version)
        raise Crash("the worker died after the watermark write")


def _dag(conn_id, source, target, jvm_tmp, kill_point=None, operator=DeltaIncrementalOperator,
         sink="delta"):
    env = {**driver_env(), KILL_POINT_ENV: kill_point or "none:-1:-"}
    with DAG("kill_points", schedule=None) as dag:
        operator(
            task_id="load", table_uri=source, target=target,
            **with_sink({"conn_id": conn_id, "conf": jvm_tmp_in(SPARK_CONF, jvm_tmp)}, sink),
            watermark_store="variable", watermark_key="wm_kill_points", initial="earliest",
            max_files=1, transform="operators.transforms:kill_at_point", env_vars=env,
        )
    return dag


def _up_to(expected: Counter, version: int) -> Counter:
    """The rows of versions 0..version (each tagged with its version by the transform)."""
    return Counter({row: n for row, n in expected.items() if row[2] <= version})


def _data_files(target: str) -> set[str]:
    """The Parquet files under the target's folder, named as the log names them."""
    return {str(path.relative_to(target)) for path in Path(target).rglob("*.parquet")
            if "_delta_log" not in path.parts}


def _killed(marker: str) -> None:
    """The JVM the transform SIGKILLed is gone."""
    jvm = int(Path(f"{marker}.killed").read_text())
    assert not os.path.exists(f"/proc/{jvm}")


def test_sigkill_at_every_point_then_rerun_leaves_each_row_once(
        spark_local_conn, delta_sink, run_dag, task_states, tmp_path):
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    expected = four_commit_source(source)  # versions 0..3, one batch each (max_files=1)
    forget_watermark("wm_kill_points")  # a run per sink

    def run(kill_point=None, operator=DeltaIncrementalOperator):
        return task_states(run_dag(_dag(spark_local_conn, source, target, tmp_path / "jvm-tmp",
                                         kill_point, operator, delta_sink)))["load"]

    # Before the first batch: nothing committed, nothing staged left as a Delta table.
    marker = str(tmp_path / "before-first")
    assert run(f"before_write:0:{marker}") == "failed"
    _killed(marker)
    assert not (tmp_path / "target" / "_delta_log").exists()
    assert watermark("wm_kill_points") is None

    # Inside batch 2's write: 0 and 1 committed, the JVM dies while the sink writes 2's rows.
    marker = str(tmp_path / "during")
    assert run(f"during_write:2:{marker}") == "failed"
    _killed(marker)
    assert delta_rows(target) == _up_to(expected, 1)
    assert watermark("wm_kill_points") is None
    left_by_kill = _data_files(target) - _committed_paths(target)

    # After the last commit, before the driver's result and the watermark.
    marker = str(tmp_path / "after-commit")
    assert run(f"after_commit:3:{marker}") == "failed"
    _killed(marker)
    assert delta_rows(target) == expected
    assert watermark("wm_kill_points") is None

    # Everything is committed: the re-run moves the watermark, then the task is lost.
    assert run(operator=LostAfterWatermark) == "failed"
    assert delta_rows(target) == expected
    assert watermark("wm_kill_points") == {source: recorded(source, 3)}

    # The source moves on; the next run loads only the new version.
    append_rows(source, [8, 9])
    assert run() == "success"
    expected.update({(8, "n8", 4): 1, (9, None, 4): 1})
    assert delta_rows(target) == expected
    assert watermark("wm_kill_points") == {source: recorded(source, 4)}
    # The killed write's files (staged, or in Delta's table folder) are in no commit.
    assert not left_by_kill & _committed_paths(target)
