"""The provider is discovered by Airflow and everything it lists imports."""

from __future__ import annotations

import importlib

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
