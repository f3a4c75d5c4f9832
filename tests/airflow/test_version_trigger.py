"""DeltaVersionTrigger on real local tables: events, timeouts, errors, edges, serialization."""

from __future__ import annotations

import asyncio
import time

import pytest

from airflow_provider_delta.core import commit_timestamp
from airflow_provider_delta.triggers import DeltaVersionTrigger
from airflow_provider_delta.triggers.delta_version import _backoff
from airflow_provider_delta.watermarks import LoadStart


def first_event(trigger: DeltaVersionTrigger, *, commit_later=None, after: float = 0.3):
    """Run the trigger to its first event; optionally commit to the table meanwhile."""

    async def scenario():
        waiting = asyncio.ensure_future(anext(trigger.run()))
        if commit_later is not None:
            await asyncio.sleep(after)
            assert not waiting.done(), "fired before the commit it waits for"
            await asyncio.to_thread(commit_later)
        return await asyncio.wait_for(waiting, timeout=30)

    return asyncio.run(scenario()).payload


def test_serialize_round_trips():
    trigger = DeltaVersionTrigger(
        table_uri="s3://b/t", start_version=7, initial=3, min_new_versions=2, poll_interval=5,
        delta_conn_id="lake", timeout_at=123.5, fire_once=True, state_key="k", max_backoff=60,
    )
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_provider_delta.triggers.delta_version.DeltaVersionTrigger"
    assert DeltaVersionTrigger(**kwargs).serialize() == (classpath, kwargs)


def test_fires_at_once_when_versions_are_already_there(growing_table):
    table = growing_table(3)
    payload = first_event(DeltaVersionTrigger(table_uri=table.uri, start_version=1, fire_once=True))
    assert payload == {
        "status": "success", "table_uri": table.uri, "start_version": 1, "end_version": 2,
        "latest_commit_timestamp": commit_timestamp(table.uri, 2), "mode": "changes",
    }


def test_waits_for_a_new_commit(growing_table):
    table = growing_table(2)
    trigger = DeltaVersionTrigger(table_uri=table.uri, start_version=2, poll_interval=0.05,
                                  fire_once=True)
    payload = first_event(trigger, commit_later=table.append)
    assert (payload["status"], payload["start_version"], payload["end_version"]) == ("success", 2, 2)


def test_min_new_versions_waits_for_enough(growing_table):
    table = growing_table(1)
    table.append(1)
    trigger = DeltaVersionTrigger(table_uri=table.uri, start_version=1, min_new_versions=2,
                                  poll_interval=0.05, fire_once=True)
    payload = first_event(trigger, commit_later=table.append)
    assert (payload["start_version"], payload["end_version"]) == (1, 2)


def test_timeout_event(growing_table):
    table = growing_table(1)
    trigger = DeltaVersionTrigger(table_uri=table.uri, start_version=1, poll_interval=0.05,
                                  timeout_at=time.time() + 0.3, fire_once=True)
    started = time.monotonic()
    payload = first_event(trigger)
    assert payload["status"] == "timeout" and "version 1" in payload["message"]
    assert 0.25 < time.monotonic() - started < 5


def test_missing_table_ends_with_an_error_event(tmp_path):
    uri = str(tmp_path / "nothing-here")
    payload = first_event(DeltaVersionTrigger(table_uri=uri, start_version=0, fire_once=True))
    assert payload["status"] == "error" and "is not a Delta table" in payload["message"]
    assert uri in payload["message"]


def test_folder_without_delta_log_ends_with_an_error_event(tmp_path):
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "part-0.parquet").write_bytes(b"PAR1")
    payload = first_event(DeltaVersionTrigger(table_uri=str(tmp_path / "plain"), start_version=0,
                                              fire_once=True))
    assert payload["status"] == "error" and "_delta_log" in payload["message"]


