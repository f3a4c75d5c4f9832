"""Run by test_extras.py with a venv's own Python: Airflow's ProvidersManager loading our
provider info, a sensor poke and a trigger event on a local table, in an install without
pyspark. Prints what they found as JSON."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import sys


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def spark_modules() -> list[str]:
    return sorted(name for name in sys.modules
                  if name.split(".")[0] == "pyspark" or name.startswith("airflow.providers.apache.spark"))


def provider_manager_load() -> dict:
    """What a scheduler or API server does with our provider info: extra links, hooks and
    connection forms imported by ProvidersManager; the warnings it logs about our package."""
    from airflow.providers_manager import ProvidersManager

    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    logging.getLogger().addHandler(handler)
    try:
        manager = ProvidersManager()
        links = manager.extra_links_class_names
        manager.initialize_providers_hooks()
        manager.connection_form_widgets  # noqa: B018 - imports every hook class, as the UI does
    finally:
        logging.getLogger().removeHandler(handler)
    ours = [f"{record.levelname}: {record.getMessage()}" for record in records
            if "airflow_provider_delta" in record.getMessage()
            or "airflow-provider-delta" in record.getMessage()]
    return {"warnings": ours,
            "links": [name for name in links if name.startswith("airflow_provider_delta")]}


def sensor_poke(table_uri: str) -> dict:
    from airflow.utils import db

    from airflow_provider_delta.sensors import DeltaVersionSensor

    db.initdb()  # the Variable watermark store reads the metadata DB
    sensor = DeltaVersionSensor(task_id="sense", table_uri=table_uri, watermark_store="variable",
                                watermark_key="watermark", initial="earliest")
    return sensor.poke({}).xcom_value


async def first_trigger_event(table_uri: str, start_version: int) -> dict:
    from airflow_provider_delta.triggers import DeltaVersionTrigger

    trigger = DeltaVersionTrigger(table_uri=table_uri, start_version=start_version,
                                  poll_interval=0.1, fire_once=True)
    async for event in trigger.run():
        return event.payload


if __name__ == "__main__":
    table_uri = sys.argv[1]
    print(json.dumps({
        "installed": {name: installed(name) for name in ("pyspark", "airflow.providers.apache.spark")},
        "provider_manager": provider_manager_load(),
        "poke": sensor_poke(table_uri),
        "trigger": asyncio.run(first_trigger_event(table_uri, 1)),
        "spark_modules_loaded": spark_modules(),
    }))
