"""Freshness end to end: a DAG run's StatsD metrics, then the "Delta tables" API and page on a
real ``airflow api-server`` (SQLite, the provider installed), opened in headless Chromium."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest
from airflow.sdk import DAG

from airflow_provider_delta.freshness import LOAD_RECORD_KEY, table_tag
from airflow_provider_delta.operators import DeltaIncrementalOperator
from airflow_provider_delta.sensors import DeltaVersionSensor
from tests.processes import stop

from .conftest import SPARK_CONF, append_rows
from .headless_chromium import HeadlessChromium

pytestmark = pytest.mark.slow

USER, PASSWORD = "viewer", "viewer-pw-5150"
OUTSIDER = "outsider"  # a viewer the test auth manager lets read no DAG


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def api_server(folder: Path):
    """``airflow api-server`` on the tests' SQLite DB, one user ``viewer``; yields its URL."""
    from airflow.configuration import conf

    passwords = folder / "passwords.json"
    passwords.write_text(json.dumps({USER: PASSWORD, OUTSIDER: PASSWORD}))
    port = free_port()
    env = {**os.environ, "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:viewer,{OUTSIDER}:viewer",
           "AIRFLOW__CORE__AUTH_MANAGER": "operators.dag_readers.NoDagsForOutsider",
           "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
           "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
           # The key this process encrypted the Variables with (unit-test mode makes one up).
           "AIRFLOW__CORE__FERNET_KEY": conf.get("core", "fernet_key")}
    log = (folder / "api-server.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "airflow", "api-server", "-H", "127.0.0.1", "-p", str(port),
         "-w", "1", "--apps", "core"], env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert server.poll() is None, (folder / "api-server.log").read_text()[-3000:]
            try:
                urllib.request.urlopen(f"{url}/api/v2/monitor/health", timeout=5)
                break
            except OSError:
                assert time.monotonic() < deadline, "api-server did not start"
                time.sleep(0.5)
        yield url
    finally:
        stop(server)
        log.close()


def get_json(url: str, token: str | None = None):
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=60) as r:
        return json.load(r)


def login(url: str, user: str = USER) -> str:
    request = urllib.request.Request(
        f"{url}/auth/token", data=json.dumps({"username": user, "password": PASSWORD}).encode(),
        headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=60) as r:
        return json.load(r)["access_token"]


def own_rows(rows: list[dict]) -> dict[str, dict]:
    """This test's rows by table: the suite's other DAG runs share the metadata DB."""
    return {row["table_uri"]: row for row in rows if row["dag_id"] == "freshness_page"}


