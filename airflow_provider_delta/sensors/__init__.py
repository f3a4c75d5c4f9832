"""Sensors: wait for new versions of a Delta table, or for a time interval to complete."""

from __future__ import annotations

from airflow_provider_delta.sensors.delta_interval import DeltaIntervalSensor
from airflow_provider_delta.sensors.delta_version import DeltaVersionSensor

__all__ = ["DeltaIntervalSensor", "DeltaVersionSensor"]
