"""One credential rule: the keys it calls credentials are named in storage errors, kept off
spark-submit's command line, registered with Airflow's masker by value and hidden by the Spark
UI's redaction pattern, alike. The keys below are those the three older rules disagreed on."""

from __future__ import annotations

import json
import re

import pytest

from airflow_provider_delta.credential_keys import (
    is_credential_key,
    redaction_regex,
    secret_forms,
    sql_options_redaction_regex,
    with_redaction,
    with_sql_options_redaction,
)
from airflow_provider_delta.storage import ConnectionStorageOptions, _credentials

SPARK_DEFAULT = r"(?i)secret|password|token|access[.]?key|credential"

# (key, holds a credential): the first ones each escaped one of the older rules.
KEYS = [
    ("AZURE_STORAGE_ACCESS_KEY", True),  # the hook's list did not have it: never masked
    ("AZURE_STORAGE_ACCOUNT_KEY", True),  # Airflow's names know neither account_key nor sas
    ("AZURE_STORAGE_SAS_KEY", True),
    ("AZURE_STORAGE_CLIENT_SECRET", True),
    ("AWS_ACCESS_KEY_ID", True),  # Spark (access.key) and Airflow (access_key) hide it too
    ("GOOGLE_SERVICE_ACCOUNT_KEY", True),
    ("fs.azure.account.key.lake.dfs.core.windows.net", True),
    ("spark.hadoop.fs.azure.account.key.lake.dfs.core.windows.net", True),
    ("spark.hadoop.fs.s3a.access.key", True),
    ("spark.hadoop.google.cloud.auth.service.account.json.keyfile", True),
    ("spark.ssl.keyStorePassword", True),
    ("azure_client_credential", True),  # Spark's word "credential"; storage.py's rule had it
    ("GOOGLE_SERVICE_ACCOUNT", False),  # a key file's path; storage.py's "service_account"
    ("spark.hadoop.fs.s3a.aws.credentials.provider", False),
    ("spark.security.credentials.hive.enabled", False),
    ("AZURE_STORAGE_ACCOUNT_NAME", False),
    ("AWS_REGION", False),
    ("spark.ssl.keyStore", False),
    ("mergeSchema", False),
]


@pytest.mark.parametrize(("key", "holds_a_credential"), KEYS)
def test_one_rule_decides_for_errors_command_lines_the_masker_and_the_spark_ui(
        key, holds_a_credential):
    secret = f"value-of-{key}-0042"
    options = {key: secret, "AWS_REGION": "eu-north-1"}
    named = f"(type delta; its {key}" in _credentials(ConnectionStorageOptions(
        options, "lake", "delta"))
    on_command_line = key in with_redaction(options)
    masked = secret in secret_forms(options)
    redacted = re.search(with_redaction({})["spark.redaction.regex"], key) is not None

    assert is_credential_key(key) is holds_a_credential
    assert (named, on_command_line, masked) == (holds_a_credential, not holds_a_credential,
                                                holds_a_credential)
    assert redacted or not holds_a_credential  # settings may be hidden too, credentials must


def test_a_registered_credential_is_masked_whatever_its_name():
    from airflow.providers.common.compat.sdk import redact

    from airflow_provider_delta.hooks.delta import mask_credentials

    secret = "account-key-unknown-to-airflow-7731"
    mask_credentials({"AZURE_STORAGE_ACCESS_KEY": secret})

    assert redact(f"the key is {secret}") == "the key is ***"


def test_escaped_forms_and_a_key_files_private_key_are_registered_too():
    private_key = "-----BEGIN PRIVATE KEY-----\nMIIE\"q/+=\n-----END PRIVATE KEY-----\n"
    key_file = json.dumps({"type": "service_account", "private_key": private_key,
                           "private_key_id": "abc123def456", "client_email": "a@b.c"})

    forms = secret_forms({"GOOGLE_SERVICE_ACCOUNT_KEY": key_file, "AWS_REGION": "x"})

    assert key_file in forms and private_key in forms and "abc123def456" in forms
    assert json.dumps(private_key)[1:-1] in forms  # as it shows inside the key file's text
    assert repr(private_key)[1:-1] in forms  # inside a dict's Python text (rendered fields)
    assert "a@b.c" not in forms and "x" not in forms


@pytest.mark.parametrize("given", [None, "(?i)mycompany[.]vault"])
def test_the_redaction_pattern_extends_spark_default_and_the_users(given):
    pattern = redaction_regex(given)

    assert pattern.startswith(given or SPARK_DEFAULT)  # kept whole, only extended
    assert redaction_regex(pattern) == pattern  # extending twice changes nothing
    for key, holds_a_credential in KEYS:
        assert not holds_a_credential or re.search(pattern, key), key
    for word in ("spark.authenticate.secret", "x.password", "a.token", "my.credential"):
        assert re.search(pattern, word)
    if given:
        assert re.search(pattern, "mycompany.vault")


def test_a_connect_session_extends_the_sql_options_pattern_first():
    conf = with_sql_options_redaction({"spark.sql.shuffle.partitions": "2",
                                       "spark.sql.redaction.options.regex": "(?i)url|jdbc"})

    assert list(conf) == ["spark.sql.redaction.options.regex", "spark.sql.shuffle.partitions"]
    assert conf["spark.sql.redaction.options.regex"].startswith("(?i)url|jdbc|")
    assert sql_options_redaction_regex(None).startswith("(?i)url|")
    assert re.search(sql_options_redaction_regex(None), "fs.azure.account.key.lake")
