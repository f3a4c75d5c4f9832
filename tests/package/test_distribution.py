"""The sdist and wheel that `python -m build` makes carry the license, the typing marker and
the entry point Airflow discovers providers by."""

from __future__ import annotations

import configparser
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

import airflow_provider_delta

REPO = Path(__file__).resolve().parents[2]
DIST_INFO = f"airflow_provider_delta-{airflow_provider_delta.__version__}.dist-info"


@pytest.fixture(scope="module")
def wheel(wheel_path) -> zipfile.ZipFile:
    with zipfile.ZipFile(wheel_path) as archive:
        yield archive


def _metadata(wheel: zipfile.ZipFile):
    return Parser().parsestr(wheel.read(f"{DIST_INFO}/METADATA").decode())


def test_wheel_ships_license_notice_and_typing_marker(wheel):
    names = set(wheel.namelist())
    assert "airflow_provider_delta/py.typed" in names
    for license_file in ("LICENSE", "NOTICE"):
        shipped = wheel.read(f"{DIST_INFO}/licenses/{license_file}")
        assert shipped == (REPO / license_file).read_bytes()
    assert b"Apache License\n                           Version 2.0" in (REPO / "LICENSE").read_bytes()
    assert {name.split("/")[0] for name in names} == {"airflow_provider_delta", DIST_INFO}


def test_wheel_registers_the_airflow_provider_entry_point(wheel):
    entry_points = configparser.ConfigParser()
    entry_points.read_string(wheel.read(f"{DIST_INFO}/entry_points.txt").decode())
    assert dict(entry_points["apache_airflow_provider"]) == {
        "provider_info": "airflow_provider_delta.get_provider_info:get_provider_info"
    }
    # The "Delta tables" page: its plugin, found by default, and the script the UI loads.
    assert dict(entry_points["airflow.plugins"]) == {
        "delta_tables": "airflow_provider_delta.plugins.delta_tables_plugin:DeltaTablesPlugin"
    }
    assert "airflow_provider_delta/plugins/www/delta_tables.js" in wheel.namelist()


def test_wheel_metadata_declares_spdx_license_and_airflow_classifiers(wheel):
    metadata = _metadata(wheel)
    assert metadata["Version"] == airflow_provider_delta.__version__
    assert metadata["License-Expression"] == "Apache-2.0"
    assert sorted(metadata.get_all("License-File")) == ["LICENSE", "NOTICE"]
    classifiers = metadata.get_all("Classifier")
    assert {"Framework :: Apache Airflow", "Framework :: Apache Airflow :: Provider"} <= set(classifiers)
    assert not [c for c in classifiers if c.startswith("License ::")], "the SPDX expression alone says it"


def test_sdist_ships_license_notice_and_typing_marker(dist_dir):
    (path,) = dist_dir.glob("*.tar.gz")
    with tarfile.open(path) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"LICENSE", "NOTICE", "airflow_provider_delta/py.typed", "pyproject.toml"} <= names


def test_wheel_declares_only_the_python_versions_the_suite_runs_on(wheel):
    """Requires-Python starts at the oldest Python listed as a classifier, and the suite runs
    on exactly the listed versions (CI runs it on this interpreter only)."""
    metadata = _metadata(wheel)
    listed = sorted(tuple(int(part) for part in c.rsplit(" :: ", 1)[1].split("."))
                    for c in metadata.get_all("Classifier")
                    if c.startswith("Programming Language :: Python :: 3.") and c.count(".") == 1)
    assert listed == [sys.version_info[:2]]
    assert metadata["Requires-Python"] == f">={listed[0][0]}.{listed[0][1]}"
