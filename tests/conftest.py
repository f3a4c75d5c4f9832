"""Fixtures shared by every test: the reference tables, one SparkSession, one Airflow home."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

# Airflow reads its configuration at import time, so the test home is set before any import.
_AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="airflow-home-"))
os.environ.setdefault("AIRFLOW_HOME", str(_AIRFLOW_HOME))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "True")
os.environ.setdefault("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", f"sqlite:///{_AIRFLOW_HOME}/airflow.db")

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_TABLES = Path(
    os.environ.get("DELTA_SHARED_TABLES", REPO_ROOT.parent / "shared" / "delta-tables")
)


def shared_table_names() -> list[str]:
    """Every table listed in the shared MANIFEST.tsv, e.g. ``delta-golden/snapshot-data1``."""
    lines = (SHARED_TABLES / "MANIFEST.tsv").read_text().splitlines()[1:]
    return [line.split("\t", 1)[0] for line in lines if line.strip()]


def shared_manifest() -> dict[str, dict[str, str]]:
    """MANIFEST.tsv as {table: {column: value}}."""
    header, *rows = (SHARED_TABLES / "MANIFEST.tsv").read_text().splitlines()
    names = header.split("\t")
    return {
        row.split("\t")[0]: dict(zip(names, row.split("\t"))) for row in rows if row.strip()
    }


@pytest.fixture
def shared_table(tmp_path):
    """Copy a shared reference table into a temp folder and return its local path."""

    def copy(name: str) -> str:
        target = tmp_path / "shared" / name
        shutil.copytree(SHARED_TABLES / name, target)
        return str(target)

    return copy


# Commit times of time-travel-start-start20-start40 as the generator wrote them (epoch ms).
TIME_TRAVEL_COMMIT_MS = (1540415658000, 1540415658000 + 20 * 60_000, 1540415658000 + 40 * 60_000)


@pytest.fixture
def time_travel_table(shared_table):
    """A copy of ``time-travel-start-start20-start40`` with its commit files' times restored."""
    path = shared_table("delta-golden/time-travel-start-start20-start40")
    for version, millis in enumerate(TIME_TRAVEL_COMMIT_MS):
        commit = os.path.join(path, "_delta_log", f"{version:020d}.json")
        os.utime(commit, (millis / 1000, millis / 1000))
    return path


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession for the whole run, in UTC."""
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("airflow-provider-delta-tests")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def airflow_db():
    """A fresh SQLite metadata DB in the test AIRFLOW_HOME, created once per run."""
    from airflow.utils import db

    db.initdb()
    return os.environ["AIRFLOW_HOME"]
