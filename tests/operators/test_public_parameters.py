"""The public classes' parameters: each documented in a ``:param:`` line (the API reference
is generated from them), and ``delta_conn_id`` defaulting alike everywhere."""

from __future__ import annotations

import inspect
import re

import pytest

from airflow_provider_delta.hooks.delta import DEFAULT_CONN_ID, DeltaHook
from airflow_provider_delta.operators import DeltaIncrementalOperator, DeltaTimeTravelOperator
from airflow_provider_delta.sensors.delta_interval import DeltaIntervalSensor
from airflow_provider_delta.sensors.delta_version import DeltaVersionSensor
from airflow_provider_delta.triggers.delta_interval import DeltaIntervalTrigger
from airflow_provider_delta.triggers.delta_version import DeltaVersionTrigger

PUBLIC = [DeltaIncrementalOperator, DeltaTimeTravelOperator, DeltaVersionSensor,
          DeltaVersionTrigger, DeltaIntervalSensor, DeltaIntervalTrigger, DeltaHook]


def _parameters(cls: type) -> dict[str, inspect.Parameter]:
    """The named parameters of ``cls`` and of this package's classes it builds on."""
    found: dict[str, inspect.Parameter] = {}
    for base in reversed(cls.__mro__):
        if base.__module__.startswith("airflow_provider_delta") and "__init__" in vars(base):
            found.update({name: parameter for name, parameter in
                          inspect.signature(base.__init__).parameters.items()
                          if name != "self" and parameter.kind not in (
                              parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL)})
    return found


@pytest.mark.parametrize("cls", PUBLIC, ids=lambda cls: cls.__name__)
def test_every_parameter_has_a_param_line(cls):
    documented = set(re.findall(r"^\s*:param (\w+):", cls.__doc__, re.MULTILINE))
    assert set(_parameters(cls)) - documented == set()


@pytest.mark.parametrize("cls", PUBLIC, ids=lambda cls: cls.__name__)
def test_delta_conn_id_defaults_alike(cls):
    assert _parameters(cls)["delta_conn_id"].default == DEFAULT_CONN_ID
    assert DeltaHook.default_conn_name == DEFAULT_CONN_ID
