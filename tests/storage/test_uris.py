"""Spellings of a local table's location name the same table."""

from __future__ import annotations

import obstore
import pyarrow as pa
import pytest
from deltalake import write_deltalake

from airflow_provider_delta.core import latest_version, plan_snapshot
from airflow_provider_delta.errors import StorageLocationError
from airflow_provider_delta.storage import list_files, open_store, read_text, write_text
from tests.conftest import URL_CHARACTERS


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


def test_a_folder_named_like_a_url_is_that_folder_to_the_store(tmp_path):
    """A local path reaches obstore as a path: as a file:// URL it was cut at "#"."""
    folder = tmp_path / URL_CHARACTERS
    write_text(f"{folder}/job/spec.json", "{}")
    obstore.put(open_store(f"file://{folder}/job"), "part=%2541 é/x#?.bin", b"x")

    assert read_text(f"file://{folder}/job/spec.json") == "{}"
    assert sorted(m["path"] for m in list_files(str(folder), "job/")) == [
        "job/part=%2541 é/x#?.bin", "job/spec.json"]
    assert (folder / "job" / "part=%2541 é" / "x#?.bin").read_bytes() == b"x"
    assert [p.name for p in tmp_path.iterdir()] == [URL_CHARACTERS]  # nothing where it was cut
