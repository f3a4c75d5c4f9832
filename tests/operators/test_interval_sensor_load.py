"""DeltaIntervalSensor in front of a time-range load: each run waits until its hour is complete
in the source, then loads exactly that hour's versions (Spark Connect, ``dag.test()``)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from airflow.sdk import DAG, DeltaDataIntervalTimetable

from airflow_provider_delta.operators import DeltaIncrementalOperator
from airflow_provider_delta.sensors import DeltaIntervalSensor

from .conftest import delta_rows
from .test_load_by_time import H0, connect_transport, file_time_source  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow


def test_each_hour_waits_for_its_end_then_loads_it(connect_transport, register_dag, xcom_value,
                                                    task_states, tmp_path):
    source = file_time_source(tmp_path / "source")
    target = str(tmp_path / "target")
    with DAG("interval_sensor_load", schedule=DeltaDataIntervalTimetable(timedelta(hours=1)),
             start_date=H0,
             catchup=True) as dag:
        DeltaIntervalSensor(task_id="complete", table_uri=source, poke_interval=0.1, timeout=60,
                            interval_grace=timedelta(hours=1)) >> DeltaIncrementalOperator(
            task_id="load", table_uri=source, target=target, range_from="data_interval",
            **connect_transport)
    register_dag(dag)
    found = {}
    for hour in (0, 2, 5):  # a commit on its end; one after its end; none after it: the grace
        dag_run = dag.test(logical_date=H0 + timedelta(hours=hour + 1))
        assert task_states(dag_run) == {"complete": "success", "load": "success"}
        load = xcom_value(dag_run, "load")
        found[hour] = (xcom_value(dag_run, "complete")["complete_by"],
                       load["start_version"], load["end_version"])
    assert found == {0: ("commit", 0, 1), 2: ("commit", None, None), 5: ("grace", 7, 7)}
    assert sum(delta_rows(target).values()) == 6  # versions 0, 1 and 7: two rows each
