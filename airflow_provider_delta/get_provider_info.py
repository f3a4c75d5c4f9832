"""Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point."""

from airflow_provider_delta import __version__


def get_provider_info() -> dict:
    return {
        "package-name": "airflow-provider-delta",
        "name": "Delta Lake (incremental)",
        "description": "Sense new Delta table versions and load version ranges with Spark.",
        "versions": [__version__],
    }
