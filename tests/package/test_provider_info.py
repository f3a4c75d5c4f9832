"""The provider is discovered by Airflow and everything it lists imports."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import airflow_provider_delta
from airflow_provider_delta.get_provider_info import get_provider_info


def _listed_modules(info: dict) -> list[str]:
    kinds = ("sensors", "operators", "triggers", "hooks")
    return [module for kind in kinds for entry in info[kind] for module in entry["python-modules"]]


def test_every_listed_module_and_hook_class_imports():
    info = get_provider_info()
    for module in _listed_modules(info):
        importlib.import_module(module)
    for connection in info["connection-types"]:
        module, _, name = connection["hook-class-name"].rpartition(".")
        hook = getattr(importlib.import_module(module), name)
        assert hook.conn_type == connection["connection-type"]


def test_airflow_discovers_the_provider_and_its_connection_type():
    from airflow.providers_manager import ProvidersManager
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    assert "airflow-provider-delta" in ProvidersManager().providers
    assert "delta" in ProvidersManagerTaskRuntime().hooks


def test_provider_info_is_valid_against_airflows_schema():
    import json
    from importlib.resources import files

    import jsonschema

    schema = json.loads(files("airflow").joinpath("provider_info.schema.json").read_text())
    jsonschema.validate(get_provider_info(), schema)


def _modules_defining(kind: str, base: type) -> set[str]:
    package = importlib.import_module(f"airflow_provider_delta.{kind}")
    found = set()
    for module_info in pkgutil.iter_modules(package.__path__, f"{package.__name__}."):
        module = importlib.import_module(module_info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and issubclass(cls, base):
                found.add(module.__name__)
    return found


def test_every_operator_sensor_trigger_and_hook_module_is_listed():
    from airflow.sdk import BaseHook, BaseOperator, BaseSensorOperator
    from airflow.triggers.base import BaseTrigger

    info = get_provider_info()
    bases = {"operators": BaseOperator, "sensors": BaseSensorOperator, "triggers": BaseTrigger, "hooks": BaseHook}
    for kind, base in bases.items():
        listed = {module for entry in info[kind] for module in entry["python-modules"]}
        assert listed == _modules_defining(kind, base), kind


def test_provider_names_itself_and_its_version():
    from importlib.metadata import version

    info = get_provider_info()
    assert info["package-name"] == "airflow-provider-delta"
    assert info["versions"] == [version("airflow-provider-delta")] == [airflow_provider_delta.__version__]
    integrations = {entry["integration-name"] for entry in info["integrations"]}
    kinds = ("sensors", "operators", "triggers", "hooks")
    assert {entry["integration-name"] for kind in kinds for entry in info[kind]} <= integrations


def test_how_to_guides_are_pages_of_the_docs():
    from pathlib import Path

    docs = Path(__file__).resolve().parents[2] / "docs"
    guides = [guide for entry in get_provider_info()["integrations"]
              for guide in entry.get("how-to-guide", [])]
    assert guides
    for guide in guides:
        assert (docs / guide.removeprefix("/docs/airflow-provider-delta/")).is_file(), guide
