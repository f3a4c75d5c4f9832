"""A DAG whose task writes a run of watermarks of one table; run as its own process by
test_watermark_stores.py, so that two of them are two real writers at the same time."""

from __future__ import annotations

import sys
import time
from datetime import datetime
from pathlib import Path

from airflow.sdk import DAG, get_current_context, task

from airflow_provider_delta.watermarks import make_watermark_store

WRITES = 20
WATERMARK_KEY = "shared_wm"
TABLE_ID = "t1"


def writer_dag(dag_id: str, table_uri: str, start_line: str, writers: int) -> DAG:
    """Writes versions 0..WRITES-1 once ``writers`` tasks stand at ``start_line`` (a folder)."""
    with DAG(dag_id, schedule=None, start_date=datetime(2024, 1, 1)) as dag:
        @task
        def write_watermarks() -> None:
            context = get_current_context()
            store = make_watermark_store("variable", key=WATERMARK_KEY, table_uri=table_uri)
            _wait_for_all(Path(start_line), dag_id, writers)
            for version in range(WRITES):
                store.write(context, version, table_id=TABLE_ID)

        write_watermarks()
    return dag


def _wait_for_all(start_line: Path, name: str, writers: int) -> None:
    (start_line / name).touch()
    deadline = time.monotonic() + 120
    while len(list(start_line.iterdir())) < writers:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {list(start_line.iterdir())} came to the start line")
        time.sleep(0.02)


if __name__ == "__main__":
    dag_id, table_uri, start_line, writers = sys.argv[1:]
    run = writer_dag(dag_id, table_uri, start_line, int(writers)).test()
    sys.exit(0 if run.state == "success" else 1)