def test_watcher_fires_once_per_new_range(growing_table):
    """An edge per range: nothing while idle, then one event per new range."""
    table = growing_table(2)  # versions 0..1 exist before watching: "latest" skips them
    trigger = DeltaVersionTrigger(table_uri=table.uri, initial="latest", poll_interval=0.05)

    async def scenario():
        events = trigger.run()
        pending = asyncio.ensure_future(anext(events))
        await asyncio.sleep(0.3)
        assert not pending.done(), "fired with no new commit"
        await asyncio.to_thread(table.append)
        first = (await asyncio.wait_for(pending, 30)).payload
        pending = asyncio.ensure_future(anext(events))
        await asyncio.sleep(0.3)
        assert not pending.done(), "fired twice for the same range"
        await asyncio.to_thread(table.append, 1)
        second = (await asyncio.wait_for(pending, 30)).payload
        await events.aclose()
        return first, second

    first, second = asyncio.run(scenario())
    assert (first["start_version"], first["end_version"]) == (2, 2)
    assert (second["start_version"], second["end_version"]) == (3, 3)


def test_watcher_announces_the_snapshot_first_by_default(growing_table):
    """The start policy of the sensor and the operator: without a watermark, the snapshot."""
    table = growing_table(2)
    trigger = DeltaVersionTrigger(table_uri=table.uri, poll_interval=0.05)

    async def scenario():
        events = trigger.run()
        snapshot = (await asyncio.wait_for(anext(events), 30)).payload
        await asyncio.to_thread(table.append)
        changes = (await asyncio.wait_for(anext(events), 30)).payload
        await events.aclose()
        return snapshot, changes

    snapshot, changes = asyncio.run(scenario())
    assert (snapshot["mode"], snapshot["start_version"], snapshot["end_version"]) == ("snapshot", 1, 1)
    assert (changes["mode"], changes["start_version"], changes["end_version"]) == ("changes", 2, 2)


def test_watcher_raises_on_permanent_errors(shared_table):
    trigger = DeltaVersionTrigger(table_uri=shared_table("delta-kernel/catalog-owned-preview"),
                                  poll_interval=0.05)
    with pytest.raises(Exception, match="catalog-managed"):
        asyncio.run(anext(trigger.run()))


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"min_new_versions": 0}, "min_new_versions"),
    ({"poll_interval": 0}, "poll_interval"),
    ({"initial": "newest"}, "initial="),
    ({"data_changes_only": "yes"}, "^/t: data_changes_only='yes' is not True or False"),
])
def test_bad_arguments(kwargs, message):
    with pytest.raises(Exception, match=message):
        DeltaVersionTrigger(table_uri="/t", **kwargs)


def test_backoff_after_transient_errors_is_bounded():
    trigger = DeltaVersionTrigger(table_uri="/t", poll_interval=2, max_backoff=30)
    assert [_backoff(trigger, failures) for failures in range(6)] == [2, 4, 8, 16, 30, 30]
    trigger.timeout_at = time.time() + 5
    assert _backoff(trigger, 4) <= 5  # never sleeps past the sensor's timeout


def test_catalog_managed_table_ends_with_an_error_event(shared_table):
    uri = shared_table("delta-kernel/catalog-owned-preview")
    payload = first_event(DeltaVersionTrigger(table_uri=uri, start_version=1, fire_once=True))
    assert payload["status"] == "error" and "catalog-managed" in payload["message"]


def test_start_up_retries_transient_errors_and_gives_up_on_permanent_ones():
    from airflow_provider_delta.errors import StorageAccessError, TransientStorageError

    trigger = DeltaVersionTrigger(table_uri="s3://b/t", poll_interval=0.01)
    outcomes = [TransientStorageError("s3://b/t", "503 Slow Down"), LoadStart("changes", 7)]

    async def flaky_step(probe):
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert asyncio.run(trigger._retrying(flaky_step, None)) == LoadStart("changes", 7)
    assert outcomes == []

    async def refused(probe):
        raise StorageAccessError("s3://b/t", "403 Forbidden", "the connection's keys")

    with pytest.raises(StorageAccessError):
        asyncio.run(trigger._retrying(refused, None))
