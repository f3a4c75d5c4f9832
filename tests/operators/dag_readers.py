"""An auth manager for the page test: Airflow's SimpleAuthManager, except that the user
``outsider`` may read no DAG -- so the test can tell the page's DAG filter works."""

from __future__ import annotations

from typing import Any

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager


class NoDagsForOutsider(SimpleAuthManager):
    def is_authorized_dag(self, *, method: Any, user: Any, **kwargs: Any) -> bool:
        if user.get_name() == "outsider":
            return False
        return super().is_authorized_dag(method=method, user=user, **kwargs)
