"""Spellings of a local table's location name the same table."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from airflow_provider_delta.core import latest_version, plan_snapshot
from airflow_provider_delta.errors import StorageLocationError


@pytest.fixture
def local_table(tmp_path):
    path = tmp_path / "t"
    for start in (0, 3):
        write_deltalake(str(path), pa.table({"id": [start, start + 1, start + 2]}), mode="append")
    return path


@pytest.mark.parametrize("spelling", ["{p}", "file://{p}", "file:{p}", "file://localhost{p}",
                                      "{p}/"])
def test_every_local_spelling_reads_the_table(local_table, spelling, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # a spelling read as relative would miss the table
    uri = spelling.format(p=local_table)
    assert latest_version(uri) == 1
    assert len(plan_snapshot(uri).files) == 2


def test_a_file_uri_of_another_host_is_refused_naming_the_uri():
    with pytest.raises(StorageLocationError, match="file://fileserver/share/t.*local host"):
        latest_version("file://fileserver/share/t")
