"""The cloud connections DAG authors already have (aws, wasb, adls, google_cloud_platform) read
by their documented fields into object_store options; what object_store cannot honour is
refused, naming the field."""

from __future__ import annotations

import json

import pytest
from airflow.providers.common.compat.sdk import Connection

from airflow_provider_delta.errors import DeltaProviderError
from airflow_provider_delta.hooks.storage_options import storage_options_from_connection
from airflow_provider_delta.storage import open_store


def options_of(conn_type: str, **fields) -> dict[str, str]:
    extra = fields.pop("extra", None)
    return storage_options_from_connection(Connection(
        conn_id="cloud", conn_type=conn_type, extra=json.dumps(extra) if extra else None, **fields))


def test_aws_connection_as_the_amazon_provider_documents_it():
    options = options_of("aws", login="AKIA", password="s3cr3t", extra={
        "region_name": "eu-west-1", "aws_session_token": "tok", "endpoint_url": "http://minio:9000",
        "config_kwargs": {"retries": {"max_attempts": 3}},  # boto client tuning: not a credential
    })
    assert options == {
        "AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "s3cr3t", "AWS_SESSION_TOKEN": "tok",
        "AWS_REGION": "eu-west-1", "AWS_ENDPOINT_URL": "http://minio:9000", "AWS_ALLOW_HTTP": "true",
    }


def test_aws_keys_in_extras_and_the_s3_endpoint_of_service_config():
    options = options_of("aws", extra={
        "aws_access_key_id": "AKIA", "aws_secret_access_key": "s3cr3t",
        "endpoint_url": "https://sts.example.com",
        "service_config": {"s3": {"endpoint_url": "https://s3.example.com"}},
    })
    assert options == {"AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "s3cr3t",
                       "AWS_ENDPOINT_URL": "https://s3.example.com"}


def test_empty_aws_connection_leaves_credentials_to_the_environment():
    assert options_of("aws") == {}


@pytest.mark.parametrize(("conn_type", "extra", "field"), [
    ("aws", {"role_arn": "arn:aws:iam::1:role/r"}, "role_arn"),
    ("aws", {"profile_name": "dev"}, "profile_name"),
    ("google_cloud_platform", {"key_secret_name": "sa-key"}, "key_secret_name"),
    ("google_cloud_platform", {"impersonation_chain": "sa@p.iam.gserviceaccount.com"},
     "impersonation_chain"),
])
def test_credentials_object_store_cannot_use_are_refused_by_name(conn_type, extra, field):
    with pytest.raises(DeltaProviderError, match=f"'cloud' \\(type {conn_type}\\) sets {field}"):
        options_of(conn_type, extra=extra)


def test_wasb_account_name_and_key():
    options = options_of("wasb", login="acct", password="a2ure-key")
    assert options == {"AZURE_STORAGE_ACCOUNT_NAME": "acct", "AZURE_STORAGE_ACCOUNT_KEY": "a2ure-key"}
    shared = options_of("wasb", login="acct", extra={"shared_access_key": "shared-key"})
    assert shared["AZURE_STORAGE_ACCOUNT_KEY"] == "shared-key"


def test_wasb_service_principal_takes_the_account_from_the_account_url():
    options = options_of("wasb", host="https://acct.blob.core.windows.net/", login="client-id",
                         password="client-secret", extra={"tenant_id": "tenant"})
    assert options == {
        "AZURE_STORAGE_ACCOUNT_NAME": "acct", "AZURE_STORAGE_TENANT_ID": "tenant",
        "AZURE_STORAGE_CLIENT_ID": "client-id", "AZURE_STORAGE_CLIENT_SECRET": "client-secret",
    }


def test_wasb_sas_token_plain_or_inside_a_url_and_older_prefixed_extras():
    plain = options_of("wasb", login="acct", extra={"extra__wasb__sas_token": "sv=2024&sig=abc"})
    in_url = options_of("wasb", login="acct",
                        extra={"sas_token": "https://acct.blob.core.windows.net/?sv=2024&sig=abc"})
    assert plain == in_url == {"AZURE_STORAGE_ACCOUNT_NAME": "acct",
                               "AZURE_STORAGE_SAS_KEY": "sv=2024&sig=abc"}


def test_wasb_connection_string():
    options = options_of("wasb", extra={"connection_string": (
        "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a2ure-key;"
        "EndpointSuffix=core.windows.net")})
    assert options == {"AZURE_STORAGE_ACCOUNT_NAME": "acct", "AZURE_STORAGE_ACCOUNT_KEY": "a2ure-key"}


def test_adls_account_in_host_with_a_key_or_a_service_principal():
    assert options_of("adls", host="acct", password="a2ure-key") == {
        "AZURE_STORAGE_ACCOUNT_NAME": "acct", "AZURE_STORAGE_ACCOUNT_KEY": "a2ure-key"}
    principal = options_of("adls", host="acct", login="client-id", password="client-secret",
                           extra={"tenant_id": "tenant"})
    assert principal["AZURE_STORAGE_CLIENT_SECRET"] == "client-secret"
    assert "AZURE_STORAGE_ACCOUNT_KEY" not in principal


def test_azure_options_are_keys_object_store_knows():
    for options in (options_of("wasb", login="acct", password="a2V5", extra={"sas_token": "sv=1"}),
                    options_of("adls", host="acct", login="id", password="secret",
                               extra={"tenant_id": "tenant"})):
        open_store("az://container/table", options)  # an unknown key would be refused here


def test_google_keyfile_path_or_json():
    assert options_of("google_cloud_platform", extra={"key_path": "/keys/sa.json"}) == {
        "GOOGLE_SERVICE_ACCOUNT": "/keys/sa.json"}
    keyfile = {"type": "service_account", "project_id": "p"}
    as_dict = options_of("google_cloud_platform",
                         extra={"extra__google_cloud_platform__keyfile_dict": keyfile})
    as_text = options_of("google_cloud_platform", extra={"keyfile_dict": json.dumps(keyfile)})
    assert json.loads(as_dict["GOOGLE_SERVICE_ACCOUNT_KEY"]) == keyfile
    assert as_text == {"GOOGLE_SERVICE_ACCOUNT_KEY": json.dumps(keyfile)}
    assert options_of("google_cloud_platform", extra={"project": "p"}) == {}  # ADC


def test_a_connection_type_without_storage_credentials_is_refused_with_the_choices():
    with pytest.raises(DeltaProviderError, match="type 'postgres'.*adls, aws, delta, "
                                                 "google_cloud_platform, wasb"):
        options_of("postgres", host="db")
