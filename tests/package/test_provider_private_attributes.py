"""Our package reads none of the Spark provider's private attributes: a provider release may
rename them at will, and a read of a renamed one fails only at run time (or, through
``getattr(..., default)``, not at all). The names are listed from the installed provider's
classes, so a release that adds private state is covered too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import airflow_provider_delta

pytest.importorskip("airflow.providers.apache.spark")

PACKAGE = Path(airflow_provider_delta.__file__).parent
_PROVIDER = "airflow.providers.apache.spark"


def _private(names) -> set[str]:
    return {name for name in names if name.startswith("_") and not name.startswith("__")}


def _class_level_private_names(cls: type) -> set[str]:
    """Private methods, properties and constants the provider's own classes define."""
    return {name for klass in cls.__mro__ if klass.__module__.startswith(_PROVIDER)
            for name in _private(vars(klass))}


def provider_private_names(monkeypatch) -> set[str]:
    """Private attributes of the provider classes we subclass or call: instance attributes set
    by their ``__init__`` (beyond what Airflow's base classes set) and class-level ones."""
    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
    from airflow.sdk import BaseHook, BaseOperator

    monkeypatch.setenv("AIRFLOW_CONN_PROBE_SPARK", '{"conn_type": "spark", "host": "local[1]"}')
    monkeypatch.setenv("AIRFLOW_CONN_PROBE_CONNECT",
                       '{"conn_type": "spark_connect", "host": "localhost", "port": 15002}')
    base_instance = (_private(vars(BaseOperator(task_id="probe")))
                     | _private(vars(BaseHook())))
    instances = [SparkSubmitOperator(task_id="probe", conn_id="probe_spark"),
                 SparkSubmitHook(conn_id="probe_spark"), SparkConnectHook(conn_id="probe_connect")]
    names = set().union(*(_private(vars(instance)) for instance in instances)) - base_instance
    for cls in (SparkSubmitOperator, SparkSubmitHook, SparkConnectHook):
        names |= _class_level_private_names(cls)
    return names


def private_reads(source: str) -> list[tuple[int, str]]:
    """``x._name``, and ``"_name"`` as a string (``getattr(x, "_name")``, names kept as data),
    with their lines."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            name = node.attr
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            name = node.value
        else:
            continue
        if _private([name]):
            found.append((node.lineno, name))
    return sorted(found)


def test_private_reads_finds_attributes_getattr_and_names_kept_as_data():
    source = 'self._conn_id\ngetattr(op, "_deploy_mode", None)\nNAMES = {"_archives": "archives"}\n'
    assert private_reads(source) == [(1, "_conn_id"), (2, "_deploy_mode"), (3, "_archives")]


def test_provider_private_names_include_what_the_operator_used_to_read(monkeypatch):
    assert {"_conn_id", "_deploy_mode", "_archives", "_hook", "_connection"} <= provider_private_names(monkeypatch)


def test_package_reads_no_private_attribute_of_the_spark_provider(monkeypatch):
    provider_names = provider_private_names(monkeypatch)
    reads = [f"{path.relative_to(PACKAGE.parent)}:{line}: {name}"
             for path in sorted(PACKAGE.rglob("*.py"))
             for line, name in private_reads(path.read_text())
             if name in provider_names]
    assert reads == [], "private attributes of the Spark provider read by our package (use our " \
                        "own public attributes, set from our __init__):\n" + "\n".join(reads)
