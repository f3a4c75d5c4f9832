"""A store that refuses a connection's keys (HTTP 403) fails the sensor, the trigger and the
operator with a StorageAccessError naming that connection: the one to fix."""

from __future__ import annotations

import asyncio
import json

import pytest

from airflow_provider_delta.errors import StorageAccessError
from tests.conftest import S3_SECRET

NAMED = "Airflow connection 'lake_wrong_aws' (type aws; its AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)"


@pytest.fixture
def s3_table(shared_table, upload, request):
    return upload(shared_table("delta-golden/snapshot-data1"), request.node.name)


@pytest.fixture
def wrong_aws_connection(s3_options, moto_checks_credentials, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_WRONG_AWS", json.dumps({
        "conn_type": "aws", "login": "AKIAWRONG", "password": S3_SECRET,
        "extra": {"region_name": "us-east-1", "endpoint_url": s3_options["AWS_ENDPOINT_URL"]},
    }))
    return "lake_wrong_aws"


def test_sensor_and_trigger_name_the_connection(s3_table, wrong_aws_connection):
    from airflow_provider_delta.sensors import DeltaVersionSensor
    from airflow_provider_delta.triggers import DeltaVersionTrigger

    sensor = DeltaVersionSensor(task_id="sense", table_uri=s3_table,
                                delta_conn_id=wrong_aws_connection, watermark_store="variable")
    with pytest.raises(StorageAccessError) as caught:
        sensor.poke({})
    assert NAMED in str(caught.value) and S3_SECRET not in str(caught.value)

    trigger = DeltaVersionTrigger(table_uri=s3_table, start_version=1, fire_once=True,
                                  delta_conn_id=wrong_aws_connection, poll_interval=0.05)
    event = asyncio.run(asyncio.wait_for(anext(trigger.run()), timeout=30)).payload
    assert event["status"] == "error" and NAMED in event["message"]


def test_operator_names_the_connection_before_any_spark_starts(s3_table, wrong_aws_connection,
                                                                tmp_path):
    from airflow_provider_delta.operators import DeltaIncrementalOperator

    load = DeltaIncrementalOperator(
        task_id="load", table_uri=s3_table, delta_conn_id=wrong_aws_connection,
        target=str(tmp_path / "target"), start_version=0, end_version=0)
    with pytest.raises(StorageAccessError) as caught:
        load.execute({"run_id": "manual__refused"})
    assert NAMED in str(caught.value)
    assert not (tmp_path / "target").exists()
