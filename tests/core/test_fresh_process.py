"""Planning in a fresh process: what the first plan of a sensor poke, a trigger or the driver
pays for besides reading the log."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap

import pytest

# every planning path: typed partition values of each type, escaped paths, a classic
# checkpoint with deletion vectors, a v2 JSON checkpoint, change feeds with cdc files; and
# ``Plan.files``, the per-file view (Python values of every partition type)
_TABLES = ("delta-golden/data-reader-partition-values", "delta-golden/data-reader-escaped-chars",
           "delta-golden/dv-partitioned-with-checkpoint", "delta-golden/v2-checkpoint-json",
           "delta-rs/cdf-table")
_PLAN_EVERY_WAY = textwrap.dedent("""
    import json, sys
    from airflow_provider_delta.core import (
        plan_change_feed, plan_changes, plan_snapshot, split_batches, split_feed)

    files = 0
    for table in json.loads(sys.argv[1]):
        snapshot = plan_snapshot(table)
        changes = plan_changes(table, 0, ignore_changes=True)
        feed = plan_change_feed(table, 0)
        batches = split_batches(changes, max_files=1, max_bytes=10)
        files += len(snapshot) + len(changes) + len(feed) + sum(map(len, batches))
        files += sum(map(len, split_feed(feed, max_files=1))) + int(feed.total_bytes > 0)
        files += len(snapshot.files) + len(changes.files)  # the per-file view too
    print(json.dumps({"files": files, "pandas": "pandas" in sys.modules}))
""")


@pytest.mark.skipif(importlib.util.find_spec("pandas") is None,
                    reason="pandas is not installed, so nothing could import it")
def test_planning_in_a_fresh_process_does_not_import_pandas(shared_table):
    # pyarrow imports pandas (0.5 s, up to 10 s on a loaded worker) the first time it converts
    # Python or NumPy values; a plan built from Arrow buffers never needs it
    tables = [shared_table(name) for name in _TABLES]
    run = subprocess.run([sys.executable, "-c", _PLAN_EVERY_WAY, json.dumps(tables)],
                         capture_output=True, text=True, check=True)
    result = json.loads(run.stdout.splitlines()[-1])
    assert result["files"] > 100
    assert result["pandas"] is False
