"""Run by test_extras.py with a venv's own Python: a sensor poke and a trigger event on a
local table, in an install without pyspark. Prints what they found as JSON."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def spark_modules() -> list[str]:
    return sorted(name for name in sys.modules
                  if name.split(".")[0] == "pyspark" or name.startswith("airflow.providers.apache.spark"))


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
        "poke": sensor_poke(table_uri),
        "trigger": asyncio.run(first_trigger_event(table_uri, 1)),
        "spark_modules_loaded": spark_modules(),
    }))
