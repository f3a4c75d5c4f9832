"""Distinct secrets planted in every documented form: each connection type's credential
fields, and the operators' ``conf``, ``sink_options`` and ``storage_options``. A probe that finds
one of these strings anywhere but in the driver's environment has found a leak."""

from __future__ import annotations

import json

PRIVATE_KEY = ("-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANprobeGcpPrivateKey0101\n"
               "-----END PRIVATE KEY-----\n")
KEY_FILE = {"type": "service_account", "project_id": "probe", "private_key_id": "gcpkeyid0202",
            "private_key": PRIVATE_KEY, "client_email": "probe@probe.iam.gserviceaccount.com"}

# conn_id -> (the connection as AIRFLOW_CONN_* JSON, the secrets it holds)
CONNECTIONS = {
    "probe_delta_s3": ({
        "conn_type": "delta", "login": "AKIAPROBEDELTA0303", "password": "delta-s3-secret-0404",
        "extra": {"session_token": "delta-session-token-0505",
                  "storage_options": {"AZURE_STORAGE_ACCESS_KEY": "delta-extra-access-key-0606"}},
    }, ["AKIAPROBEDELTA0303", "delta-s3-secret-0404", "delta-session-token-0505",
        "delta-extra-access-key-0606"]),
    "probe_delta_azure": ({
        "conn_type": "delta", "login": "probeaccount", "password": "delta-azure-key-0707",
        "extra": {"provider": "azure", "sas_token": "sv=2024&sig=delta-azure-sas-0808"},
    }, ["delta-azure-key-0707", "sv=2024&sig=delta-azure-sas-0808"]),
    "probe_delta_gcs": ({
        "conn_type": "delta", "password": json.dumps(KEY_FILE), "extra": {"provider": "gcs"},
    }, [PRIVATE_KEY, "gcpkeyid0202"]),
    "probe_aws": ({
        "conn_type": "aws", "login": "AKIAPROBEAWS0909", "password": "aws-secret-1010",
        "extra": {"aws_session_token": "aws-session-token-1111", "region_name": "us-east-1"},
    }, ["AKIAPROBEAWS0909", "aws-secret-1010", "aws-session-token-1111"]),
    "probe_wasb": ({
        "conn_type": "wasb", "login": "probeaccount", "password": "wasb-account-key-1212",
        "extra": {"sas_token": "sv=2024&sig=wasb-sas-1313"},
    }, ["wasb-account-key-1212", "sv=2024&sig=wasb-sas-1313"]),
    "probe_wasb_string": ({
        "conn_type": "wasb", "extra": {"connection_string":
                                       "AccountName=probeaccount;AccountKey=wasb-string-key-1414"},
    }, ["wasb-string-key-1414"]),
    "probe_adls": ({
        "conn_type": "adls", "host": "probeaccount", "login": "client-id-visible",
        "password": "adls-client-secret-1515", "extra": {"tenant_id": "tenant-visible"},
    }, ["adls-client-secret-1515"]),
    "probe_gcp": ({
        "conn_type": "google_cloud_platform", "extra": {"keyfile_dict": KEY_FILE},
    }, [PRIVATE_KEY, "gcpkeyid0202"]),
}

# Spark conf and writer options: keys neither Spark's default redaction nor Airflow's names know.
CONF_LITERAL = {"spark.hadoop.fs.azure.account.key.probe.dfs.core.windows.net":
                "conf-literal-account-key-1616"}
CONF_TEMPLATED_KEY = "spark.hadoop.fs.azure.sas.probe.container.blob.core.windows.net"
CONF_TEMPLATED_SECRET = "conf-templated-sas-1717"
SINK_OPTIONS = {"fs.azure.account.key.sink.dfs.core.windows.net": "sink-dict-template-key-1818",
                "fs.s3a.secret.key": "sink-dict-template-s3a-1919"}
SINK_TEMPLATED_SECRET = "sink-templated-value-2020"
STORAGE_OPTIONS_SECRET = "storage-options-key-2121"


def connection_secrets() -> list[str]:
    return sorted({secret for _, secrets in CONNECTIONS.values() for secret in secrets})


def option_secrets() -> list[str]:
    return [*CONF_LITERAL.values(), CONF_TEMPLATED_SECRET, *SINK_OPTIONS.values(),
            SINK_TEMPLATED_SECRET, STORAGE_OPTIONS_SECRET]
