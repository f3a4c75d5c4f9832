"""sink="delta-spark" end to end: Delta's own writer through spark-submit and Spark Connect,
exactly once through its idempotent writes (txnAppId/txnVersion), beside sink="delta"."""

from __future__ import annotations

from collections import Counter

import pytest
from airflow.sdk import DAG
from deltalake import DeltaTable

from airflow_provider_delta.errors import SinkRangeOverlapError
from airflow_provider_delta.job.driver import run_job
from airflow_provider_delta.job.sinks import DeltaSparkSink, make_sink
from airflow_provider_delta.job.sinks.target_log import SOURCE_VERSIONS_KEY
from airflow_provider_delta.operators import DeltaIncrementalOperator
from airflow_provider_delta.sensors import DeltaVersionSensor
from tests.delta_spark.conftest import DELTA_VERSION, needs_delta_jars
from tests.operators.conftest import (  # noqa: F401 - the transports' fixtures
    append_rows, connect_server, delta_rows, forget_watermark, recorded, spark_local_conn,
    spark_transport, watermark, with_sink,
)
from tests.operators.test_differential import spec_of

pytestmark = [needs_delta_jars, pytest.mark.slow]


def _dag(transport, source, target):
    with DAG("delta_spark_load", schedule=None) as dag:
        wait = DeltaVersionSensor(task_id="wait", table_uri=source, watermark_store="variable",
                                  watermark_key="wm_delta_spark", poke_interval=1, timeout=60)
        load = DeltaIncrementalOperator(
            task_id="load", table_uri=source, target=target, sensor_task_id="wait",
            watermark_store="variable", watermark_key="wm_delta_spark", max_files=1,
            **with_sink(transport, "delta-spark"))
        wait >> load
    return dag


def _written_by_delta(target: str) -> list[str]:
    """The engine of each commit of the target, newest first."""
    return [info.get("engineInfo", "") for info in DeltaTable(target).history()]


def test_sensor_then_loads_with_deltas_writer(spark_transport, run_dag, xcom_value, task_states,
                                              tmp_path):
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    append_rows(source, [0, 1, 2])
    append_rows(source, [3, 4])
    forget_watermark("wm_delta_spark")
    dag = _dag(spark_transport, source, target)

    first = run_dag(dag)
    assert task_states(first) == {"wait": "success", "load": "success"}
    assert delta_rows(target) == delta_rows(source)
    append_rows(source, [5, 6])
    append_rows(source, [7])
    second = run_dag(dag)
    assert task_states(second) == {"wait": "success", "load": "success"}
    result = xcom_value(second, "load")
    assert [(b["start_version"], b["end_version"], b["rows"], b["sink_version"])
            for b in result["batches"]] == [(2, 2, 2, 1), (3, 3, 1, 2)]
    assert delta_rows(target) == delta_rows(source)
    assert watermark("wm_delta_spark") == {source: recorded(source, 3)}
    engines = _written_by_delta(target)
    assert len(engines) == 3 and all(f"Delta-Lake/{DELTA_VERSION}" in e for e in engines)
    assert DeltaTable(target).transaction_version(_app_id(dag)) == 3


def _app_id(dag) -> str:
    return dag.get_task("load").sink_spec().app_id


def test_a_rerun_writes_nothing_and_overlaps_are_refused_as_with_the_delta_sink(
        delta_spark, tmp_path):
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    for ids in ([0, 1], [2], [3, 4]):
        append_rows(source, ids)
    spec = _delta_spark(spec_of(source, target, 0, 2))
    assert isinstance(make_sink(spec.sink), DeltaSparkSink)

    assert len(run_job(delta_spark, spec).batches) == 1
    assert run_job(delta_spark, spec).batches == ()
    assert delta_rows(target) == delta_rows(source)
    history = DeltaTable(target).history()
    assert all(SOURCE_VERSIONS_KEY in info.get("userMetadata", "") for info in history)

    # A request inside the committed batch 0..2 is refused, not written twice.
    with pytest.raises(SinkRangeOverlapError):
        run_job(delta_spark, _delta_spark(spec_of(source, target, 1, 2)))

    # Delta's own idempotent write: the same txn again is skipped by Delta itself.
    sink = make_sink(spec.sink)
    df = delta_spark.createDataFrame([(9, "x")], "id long, name string")
    (df.write.format("delta").mode("append").option("txnAppId", spec.sink.app_id)
     .option("txnVersion", 2).save(target))
    assert delta_rows(target) == delta_rows(source)
    assert sink.committed_version() == 2


def _delta_spark(spec):
    from dataclasses import replace

    return replace(spec, sink=replace(spec.sink, use_delta_spark=True))


def test_rows_delta_refuses_name_the_option(delta_spark, tmp_path):
    from airflow_provider_delta.errors import SinkSchemaMismatchError

    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    append_rows(source, [0, 1])
    run_job(delta_spark, _delta_spark(spec_of(source, target, 0, 0)))
    delta_spark.createDataFrame([(7, "x", 1.5)], "id long, name string, extra double") \
        .write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(
            str(tmp_path / "other"))
    other = str(tmp_path / "other")
    spec = _delta_spark(spec_of(other, target, 0, 0))
    spec = type(spec)(**{**spec.__dict__, "sink": type(spec.sink)(
        **{**spec.sink.__dict__, "options": {}})})
    with pytest.raises(SinkSchemaMismatchError, match="mergeSchema"):
        run_job(delta_spark, spec)
    assert delta_rows(target) == Counter(delta_rows(source))
