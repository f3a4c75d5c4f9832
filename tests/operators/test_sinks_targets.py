"""Targets the Delta sink must refuse before any Spark starts: the source itself, a file, a
folder of files that are no Delta table."""

from __future__ import annotations

import os
import shutil
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from airflow_provider_delta.errors import InvalidParameterError, SinkTargetError
from airflow_provider_delta.job.sinks import make_sink
from airflow_provider_delta.job.sinks.targets import STAGING_FOLDER
from airflow_provider_delta.operators import DeltaIncrementalOperator

from .conftest import delta_rows
from .test_bad_input import source  # noqa: F401 - the fixture: versions 0 and 1


def _backfill(source, target):
    """Versions 0..1 of ``source`` into ``target``, without a Spark connection to reach."""
    return DeltaIncrementalOperator(task_id="load", table_uri=source, target=target,
                                    start_version=0, end_version=1, conn_id="no_spark_needed")


def _spellings(source: str, tmp_path) -> dict[str, str]:
    link = tmp_path / "link"
    os.symlink(source, link)
    copy = str(tmp_path / "copy")
    shutil.copytree(source, copy)  # another path, the same metaData id
    return {
        "same path": source, "file uri": f"file://{source}", "trailing slash": f"{source}/",
        "dot dot": f"{tmp_path}/elsewhere/../source", "escaped": f"file://{source}".replace(
            "source", "%73ource"), "symbolic link": str(link), "same table id": copy,
    }


@pytest.mark.parametrize("spelling", ["same path", "file uri", "trailing slash", "dot dot",
                                      "escaped", "symbolic link"])
def test_target_that_is_the_source_is_refused_at_dag_parse(source, tmp_path, spelling):
    target = _spellings(source, tmp_path)[spelling]

    with pytest.raises(InvalidParameterError) as error:
        _backfill(source, target)

    assert str(error.value).startswith(f"load: {source}: target={target!r} is the source table")
    assert "give a target path other than the source table's" in str(error.value)


def test_target_with_the_source_table_id_is_refused_before_spark(source, tmp_path):
    """Another path, the same ``metaData`` id: only the log tells, when the task starts."""
    target = _spellings(source, tmp_path)["same table id"]
    before = delta_rows(source)
    started = time.monotonic()

    with pytest.raises(SinkTargetError, match="is the source table") as error:
        _backfill(source, target).execute({"run_id": "manual__self_target"})

    assert time.monotonic() - started < 1
    assert "Give a target path other than the source table's" in str(error.value)
    assert DeltaTable(source).version() == 1 and delta_rows(source) == before


def test_a_percent_escape_in_a_local_target_is_refused_before_spark(source, tmp_path):
    """deltalake would commit into ``out%41`` and then look for the log in ``outA``."""
    target = str(tmp_path / "out#%41")
    with pytest.raises(SinkTargetError) as error:
        _backfill(source, target).execute({"run_id": "manual__escape_target"})
    assert str(error.value) == (
        f"file://{target}: its path holds '%41', which deltalake reads as the escaped character "
        "'A' and so looks for the table's log in another folder; nothing was written. Give a "
        "target folder whose path has no '%' followed by two hex digits.")
    assert sorted(os.listdir(tmp_path)) == ["source"]


def test_folder_of_plain_parquet_files_is_refused_and_left_untouched(source, tmp_path):
    target = tmp_path / "plain"
    (target / "day=1").mkdir(parents=True)
    pq.write_table(pa.table({"id": [1, 2]}), target / "day=1" / "part-0.parquet")

    with pytest.raises(SinkTargetError, match="not a Delta table") as error:
        _backfill(source, str(target)).execute({"run_id": "manual__parquet_target"})

    message = str(error.value)
    assert str(target) in message and "day=1/part-0.parquet" in message
    assert "convert the folder to a Delta table first" in message and "new path" in message
    assert sorted(p.name for p in target.rglob("*")) == ["day=1", "part-0.parquet"]


def test_target_that_is_a_file_is_refused(source, tmp_path):
    target = tmp_path / "notes.txt"
    target.write_text("not a table")

    with pytest.raises(SinkTargetError, match="is a file, not a folder"):
        _backfill(source, str(target)).execute({"run_id": "manual__file_target"})
    assert target.read_text() == "not a table"


def test_new_empty_or_staging_only_folders_are_accepted(source, tmp_path):
    empty, staged = tmp_path / "empty", tmp_path / "staged"
    empty.mkdir()
    # What a first attempt killed before its commit leaves: staged files, no _delta_log.
    (staged / STAGING_FOLDER / "x" / "k=v").mkdir(parents=True)
    (staged / STAGING_FOLDER / "x" / "k=v" / "part-0.parquet").write_bytes(b"partial")
    for target in (tmp_path / "new", empty, staged):
        operator = _backfill(source, str(target))
        make_sink(operator.sink_spec()).check_target(source)
    assert not (tmp_path / "new").exists()
