"""Sensors: wait for new versions of a Delta table."""

from __future__ import annotations

from airflow_provider_delta.sensors.delta_version import DeltaVersionSensor

__all__ = ["DeltaVersionSensor"]
