"""Sensing a table on an S3-compatible store (moto's server on 127.0.0.1) through a delta or an aws
connection."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple

import pytest
from airflow.sdk import DAG, get_current_context, task

from airflow_provider_delta.credential_keys import (
    credential_entries, without_credential_entries)
from airflow_provider_delta.errors import InvalidParameterError
from airflow_provider_delta.sensors import DeltaIntervalSensor, DeltaVersionSensor
from airflow_provider_delta.triggers import DeltaIntervalTrigger, DeltaVersionTrigger
from airflow_provider_delta.watermarks import make_watermark_store

SECRET = "moto-secret-key-98765"  # the shared S3 fixture's secret key
WATERMARK = {"watermark_store": "variable", "watermark_key": "s3_watermark"}


@pytest.fixture
def s3_table(s3_options, growing_table, request):
    """A Delta table with versions 0..1, written straight into the bucket by deltalake."""
    assert s3_options["AWS_SECRET_ACCESS_KEY"] == SECRET
    options = {**s3_options, "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}  # one writer: no lock needed
    name = re.sub(r"[^A-Za-z0-9_-]", "_", request.node.name)  # parametrized names hold [ ]
    return growing_table(2, uri=f"s3://lake/{name}", storage_options=options)


def connection_of_type(conn_type: str, s3_options: dict[str, str]) -> dict:
    """The moto bucket's keys as a ``delta`` connection, or as the Amazon provider's ``aws``
    connection (``aws_default`` style, the S3 endpoint in ``service_config``)."""
    endpoint = s3_options["AWS_ENDPOINT_URL"]
    if conn_type == "delta":
        return {"conn_type": "delta", "host": endpoint, "login": "testing", "password": SECRET,
                "extra": {"region": "us-east-1"}}
    return {"conn_type": "aws", "login": "testing", "password": SECRET, "extra": {
        "region_name": "us-east-1", "service_config": {"s3": {"endpoint_url": endpoint}}}}


@pytest.mark.parametrize("conn_type", ["delta", "aws", "delta_default", "storage_options"])
def test_sensor_and_trigger_on_s3_with_a_connection(
    run_dag, s3_options, s3_table, monkeypatch, ranges_of, commit_once_deferred, capfd, conn_type
):
    """Credentials from a named connection, from ``delta_default`` without naming it (the
    default of every ``delta_conn_id``), or ``storage_options`` without credentials (the
    deferred sensor hands them to its trigger; the keys come from the environment)."""
    credentials = {"delta_conn_id": "lake_s3"}
    if conn_type == "storage_options":
        credentials = {"storage_options": without_credential_entries(s3_options)}
        for key, value in credential_entries(s3_options).items():
            monkeypatch.setenv(key, value)
    elif conn_type == "delta_default":
        credentials = {}
        monkeypatch.setenv("AIRFLOW_CONN_DELTA_DEFAULT",
                           json.dumps(connection_of_type("delta", s3_options)))
    else:
        monkeypatch.setenv("AIRFLOW_CONN_LAKE_S3",
                           json.dumps(connection_of_type(conn_type, s3_options)))
    with DAG("delta_s3", schedule=None, start_date=datetime(2024, 1, 1), catchup=False) as dag:
        sense = DeltaVersionSensor(
            task_id="sense", table_uri=s3_table.uri, **credentials,
            watermark_store="variable", watermark_key="s3_watermark", initial="earliest",
            deferrable=True, poke_interval=0.2, timeout=60,
        )

        @task
        def load(uri: str) -> dict:
            context = get_current_context()
            found = context["ti"].xcom_pull(task_ids="sense")
            make_watermark_store("variable", key="s3_watermark", table_uri=uri).write(
                context, found["end_version"])
            return found

        sense >> load(s3_table.uri)

    assert ranges_of(run_dag(dag)) == (0, 1)  # found on the worker, through DeltaHook

    with commit_once_deferred(s3_table):
        second = run_dag(dag)  # found by the trigger, which reads the connection asynchronously
    assert ranges_of(second) == (2, 2)
    assert SECRET not in "".join(capfd.readouterr())  # masked in every log line
    from airflow.models.renderedtifields import RenderedTaskInstanceFields

    sense = next(ti for ti in second.get_task_instances() if ti.task_id == "sense")
    rendered = RenderedTaskInstanceFields.get_templated_fields(sense)
    assert rendered["table_uri"] == s3_table.uri and SECRET not in str(rendered)


def test_credentials_in_storage_options_are_not_stored_with_the_trigger(s3_options):
    """A trigger's arguments are stored in the metadata DB: a deferrable sensor, and the
    trigger itself, refuse credentials in storage_options when built, without showing them."""
    with pytest.raises(InvalidParameterError) as refused:
        DeltaVersionSensor(task_id="sense", table_uri="s3://lake/orders", deferrable=True,
                           storage_options=s3_options, **WATERMARK)
    message = str(refused.value)
    assert message.startswith("sense: s3://lake/orders: storage_options={")
    assert "holds credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)" in message
    assert "give delta_conn_id" in message and SECRET not in message
    with pytest.raises(InvalidParameterError, match="holds credentials") as refused:
        DeltaVersionTrigger(table_uri="s3://lake/orders", storage_options=s3_options)
    assert SECRET not in str(refused.value)
    DeltaVersionSensor(task_id="poke", table_uri="s3://lake/orders", deferrable=False,
                       storage_options=s3_options, **WATERMARK)  # nothing stored: kept in the worker
    with pytest.raises(InvalidParameterError, match="^complete: s3://lake/orders: storage_o"):
        DeltaIntervalSensor(task_id="complete", table_uri="s3://lake/orders", deferrable=True,
                            storage_options=s3_options)
    with pytest.raises(InvalidParameterError, match="holds credentials") as refused:
        DeltaIntervalTrigger(table_uri="s3://lake/orders", interval_end="2026-01-01T00:00:00+00:00",
                             grace_seconds=60, storage_options=s3_options)
    assert SECRET not in str(refused.value)


def test_deferred_interval_sensor_on_s3_with_storage_options(
        s3_options, s3_table, monkeypatch, register_dag, xcom_value, commit_once_deferred):
    """DeltaIntervalSensor hands its storage_options (endpoint, region) to its trigger; the keys
    come from the environment."""
    from tests.airflow.test_interval_sensor import interval_dag, run_interval

    for key, value in credential_entries(s3_options).items():
        monkeypatch.setenv(key, value)
    dag = interval_dag("delta_interval_s3", s3_table.uri, deferrable=True,
                       interval_grace=timedelta(hours=1),
                       storage_options=without_credential_entries(s3_options))
    time.sleep(1)
    end = datetime.now(timezone.utc).replace(microsecond=0)  # after the table's commits
    with commit_once_deferred(s3_table):
        dag_run = run_interval(register_dag, dag, end)
    found = xcom_value(dag_run, "load")
    assert (found["complete_by"], found["newest_version"]) == ("commit", 2)


class Fleet(NamedTuple):
    template: Any  # the tables' source: version 1 appended here is put into each table
    bucket: str
    uris: list[str]
    triggers: list[DeltaVersionTrigger]
    proxy: Any  # moto_s3.CountingProxy: its requests, its latency


@contextmanager
def fleet_on_s3(s3_options, growing_table, monkeypatch, count: int, poll: float
                ) -> Iterator[Fleet]:
    """``count`` tables at version 0 in a bucket of their own, behind a counting proxy, and a
    deferred sensor's trigger waiting for version 1 of each (not started)."""
    from moto_s3 import counting_proxy, put_tree, scratch_bucket

    template = growing_table(1)
    for key, value in credential_entries(s3_options).items():
        monkeypatch.setenv(key, value)  # a worker's credentials: the environment's
    with scratch_bucket("fleet") as bucket, counting_proxy(s3_options) as (options, proxy):
        uris = [put_tree(template.uri, f"t{i:03d}", bucket) for i in range(count)]
        triggers = [DeltaVersionTrigger(
            table_uri=uri, start_version=1, poll_interval=poll, fire_once=True,
            delta_conn_id=None, storage_options=without_credential_entries(options))
            for uri in uris]
        yield Fleet(template, bucket, uris, triggers, proxy)


