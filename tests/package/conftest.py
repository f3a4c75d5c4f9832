"""The distribution built once per run, and fresh virtualenvs to install it into."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def dist_dir(tmp_path_factory) -> Path:
    """Builds as a user does: the sdist, then the wheel from that sdist, in isolated envs."""
    out = tmp_path_factory.mktemp("dist")
    build = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(REPO)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    return out


@pytest.fixture(scope="session")
def wheel_path(dist_dir) -> Path:
    (path,) = dist_dir.glob("*.whl")
    return path


def uv(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """Runs uv (installed by the test extra) and fails the test with its output."""
    run = subprocess.run([sys.executable, "-m", "uv", *args], capture_output=True, text=True,
                         timeout=timeout)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run


@pytest.fixture
def venv_with(tmp_path, wheel_path) -> Callable[[str], Path]:
    """``venv_with("[spark]")``: the Python of a fresh virtualenv holding the built wheel with
    those extras ("" for none), its dependencies resolved from the package registry."""

    def make(extras: str) -> Path:
        venv = tmp_path / f"venv{extras.strip('[]') or '-plain'}"
        uv("venv", "-q", "-p", sys.executable, str(venv))
        python = venv / "bin" / "python"
        uv("pip", "install", "-q", "-p", str(python), f"airflow-provider-delta{extras} @ {wheel_path.as_uri()}")
        return python

    return make
