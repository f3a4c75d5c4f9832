"""Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point."""

from airflow_provider_delta import __version__


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
                "tags": ["software"],
            }
        ],
        "sensors": [
            {
                "integration-name": "Delta Lake",
                "python-modules": ["airflow_provider_delta.sensors.delta_version"],
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
                "python-modules": ["airflow_provider_delta.triggers.delta_version"],
            }
        ],
        "hooks": [
            {
                "integration-name": "Delta Lake",
                "python-modules": ["airflow_provider_delta.hooks.delta"],
            }
        ],
        "connection-types": [
            {
                "connection-type": "delta",
                "hook-class-name": "airflow_provider_delta.hooks.delta.DeltaHook",
            }
        ],
    }
