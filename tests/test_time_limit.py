"""A test past its time limit ends the run with a report (tests/time_limit.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def test_a_hung_test_is_reported_and_ends_the_run():
    started = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "tests/time_limit_sample.py"],
        cwd=REPO_ROOT, env={**os.environ, "DELTA_TEST_TIME_LIMIT": "3"},
        capture_output=True, text=True, timeout=100, check=False)
    out = run.stdout
    assert run.returncode == 2, out  # pytest's code for an interrupted run
    assert time.monotonic() - started < 60
    assert "time_limit_sample.py::test_sleeps_past_the_limit still runs after 3 s" in out
    assert "in test_sleeps_past_the_limit" in out  # the hung test's stack
    assert "--- processes (this one is " in out and "descriptors open" in out
    assert "KeyboardInterrupt" in out and " passed" not in out


def test_a_hung_test_in_a_worker_of_pytest_xdist_is_reported_and_ends_the_run():
    """``bash scripts/dev.sh test`` runs the suite in two pytest-xdist workers."""
    started = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2",
         "tests/time_limit_sample.py"],
        cwd=REPO_ROOT, env={**os.environ, "DELTA_TEST_TIME_LIMIT": "3"},
        capture_output=True, text=True, timeout=100, check=False)
    out = run.stdout + run.stderr  # a worker's report comes on its standard error
    assert run.returncode == 2, out
    assert time.monotonic() - started < 60
    assert "time_limit_sample.py::test_sleeps_past_the_limit still runs after 3 s" in out
    assert "in test_sleeps_past_the_limit" in out
    assert "--- processes (this one is " in out and "descriptors open" in out
    assert "node down: keyboard-interrupt" in out
    assert "FAILED tests/time_limit_sample.py::test_sleeps_past_the_limit" in out
