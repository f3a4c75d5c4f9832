"""``python run_example.py '<run conf as JSON>' '<logical date, ISO, or empty>' <DAG file>``:
run the file's one DAG once with ``dag.test()``; print the run's task states as JSON on the last
line."""

from __future__ import annotations

import json
import runpy
import sys
from datetime import datetime

from airflow.providers.common.compat.sdk import DAG

from airflow_provider_delta.compat import airflow_at_least

run_conf, logical_date, dag_file = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
(dag,) = [value for value in runpy.run_path(dag_file).values() if isinstance(value, DAG)]
when = {}
if logical_date:
    date_name = "logical_date" if airflow_at_least("3.0.0") else "execution_date"
    when[date_name] = datetime.fromisoformat(logical_date)
run = dag.test(run_conf=run_conf or None, **when)
print(json.dumps({ti.task_id: str(ti.state) for ti in run.get_task_instances()}))
