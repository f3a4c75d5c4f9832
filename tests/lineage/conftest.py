"""The operator tests' Spark connection fixture, for the lineage and link tests."""

from operators.conftest import spark_local_conn  # noqa: F401 (a fixture)
