"""Where spark-submit puts the driver, read from the spark connection's documented fields (host,
port, extra ``deploy-mode``) and the operator's ``deploy_mode``."""

from __future__ import annotations

import json

import pytest

from airflow_provider_delta.operators import DeltaIncrementalOperator
from airflow_provider_delta.operators.transport import SubmitTarget, resolve_submit_target


@pytest.mark.parametrize(("connection", "deploy_mode", "expected"), [
    ({"conn_type": "spark", "host": "local[2]"}, None, SubmitTarget("local[2]", None)),
    ({"conn_type": "spark", "host": "spark://10.0.0.1", "port": 7077}, None,
     SubmitTarget("spark://10.0.0.1:7077", None)),
    ("spark://10.0.0.1:7077?deploy-mode=cluster", None,
     SubmitTarget("spark://10.0.0.1:7077", "cluster")),
    ({"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}}, "client",
     SubmitTarget("yarn", "client")),
    ({"conn_type": "spark", "host": "k8s://https://api.example.com:6443"}, "cluster",
     SubmitTarget("k8s://https://api.example.com:6443", "cluster")),
], ids=["local", "standalone-url-in-host", "uri", "yarn-deploy-mode-given", "k8s"])
def test_master_and_deploy_mode(monkeypatch, connection, deploy_mode, expected):
    value = connection if isinstance(connection, str) else json.dumps(connection)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_UNDER_TEST", value)
    assert resolve_submit_target("spark_under_test", deploy_mode) == expected


def test_what_each_target_means_for_the_driver():
    local = SubmitTarget("local[2]", None)
    assert local.local and local.driver_runs_here and not local.env_goes_on_command_line
    cluster = SubmitTarget("spark://10.0.0.1:7077", "cluster")
    assert not cluster.local and not cluster.driver_runs_here
    for master in ("yarn", "k8s://https://api.example.com:6443"):
        assert SubmitTarget(master, "client").env_goes_on_command_line


def test_the_operator_submits_to_its_own_conn_id_and_deploy_mode(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_UNDER_TEST",
                       json.dumps({"conn_type": "spark", "host": "yarn",
                                   "extra": {"deploy-mode": "client"}}))
    operator = DeltaIncrementalOperator(task_id="load", table_uri="/data/source",
                                        target="/data/target", conn_id="spark_under_test",
                                        deploy_mode="cluster")
    assert (operator.conn_id, operator.deploy_mode) == ("spark_under_test", "cluster")
    assert operator.submit_target == SubmitTarget("yarn", "cluster")
