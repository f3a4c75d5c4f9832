"""Hooks: Airflow connections turned into object-store options for Delta tables."""

from __future__ import annotations

from airflow_provider_delta.hooks.delta import DeltaHook

__all__ = ["DeltaHook"]
