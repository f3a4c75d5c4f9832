"""Store failures classified at the storage layer: what retrying cannot fix fails at once,
naming the table and what to check; network failures stay transient."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest

from airflow_provider_delta.core import latest_version, plan_snapshot
from airflow_provider_delta.errors import (
    StorageAccessError, StorageLocationError, TableNotFoundError, TransientStorageError,
)
from tests.conftest import S3_SECRET


@pytest.fixture
def s3_table(shared_table, upload, request):
    return upload(shared_table("delta-golden/snapshot-data1"), request.node.name)


def assert_permanent(error, table_uri: str, *words: str) -> None:
    message = str(error)
    assert error.permanent and table_uri in message and "retried" not in message
    for word in words:
        assert word in message
    assert S3_SECRET not in message


def test_unknown_scheme_is_permanent():
    uri = "s4://lake/orders"
    with pytest.raises(StorageLocationError) as caught:
        latest_version(uri, since=3)
    assert_permanent(caught.value, uri, "s4", "scheme")


def test_unknown_storage_option_is_permanent(s3_options, s3_table):
    with pytest.raises(StorageLocationError) as caught:
        latest_version(s3_table, storage_options={**s3_options, "aws_bucket_typo": "x"})
    assert_permanent(caught.value, s3_table, "aws_bucket_typo", "storage options")


def test_missing_bucket_is_permanent(s3_options):
    uri = "s3://lake-typo/orders"
    with pytest.raises(TableNotFoundError) as caught:
        latest_version(uri, storage_options=s3_options)
    assert_permanent(caught.value, uri, "NoSuchBucket", "credentials")


def test_refused_credentials_are_permanent(s3_options, s3_table, moto_checks_credentials):
    wrong = {**s3_options, "AWS_ACCESS_KEY_ID": "AKIAWRONG"}
    for call in (lambda: latest_version(s3_table, storage_options=wrong),
                 lambda: latest_version(s3_table, since=0, storage_options=wrong),
                 lambda: plan_snapshot(s3_table, storage_options=wrong)):
        with pytest.raises(StorageAccessError) as caught:
            call()
        assert_permanent(caught.value, s3_table, "403", "InvalidAccessKeyId",
                         "AWS_ACCESS_KEY_ID", "delta_conn_id")


def test_unreachable_endpoint_is_transient(s3_table, s3_options):
    with socket.socket() as closed:  # a port nothing listens on: connections are refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    options = {**s3_options, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}
    with pytest.raises(TransientStorageError) as caught:
        latest_version(s3_table, since=0, storage_options=options)
    assert not caught.value.permanent and s3_table in str(caught.value)


def test_sensor_and_trigger_fail_at_once_on_refused_credentials(
        s3_options, s3_table, moto_checks_credentials, monkeypatch):
    from airflow_provider_delta.sensors import DeltaVersionSensor
    from airflow_provider_delta.triggers import DeltaVersionTrigger

    monkeypatch.setenv("AIRFLOW_CONN_LAKE_WRONG", json.dumps({
        "conn_type": "delta", "host": s3_options["AWS_ENDPOINT_URL"], "login": "AKIAWRONG",
        "password": S3_SECRET, "extra": {"region": "us-east-1"},
    }))
    sensor = DeltaVersionSensor(task_id="sense", table_uri=s3_table, delta_conn_id="lake_wrong",
                                watermark_store="variable", initial="earliest")
    with pytest.raises(StorageAccessError):  # a transient error would make poke() return False
        sensor.poke({})
    trigger = DeltaVersionTrigger(table_uri=s3_table, start_version=1, delta_conn_id="lake_wrong",
                                  fire_once=True, poll_interval=0.05)
    event = asyncio.run(asyncio.wait_for(anext(trigger.run()), timeout=30)).payload
    assert event["status"] == "error" and "refused access" in event["message"]


def test_trigger_refuses_an_unknown_scheme_when_built():
    from airflow_provider_delta.errors import InvalidParameterError
    from airflow_provider_delta.triggers import DeltaVersionTrigger

    with pytest.raises(InvalidParameterError, match="^table_uri='s4://lake/orders' has the "
                                                    "scheme s4:, which no store"):
        DeltaVersionTrigger(table_uri="s4://lake/orders", start_version=1, fire_once=True)


def test_trigger_ends_at_once_on_a_store_it_cannot_open():
    from airflow_provider_delta.triggers import DeltaVersionTrigger

    trigger = DeltaVersionTrigger(table_uri="az://lake/orders", start_version=1, fire_once=True,
                                  poll_interval=0.05)  # no account: obstore refuses the store
    event = asyncio.run(asyncio.wait_for(anext(trigger.run()), timeout=30)).payload
    assert event["status"] == "error" and "retried" not in event["message"]
