"""Freshness on its own: the trigger's lag metrics, and the page's per-table deadline."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future

from airflow_provider_delta.freshness import table_tag
from airflow_provider_delta.plugins.table_rows import _settle
from airflow_provider_delta.triggers import DeltaVersionTrigger


def test_a_trigger_event_emits_the_lag_of_its_range(growing_table, statsd_lines):
    table = growing_table(4)  # versions 0..3; the trigger waits from 2: watermark 1
    trigger = DeltaVersionTrigger(table_uri=table.uri, start_version=2, fire_once=True)
    event = asyncio.run(anext(trigger.run())).payload
    assert (event["start_version"], event["end_version"]) == (2, 3)
    lines = statsd_lines()
    tag = f"table={table_tag(table.uri)}"  # a trigger of no task instance: the table only
    assert f"airflow.delta_provider.lag.versions,{tag}:2|g" in lines
    seconds = [line for line in lines if line.startswith(f"airflow.delta_provider.lag.seconds,{tag}:")]
    assert len(seconds) == 1 and float(seconds[0].split(":")[1].split("|")[0]) > 0


def test_without_a_metrics_backend_an_event_sends_no_gauge(growing_table, monkeypatch):
    """Stats without a backend drops what it is given: a triggerer firing thousands of events
    a second must not work out (nor read commits for) lags that go nowhere."""
    from airflow.sdk._shared.observability.metrics.base_stats_logger import NoStatsLogger
    from airflow.sdk.observability import stats

    gauges = []
    monkeypatch.setattr(NoStatsLogger, "gauge",
                        classmethod(lambda cls, stat, *args, **kwargs: gauges.append(stat)))
    stats.initialize(factory=NoStatsLogger, export_legacy_names=False)
    table = growing_table(4)  # the lag of 2..3 would read version 2's commit time
    trigger = DeltaVersionTrigger(table_uri=table.uri, start_version=2, fire_once=True)
    event = asyncio.run(anext(trigger.run())).payload
    assert (event["status"], event["start_version"], event["end_version"]) == ("success", 2, 3)
    assert gauges == []


def test_table_tags_hold_only_what_stat_names_allow():
    assert table_tag("s3://lake/orders v2") == "s3/lake/orders_v2"
    assert table_tag("/data/t-1/x.y") == "/data/t-1/x.y"


def test_a_table_that_does_not_answer_gets_an_error_not_a_hang():
    never = Future()  # a probe stuck in a slow store
    row = {"watermark": 3}
    finished = threading.Event()
    threading.Thread(target=lambda: (_settle(row, never, 0.0, 0.5), finished.set()),
                     daemon=True).start()
    assert finished.wait(60), "the deadline did not end the wait"
    assert row["error"] == "the table did not answer within 0.5 s"
    assert "lag_versions" not in row
