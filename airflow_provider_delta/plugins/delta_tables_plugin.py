"""Registers the "Delta tables" page: a FastAPI app and a React app (Airflow >= 3.1).

Registered through ``get_provider_info()["plugins"]``. Below Airflow 3.1 the UI has no React
apps, so the plugin carries nothing and Airflow loads no page.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from airflow_provider_delta.compat import airflow_at_least

URL_PREFIX = "/delta-provider"
HAS_REACT_APPS = airflow_at_least("3.1.0")


class DeltaTablesPlugin(AirflowPlugin):
    """The "Delta tables" page and its API."""

    name = "delta_tables"
    if HAS_REACT_APPS:
        from airflow_provider_delta.plugins.delta_tables_api import app

        fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "Delta tables API"}]
        react_apps = [{
            "name": "Delta tables",
            "bundle_url": f"{URL_PREFIX}/static/delta_tables.js",
            "destination": "nav",
            "url_route": "delta-tables",
            "nav_top_level": True,
        }]
        del app
