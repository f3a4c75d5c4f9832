"""Extra links of the operators: the Spark UI of the job a task ran."""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_delta.compat import BaseOperatorLink

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import BaseOperator, TaskInstanceKey


class SparkUILink(BaseOperatorLink):
    """The Spark driver's web UI of the task's last job, as the job reported it (empty when
    the UI was disabled, or no job ran). Airflow stores it in XCom when the task ends."""

    name = "Spark UI"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        return getattr(operator, "spark_ui_url", None) or ""
