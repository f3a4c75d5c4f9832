"""The test harness itself: a pytest process leaves nothing behind in the temporary folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def test_a_pytest_process_removes_its_airflow_home_at_exit(tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "AIRFLOW_HOME"}
    env["TMPDIR"] = str(tmp_path)  # where the child's conftest makes its Airflow home
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider",
         "tests/test_conftest.py"], cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not list(tmp_path.glob("airflow-home-*"))
