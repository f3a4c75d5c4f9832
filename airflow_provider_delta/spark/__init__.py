"""The Spark layer: plans from the core turned into DataFrames, on plain PySpark.

Public API: :func:`read_changes`, :func:`read_snapshot`, :func:`read_plan` and
:func:`read_change_feed`.
"""

from __future__ import annotations

from airflow_provider_delta.spark.change_feed import read_change_feed
from airflow_provider_delta.spark.reader import read_changes, read_plan, read_snapshot

__all__ = ["read_change_feed", "read_changes", "read_plan", "read_snapshot"]
