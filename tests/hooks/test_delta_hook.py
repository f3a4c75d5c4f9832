"""DeltaHook: connections become object_store options; secrets stay out of logs."""

from __future__ import annotations

import asyncio
import json

import pytest
from airflow.providers.common.compat.sdk import Connection

from airflow_provider_delta.errors import DeltaProviderError
from airflow_provider_delta.hooks.delta import DeltaHook, storage_options_from_connection


def connection(**fields) -> Connection:
    extra = fields.pop("extra", None)
    return Connection(conn_id="lake", conn_type="delta",
                      extra=json.dumps(extra) if extra is not None else None, **fields)


def test_s3_compatible_endpoint():
    options = storage_options_from_connection(connection(
        host="http://127.0.0.1:9000", login="AKIA", password="s3cr3t-s3",
        extra={"region": "eu-west-1"},
    ))
    assert options == {
        "AWS_ACCESS_KEY_ID": "AKIA",
        "AWS_SECRET_ACCESS_KEY": "s3cr3t-s3",
        "AWS_REGION": "eu-west-1",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_ALLOW_HTTP": "true",
    }


def test_host_without_scheme_gets_one_and_the_port():
    options = storage_options_from_connection(connection(
        host="minio.internal", port=9000, extra={"allow_http": True}))
    assert options["AWS_ENDPOINT_URL"] == "http://minio.internal:9000"
    assert options["AWS_ALLOW_HTTP"] == "true"
    secure = storage_options_from_connection(connection(host="s3.example.com"))
    assert secure["AWS_ENDPOINT_URL"] == "https://s3.example.com" and "AWS_ALLOW_HTTP" not in secure


def test_plain_aws_needs_no_endpoint():
    options = storage_options_from_connection(connection(login="AKIA", password="x"))
    assert set(options) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}


def test_azure_and_gcs():
    azure = storage_options_from_connection(connection(
        login="account", password="a2ure-key", extra={"provider": "azure"}))
    assert azure == {"AZURE_STORAGE_ACCOUNT_NAME": "account", "AZURE_STORAGE_ACCOUNT_KEY": "a2ure-key"}
    gcs = storage_options_from_connection(connection(
        password='{"type": "service_account"}', extra={"provider": "gcs"}))
    assert gcs == {"GOOGLE_SERVICE_ACCOUNT_KEY": '{"type": "service_account"}'}


def test_extra_storage_options_pass_through_and_win():
    options = storage_options_from_connection(connection(
        login="AKIA", extra={"region": "us-east-1",
                             "storage_options": {"aws_region": "eu-north-1", "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}}))
    assert options["AWS_REGION"] == "eu-north-1"
    assert options["AWS_S3_ALLOW_UNSAFE_RENAME"] == "true"


def test_unknown_provider_is_refused_with_the_choices():
    with pytest.raises(DeltaProviderError, match="'hdfs' is not supported.*azure, gcs, s3"):
        storage_options_from_connection(connection(extra={"provider": "hdfs"}))


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_hook_masks_secrets_in_logs(monkeypatch, use_async):
    from airflow.providers.common.compat.sdk import redact

    secret, token = f"very-secret-{use_async}-123", f"tok-{use_async}-456789"
    key_id, region = f"AKIA-{use_async}-masked", f"region-{use_async}-visible"
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_MASKED", json.dumps({
        "conn_type": "delta", "login": key_id, "password": secret,
        "extra": {"session_token": token, "region": region},
    }))
    hook = DeltaHook("lake_masked")
    options = asyncio.run(hook.aget_storage_options()) if use_async else hook.get_storage_options()
    assert options["AWS_SECRET_ACCESS_KEY"] == secret and options["AWS_SESSION_TOKEN"] == token
    shown = str(redact(f"key {key_id} secret {secret} token {token} region {region}"))
    assert secret not in shown and token not in shown
    # The key id is hidden as Spark (access.key) and Airflow (access_key) hide it by name.
    assert key_id not in shown
    assert region in shown  # not a credential
