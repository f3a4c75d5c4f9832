"""The Test button of the connection form: DeltaHook.test_connection lists the location with the
connection's options and says what it found, or why the store refused; it never raises."""

from __future__ import annotations

import json
import os
import socket
import uuid

import pytest
from airflow.models.connection import Connection

from airflow_provider_delta.hooks import DeltaHook
from tests.conftest import S3_SECRET


def press_test_button(conn_type: str, **fields) -> tuple[bool, str]:
    """What Airflow's API does for the Test button: the form's connection under a transient id
    in the environment, then ``Connection.test_connection()`` (which finds our hook)."""
    extra = fields.pop("extra", None)
    conn = Connection(conn_id=f"tested_{uuid.uuid4().hex[:8]}", conn_type=conn_type,
                      extra=json.dumps(extra) if extra is not None else None, **fields)
    variable = f"AIRFLOW_CONN_{conn.conn_id.upper()}"
    os.environ[variable] = conn.get_uri()
    try:
        return conn.test_connection()
    finally:
        os.environ.pop(variable, None)


@pytest.fixture
def s3_table(shared_table, upload, request):
    return upload(shared_table("delta-golden/snapshot-data1"), request.node.name)


def delta_s3_fields(s3_options, location: str, key_id: str = "testing") -> dict:
    return {"host": s3_options["AWS_ENDPOINT_URL"], "login": key_id, "password": S3_SECRET,
            "extra": {"region": "us-east-1", "location": location}}


def test_a_local_table_and_a_missing_folder(shared_table, tmp_path):
    table = shared_table("delta-golden/snapshot-data1")
    ok, message = press_test_button("delta", extra={"location": table})
    assert ok and "a Delta table" in message and table in message
    ok, message = press_test_button("delta", extra={"location": str(tmp_path)})
    assert ok and "no Delta table there" in message
    missing = str(tmp_path / "missing")
    ok, message = press_test_button("delta", extra={"location": missing})
    assert not ok and "no such folder" in message and missing in message
    assert not os.path.exists(missing)  # testing creates nothing


def test_s3_table_reached_with_a_delta_connection(s3_options, s3_table):
    ok, message = press_test_button("delta", **delta_s3_fields(s3_options, s3_table))
    assert ok and "a Delta table" in message and "type delta" in message
    bucket_only = s3_table.rsplit("/", 1)[0]
    ok, message = press_test_button("delta", **delta_s3_fields(s3_options, bucket_only))
    assert ok and "no Delta table there" in message


def test_refused_keys_fail_naming_the_connection(s3_options, s3_table, moto_checks_credentials):
    ok, message = press_test_button("delta", **delta_s3_fields(s3_options, s3_table, "AKIAWRONG"))
    assert not ok and "refused access" in message and "403" in message
    assert "Airflow connection 'tested_" in message and S3_SECRET not in message


def test_missing_bucket_fails(s3_options):
    ok, message = press_test_button("delta", **delta_s3_fields(s3_options, "s3://no-such-bucket/t"))
    assert not ok and "NoSuchBucket" in message


def test_an_endpoint_nobody_listens_on_fails_without_waiting_for_retries(s3_options, s3_table):
    with socket.socket() as closed:  # a port nothing listens on: connections are refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    fields = delta_s3_fields({"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}, s3_table)
    ok, message = press_test_button("delta", **fields)
    assert not ok and "did not answer" in message and "endpoint of connection" in message


def test_nothing_to_list_and_a_broken_connection_are_reasons_not_exceptions(monkeypatch):
    ok, message = press_test_button("delta")
    assert not ok and 'set extra "location"' in message
    monkeypatch.setenv("AIRFLOW_CONN_ROLE_ONLY", json.dumps(
        {"conn_type": "aws", "extra": {"role_arn": "arn:aws:iam::1:role/r"}}))
    ok, message = DeltaHook("role_only").test_connection("s3://lake/t")
    assert not ok and "role_arn" in message
    ok, message = DeltaHook("not_defined_anywhere").test_connection("s3://lake/t")
    assert not ok and "not_defined_anywhere" in message


def test_an_aws_connection_tested_through_the_hook(s3_options, s3_table, monkeypatch):
    """An ``aws`` connection's own Test button is the Amazon provider's; ours takes a location."""
    monkeypatch.setenv("AIRFLOW_CONN_AWS_LAKE", json.dumps({
        "conn_type": "aws", "login": "testing", "password": S3_SECRET,
        "extra": {"region_name": "us-east-1", "endpoint_url": s3_options["AWS_ENDPOINT_URL"]}}))
    ok, message = DeltaHook("aws_lake").test_connection(s3_table)
    assert ok and "a Delta table" in message and "type aws" in message
