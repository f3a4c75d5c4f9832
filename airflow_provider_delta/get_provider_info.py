"""Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point."""

from airflow_provider_delta import __version__

# The delta connection form; DeltaHook.get_ui_field_behaviour returns it too.
CONNECTION_FORM = {
    "hidden-fields": ["schema"],
    "relabeling": {
        "host": "Endpoint URL",
        "login": "Access key id / account name",
        "password": "Secret access key / account key / service account JSON",
    },
    "placeholders": {
        "host": "http://127.0.0.1:9000 (S3-compatible stores; empty for AWS)",
        "extra": '{"provider": "s3", "region": "us-east-1"}',
    },
}

# The delta connection's extra fields: Airflow >= 3.2 draws them from here, older ones from
# DeltaHook.get_connection_form_widgets, which builds them from this too.
CONN_FIELDS = {
    "provider": {
        "label": "Object store",
        "description": "s3 (also S3-compatible stores), azure or gcs",
        "schema": {
            "type": ["string", "null"],
            "default": "s3",
            "enum": ["s3", "azure", "gcs"],
        },
    },
    "region": {"label": "Region", "schema": {"type": ["string", "null"]}},
    "session_token": {
        "label": "Session token",
        "schema": {"type": ["string", "null"], "format": "password"},
    },
    "allow_http": {
        "label": "Allow plain HTTP",
        "schema": {"type": ["boolean", "null"], "default": False},
    },
    "storage_options": {
        "label": "Further object_store options",
        "description": "JSON object of object_store keys passed through unchanged",
        "schema": {"type": ["object", "null"]},
    },
    "location": {
        "label": "Location to test",
        "description": "A bucket, folder or table URI that the Test button lists",
        "schema": {"type": ["string", "null"]},
    },
}


def get_provider_info() -> dict:
    return {
        "package-name": "airflow-provider-delta",
        "name": "Delta Lake (incremental)",
        "description": "Sense new Delta table versions and load version ranges with Spark.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "Delta Lake",
                "external-doc-url": "https://delta.io/",
                # The how-to pages of the docs site (docs/), as the official providers list theirs.
                "how-to-guide": [f"/docs/airflow-provider-delta/{page}.rst"
                                 for page in ("operators", "sensors", "triggers")],
                "tags": ["software"],
            }
        ],
        "sensors": [
            {
                "integration-name": "Delta Lake",
                "python-modules": ["airflow_provider_delta.sensors.delta_version",
                                   "airflow_provider_delta.sensors.delta_interval"],
            }
        ],
        "operators": [
            {
                "integration-name": "Delta Lake",
                "python-modules": ["airflow_provider_delta.operators.delta_load"],
            }
        ],
        "triggers": [
            {
                "integration-name": "Delta Lake",
                "python-modules": ["airflow_provider_delta.triggers.delta_version",
                                   "airflow_provider_delta.triggers.delta_interval"],
            }
        ],
        "hooks": [
            {
                "integration-name": "Delta Lake",
                "python-modules": ["airflow_provider_delta.hooks.delta"],
            }
        ],
        "plugins": [
            {
                "name": "delta_tables",
                "plugin-class": "airflow_provider_delta.plugins.delta_tables_plugin.DeltaTablesPlugin",
            }
        ],
        "extra-links": ["airflow_provider_delta.operators.links.SparkUILink"],
        "connection-types": [
            {
                "hook-class-name": "airflow_provider_delta.hooks.delta.DeltaHook",
                "hook-name": "Delta Lake",
                "connection-type": "delta",
                "ui-field-behaviour": CONNECTION_FORM,
                "conn-fields": CONN_FIELDS,
            }
        ],
    }