def test_lag_metrics_api_and_page(tmp_path, run_dag, task_states, xcom_value, spark_local_conn,
                                  statsd_lines):
    tables = {name: str(tmp_path / name) for name in ("orders", "events")}
    for uri in tables.values():
        append_rows(uri, [1, 2, 3])
        append_rows(uri, [4, 5])
    with DAG("freshness_page", schedule=None) as dag:
        for name, uri in tables.items():
            wait = DeltaVersionSensor(
                task_id=f"wait_{name}", table_uri=uri, watermark_store="variable",
                watermark_key="wm_page", poke_interval=0.2, timeout=60)
            load = DeltaIncrementalOperator(
                task_id=f"load_{name}", table_uri=uri, sensor_task_id=f"wait_{name}",
                watermark_store="variable", watermark_key="wm_page",
                target=str(tmp_path / f"{name}_copy"), conn_id=spark_local_conn, conf=SPARK_CONF)
            wait >> load

    began = time.monotonic()
    run = run_dag(dag)
    print(f"DAG run (2 sensors, 2 loads): {time.monotonic() - began:.1f} s")
    lines = statsd_lines()
    assert set(task_states(run).values()) == {"success"}

    # The metrics: one series per table and task (InfluxDB-style tags on StatsD lines), under
    # Airflow's [metrics] statsd_prefix.
    orders_load = f"table={table_tag(tables['orders'])},dag_id=freshness_page,task_id=load_orders"
    assert f"airflow.delta_provider.load.rows,{orders_load}:5|g" in lines
    assert f"airflow.delta_provider.load.batches,{orders_load}:1|g" in lines
    for name in ("files", "bytes", "duration"):
        assert any(line.startswith(f"airflow.delta_provider.load.{name},{orders_load}:") for line in lines)
    wait_events = f"table={table_tag(tables['events'])},dag_id=freshness_page,task_id=wait_events"
    assert f"airflow.delta_provider.lag.versions,{wait_events}:2|g" in lines  # no watermark: all of 0..1
    assert any(line.startswith(f"airflow.delta_provider.lag.seconds,{wait_events}:") for line in lines)
    assert xcom_value(run, "load_events", LOAD_RECORD_KEY)["target_version"] == 0

    append_rows(tables["events"], [6])
    append_rows(tables["events"], [7, 8])  # events: versions 2 and 3 not loaded

    began = time.monotonic()
    with api_server(tmp_path) as url:
        print(f"api-server up: {time.monotonic() - began:.1f} s")
        with pytest.raises(urllib.error.HTTPError) as refused:
            get_json(f"{url}/delta-provider/api/tables")
        assert refused.value.code in (401, 403)

        assert get_json(f"{url}/delta-provider/api/tables", login(url, OUTSIDER)) == []
        token = login(url)
        rows = own_rows(get_json(f"{url}/delta-provider/api/tables", token))
        assert set(rows) == set(tables.values())
        orders, events = rows[tables["orders"]], rows[tables["events"]]
        fields = {"table_uri", "dag_id", "task_id", "map_index", "watermark_store", "watermark",
                  "latest_version", "lag_versions", "lag_seconds", "last_load"}
        assert fields <= set(orders)
        assert "error" not in orders and "error" not in events
        assert (orders["watermark"], orders["latest_version"], orders["lag_versions"],
                orders["lag_seconds"]) == (1, 1, 0, 0)
        assert (events["watermark"], events["latest_version"], events["lag_versions"]) == (1, 3, 2)
        assert events["lag_seconds"] > 0
        assert (orders["dag_id"], orders["task_id"], orders["map_index"],
                orders["watermark_store"]) == ("freshness_page", "load_orders", -1, "variable")
        last = orders["last_load"]
        assert (last["rows"], last["batches"], last["target"], last["target_version"]) == (
            5, 1, str(tmp_path / "orders_copy"), 0)
        assert last["end_date"]
        assert "delta_conn_id" not in json.dumps(orders) and "storage_options" not in json.dumps(orders)

        began = time.monotonic()
        browser = HeadlessChromium(tmp_path / "chromium")
        try:
            browser.call("Network.enable")
            browser.call("Network.setCookie", name="_token", value=token, url=url, path="/")
            browser.call("Page.navigate", url=f"{url}/plugin/delta-tables")
            ours = json.dumps(sorted(tables.values()))
            shown = browser.wait_for(
                "(() => { const rows = [...document.querySelectorAll('[data-testid=delta-table-row]')]"
                f".filter(r => {ours}.includes(r.dataset.table));"
                " return rows.length === 2 && rows.map(r => ({table: r.dataset.table,"
                " lag: r.querySelector('[data-testid=lag-versions]').innerText,"
                " text: r.innerText})); })()")
            time.sleep(0.5)  # let the layout settle before the picture; the DOM is asserted above
            screenshot = browser.screenshot(tmp_path / "delta-tables.png")
            nav = browser.evaluate("[...document.querySelectorAll('a')].some(a => "
                                   "a.innerText.trim() === 'Delta tables')")
        finally:
            browser.stop()
        print(f"page in chromium: {time.monotonic() - began:.1f} s")

        shutil.rmtree(Path(tables["orders"]) / "_delta_log")  # now unreachable: its row says so
        rows = own_rows(get_json(f"{url}/delta-provider/api/tables", token))
        assert "error" not in rows[tables["events"]] and rows[tables["events"]]["lag_versions"] == 2
        assert rows[tables["orders"]]["error"] and rows[tables["orders"]]["lag_versions"] is None
    if os.environ.get("DELTA_SCREENSHOT_DIR"):  # keep it past pytest's temp-dir rotation
        screenshot = Path(shutil.copy(screenshot, os.environ["DELTA_SCREENSHOT_DIR"]))
    print(f"screenshot: {screenshot}")
    # Sorted by lag, most behind first.
    assert [(r["table"], r["lag"]) for r in shown] == [(tables["events"], "2"),
                                                        (tables["orders"], "0")]
    assert "load_events" in shown[0]["text"] and "5 rows" in shown[1]["text"]
    assert nav, "no 'Delta tables' entry in the navigation"
    assert screenshot.stat().st_size > 10_000
