"""Tests for test_time_limit.py to run in a pytest of their own (no test_ prefix: not
collected with the suite)."""

import time


def test_sleeps_past_the_limit():
    time.sleep(120)


def test_would_run_next():
    pass