def test_a_few_hundred_triggers_on_s3_list_once_each_a_poll(s3_options, growing_table,
                                                            monkeypatch):
    """200 deferred triggers on 200 tables of a bucket, polled by the remote workers' threads:
    an idle poll is one LIST a table, and each table's new commit reaches its trigger at that
    table's next poll (one more GET: the commit, for its time). Requests counted at the
    server's door; the clock moves by hand, so the counts are exact."""
    from hand_clock import hand_clocked_registry, subscribed, turns
    from moto_s3 import put_tree

    poll, count = 1.0, 200
    with fleet_on_s3(s3_options, growing_table, monkeypatch, count, poll) as fleet:
        requests = fleet.proxy.requests
        fleet.template.append()  # version 1, then put into every table between two polls

        async def scenario():
            with hand_clocked_registry() as (clock, registry):
                waiting = [asyncio.ensure_future(anext(trigger.run()))
                           for trigger in fleet.triggers]
                await subscribed(registry, tables=count, subscribers=count)
                requests.clear()
                await turns(clock, 2 * poll)
                idle = dict(requests)
                for uri in fleet.uris:
                    put_tree(fleet.template.uri, uri.removeprefix(f"s3://{fleet.bucket}/"),
                             fleet.bucket)
                requests.clear()
                await turns(clock, poll)
                found = dict(requests)
                events = await asyncio.wait_for(asyncio.gather(*waiting), 60)
            return idle, found, [event.payload for event in events]

        idle, found, payloads = asyncio.run(scenario())
    assert idle == {"GET": 2 * count}  # two polls of each table: one LIST each
    assert found == {"GET": 2 * count}  # the LIST that finds version 1, and its commit's GET
    assert {(p["status"], p["start_version"], p["end_version"]) for p in payloads} == {
        ("success", 1, 1)}


def test_a_turn_of_remote_polls_waits_on_the_network_once(s3_options, growing_table,
                                                          monkeypatch):
    """64 tables on S3, each request answered 0.5 s late: a turn that polls them all takes
    about one latency, not one a table. Eight threads listing one table at a time took at
    least eight (64 tables on 8 threads); each thread now keeps up to 16 listings in flight."""
    from hand_clock import hand_clocked_registry, subscribed

    poll, count, latency = 1.0, 64, 0.5
    with fleet_on_s3(s3_options, growing_table, monkeypatch, count, poll) as fleet:

        async def scenario():
            with hand_clocked_registry() as (clock, registry):
                waiting = [asyncio.ensure_future(anext(trigger.run()))
                           for trigger in fleet.triggers]
                await subscribed(registry, tables=count, subscribers=count)
                fleet.proxy.requests.clear()
                fleet.proxy.latency = latency  # the triggers' own first checks were quick
                started = time.monotonic()
                clock.advance(poll)  # one turn of every slot: each table's poll, all due
                took = time.monotonic() - started
                for waiter in waiting:
                    waiter.cancel()
                await asyncio.gather(*waiting, return_exceptions=True)
            return took

        took = asyncio.run(scenario())
        assert fleet.proxy.requests == {"GET": count}  # one LIST a table, as before
    assert took < 4 * latency, f"a turn of {count} remote polls took {took:.2f} s"
