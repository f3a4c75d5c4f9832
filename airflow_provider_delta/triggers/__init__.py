"""Triggers: poll a Delta table's log asynchronously (deferred sensors, AssetWatchers)."""

from __future__ import annotations

from airflow_provider_delta.triggers.delta_interval import DeltaIntervalTrigger
from airflow_provider_delta.triggers.delta_version import DeltaVersionTrigger

__all__ = ["DeltaIntervalTrigger", "DeltaVersionTrigger"]
