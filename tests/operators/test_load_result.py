"""The operators' XCom return value: the documented, stable shape of ``LoadResult``."""

from __future__ import annotations

import json
from pathlib import Path

from airflow_provider_delta.job.spec import BatchRecord, BatchResult, JobResult, LoadResult

SOURCE = "s3://lake/orders"


def test_a_load_returns_every_key_of_load_result():
    batches = (BatchResult(5, 6, 12, 1000, 50, 41), BatchResult(7, 7, 3, 200, 9, 42))
    result = JobResult(SOURCE, "changes", 5, 7, batches, "http://worker:4040").to_dict()
    assert set(result) == set(LoadResult.__annotations__)
    assert [set(batch) for batch in result["batches"]] == [set(BatchRecord.__annotations__)] * 2
    assert (result["files"], result["bytes"], result["rows"], result["sink_version"]) == (
        15, 1200, 59, 42)
    assert json.loads(json.dumps(result)) == result  # XCom's JSON keeps it as it is


def test_nothing_new_has_the_same_keys():
    result = JobResult(SOURCE, "changes", None, None).to_dict()
    assert set(result) == set(LoadResult.__annotations__)
    assert (result["batches"], result["files"], result["rows"], result["sink_version"]) == (
        [], 0, None, None)


def test_the_docs_name_every_key():
    page = (Path(__file__).resolve().parents[2] / "docs" / "xcom.rst").read_text()
    assert all(f'"{key}":' in page for key in {*LoadResult.__annotations__,
                                               *BatchRecord.__annotations__})
