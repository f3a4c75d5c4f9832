"""The FastAPI app behind the "Delta tables" page, mounted at ``/delta-provider``.

``GET /api/tables`` answers the rows of :mod:`.table_rows` for the DAGs the caller may read,
through Airflow's own authentication (the UI's session cookie or a bearer token) and its auth
manager; ``/static`` serves the page's script.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.core_api.security import GetUserDep
from airflow.utils.session import create_session

from airflow_provider_delta.plugins.table_rows import public, table_rows

WWW = Path(__file__).parent / "www"

app = FastAPI(title="Delta tables", description="Freshness of the Delta tables Airflow loads.")


@app.get("/api/tables")
def tables(user: GetUserDep) -> list[dict[str, Any]]:
    """One row per (source table, consumer task, watermark store), most behind first."""
    readable = get_auth_manager().get_authorized_dag_ids(user=user, method="GET")
    with create_session() as session:
        return [public(row) for row in table_rows(session, readable)]


app.mount("/static", StaticFiles(directory=WWW), name="static")
