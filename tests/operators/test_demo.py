"""The README's first command: the demo runs its two loads and tells only their story."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_demo_prints_what_each_run_read_and_wrote_and_logs_the_rest(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPOSITORY)}
    env.pop("AIRFLOW_HOME", None)
    demo = subprocess.run([sys.executable, "-m", "dags_examples.demo"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)

    assert demo.returncode == 0, demo.stdout + demo.stderr
    lines = demo.stdout.splitlines()
    assert "batch 0..1: wrote 8 row(s) as target version 0" in demo.stdout
    assert "batch 2..3: wrote 6 row(s) as target version 1" in demo.stdout
    assert "version 1, 14 rows in total" in demo.stdout
    assert '"version": 3}' in lines[-2]
    assert len(lines) < 20 and demo.stderr == ""
    log = (tmp_path / ".demo" / "demo.log").read_text()
    assert "spark-submit" in log or "SparkContext" in log
