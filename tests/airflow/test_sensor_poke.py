"""DeltaVersionSensor's poke logic and execute_complete, without a metadata DB.

The watermark comes from a store that keeps it in memory: an implementation of the
provider's own WatermarkStore interface (the Airflow-backed stores are exercised in
test_dag_runs.py through real DAG runs).
"""

from __future__ import annotations

import pytest
from airflow.sdk import PokeReturnValue
from airflow.sdk.exceptions import AirflowSensorTimeout, TaskDeferred

from airflow_provider_delta.errors import (
    DeltaProviderError, InvalidParameterError, TableNotFoundError, WatermarkError,
)
from airflow_provider_delta.sensors import DeltaVersionSensor
from airflow_provider_delta.triggers import DeltaVersionTrigger
from airflow_provider_delta.watermarks import WatermarkStore


class MemoryStore(WatermarkStore):
    def __init__(self, table_uri: str, value: object = None):
        super().__init__(key="wm", table_uri=table_uri)
        self.value = value

    def where(self, context):
        return "memory"

    def _get(self, context):
        return self.value

    def _put(self, context, value):
        self.value = value


def sensor_on(table_uri: str, watermark: object = None, **kwargs) -> DeltaVersionSensor:
    sensor = DeltaVersionSensor(task_id="sense", table_uri=table_uri,
                                watermark_store="variable", **kwargs)
    sensor.store = MemoryStore(table_uri, watermark)
    return sensor


def test_new_versions_after_the_watermark(growing_table):
    table = growing_table(4)
    result = sensor_on(table.uri, watermark=1).poke({})
    assert isinstance(result, PokeReturnValue) and result.is_done
    assert result.xcom_value["table_uri"] == table.uri
    assert (result.xcom_value["start_version"], result.xcom_value["end_version"]) == (2, 3)
    assert result.xcom_value["latest_commit_timestamp"] > 1_600_000_000_000


def test_nothing_new_keeps_waiting(growing_table):
    table = growing_table(3)
    assert sensor_on(table.uri, watermark=2).poke({}) is False


def test_min_new_versions(growing_table):
    table = growing_table(3)
    sensor = sensor_on(table.uri, watermark=0, min_new_versions=3)
    assert sensor.poke({}) is False
    table.append()
    assert sensor.poke({}).xcom_value["end_version"] == 3


def test_initial_latest_waits_for_the_next_commit_and_stays_put(growing_table):
    table = growing_table(3)
    sensor = sensor_on(table.uri, initial="latest")
    assert sensor.poke({}) is False
    table.append(2)
    found = sensor.poke({}).xcom_value
    assert (found["start_version"], found["end_version"]) == (3, 4)


def test_without_a_watermark_the_default_is_the_snapshot_at_once(growing_table):
    """As the operator's default: rows that exist before the first run are loaded too."""
    table = growing_table(3)
    found = sensor_on(table.uri, min_new_versions=5).poke({}).xcom_value
    assert (found["mode"], found["start_version"], found["end_version"]) == ("snapshot", 2, 2)
    found = sensor_on(table.uri, watermark=0).poke({}).xcom_value
    assert (found["mode"], found["start_version"], found["end_version"]) == ("changes", 1, 2)


def test_reset_watermark_with_initial_latest_stays_put(growing_table):
    """A watermark above latest, reset: "latest" is the version of the first poke, not of now."""
    table = growing_table(3)
    sensor = sensor_on(table.uri, watermark=7, initial="latest", reset_if_ahead=True)
    assert sensor.poke({}) is False
    table.append(2)
    found = sensor.poke({}).xcom_value
    assert (found["start_version"], found["end_version"]) == (3, 4)


def test_initial_earliest_and_explicit(growing_table):
    table = growing_table(3)
    assert sensor_on(table.uri, initial="earliest").poke({}).xcom_value["start_version"] == 0
    assert sensor_on(table.uri, initial=2).poke({}).xcom_value["start_version"] == 2
    assert sensor_on(table.uri, initial=5).poke({}) is False


def test_watermark_above_latest_fails(growing_table):
    table = growing_table(2)
    with pytest.raises(WatermarkError, match="recreated or replaced"):
        sensor_on(table.uri, watermark=7).poke({})


def test_watermark_above_latest_with_reset(growing_table):
    table = growing_table(2)
    found = sensor_on(table.uri, watermark=7, initial="earliest", reset_if_ahead=True).poke({})
    assert found.xcom_value["start_version"] == 0


def test_malformed_watermark_fails(growing_table):
    table = growing_table(1)
    with pytest.raises(WatermarkError, match="not a table version"):
        sensor_on(table.uri, watermark="seven").poke({})


def test_missing_table_fails_clearly(tmp_path):
    uri = str(tmp_path / "missing")
    with pytest.raises(TableNotFoundError, match="is not a Delta table"):
        sensor_on(uri, watermark=0).poke({})


def test_constructor_validation():
    with pytest.raises(InvalidParameterError, match="watermark_store='redis' is unknown"):
        DeltaVersionSensor(task_id="s", table_uri="/t", watermark_store="redis")
    with pytest.raises(InvalidParameterError, match="needs watermark_task_id"):
        DeltaVersionSensor(task_id="s", table_uri="/t", watermark_store="xcom")
    with pytest.raises(InvalidParameterError, match="min_new_versions"):
        DeltaVersionSensor(task_id="s", table_uri="/t", watermark_store="variable", min_new_versions=0)
    with pytest.raises(InvalidParameterError, match="/t: min_new_versions=0 is below 1"):
        DeltaVersionTrigger(table_uri="/t", start_version=1, min_new_versions=0)
    with pytest.raises(InvalidParameterError, match="/t: poll_interval=0 is not above 0"):
        DeltaVersionTrigger(table_uri="/t", start_version=1, poll_interval=0)
    with pytest.raises(InvalidParameterError, match="^s: /t: initial='head' is not a start"):
        DeltaVersionSensor(task_id="s", table_uri="/t", watermark_store="variable", initial="head")


def test_deferrable_defers_from_the_first_unprocessed_version(growing_table):
    table = growing_table(3)
    sensor = sensor_on(table.uri, watermark=2, deferrable=True, timeout=60, poke_interval=7)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    trigger = deferred.value.trigger
    _, kwargs = trigger.serialize()
    assert kwargs["start_version"] == 3 and kwargs["fire_once"] and kwargs["poll_interval"] == 7
    assert deferred.value.method_name == "execute_complete"
    assert deferred.value.timeout.total_seconds() == 60


def test_deferrable_returns_at_once_when_versions_exist(growing_table):
    table = growing_table(3)
    found = sensor_on(table.uri, watermark=0, deferrable=True).execute({})
    assert (found["start_version"], found["end_version"]) == (1, 2)


def test_execute_complete_events():
    sensor = sensor_on("/t")
    success = {"status": "success", "table_uri": "/t", "start_version": 3, "end_version": 5,
               "latest_commit_timestamp": 1700000000000}
    expected = {**{k: v for k, v in success.items() if k != "status"}, "mode": "changes"}
    assert sensor.execute_complete({}, success) == expected
    with pytest.raises(AirflowSensorTimeout, match="before the sensor's timeout"):
        sensor.execute_complete({}, {"status": "timeout", "message": "/t: no 1 new version(s) from "
                                     "version 3 before the sensor's timeout."})
    with pytest.raises(DeltaProviderError, match="is not a Delta table"):
        sensor.execute_complete({}, {"status": "error", "message": "/t is not a Delta table"})


def test_latest_commit_timestamp_is_the_in_commit_timestamp_where_enabled(tmp_path):
    """With in-commit timestamps on, the commit's own timestamp wins over the file's mtime."""
    import json
    import os

    from airflow_provider_delta.core import commit_timestamp

    log = tmp_path / "ict" / "_delta_log"
    log.mkdir(parents=True)
    schema = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]}
    actions = [
        {"commitInfo": {"inCommitTimestamp": 1_700_000_000_123, "timestamp": 1_700_000_000_123,
                        "operation": "CREATE TABLE"}},
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 7,
                      "writerFeatures": ["inCommitTimestamp"]}},
        {"metaData": {"id": "ict-table", "format": {"provider": "parquet", "options": {}},
                      "schemaString": json.dumps(schema), "partitionColumns": [],
                      "configuration": {"delta.enableInCommitTimestamps": "true",
                                        "delta.inCommitTimestampEnablementVersion": "0"},
                      "createdTime": 1_700_000_000_000}},
    ]
    commit = log / f"{0:020d}.json"
    commit.write_text("\n".join(json.dumps(a) for a in actions) + "\n")
    os.utime(commit, (1_600_000_000, 1_600_000_000))  # a file time that must not be used
    found = sensor_on(str(tmp_path / "ict"), initial="earliest").poke({}).xcom_value
    assert found["latest_commit_timestamp"] == 1_700_000_000_123
    assert found["latest_commit_timestamp"] == commit_timestamp(str(tmp_path / "ict"), 0)


@pytest.mark.parametrize(("name", "feature"), [
    ("delta-kernel/catalog-owned-preview", "catalogManaged"),  # newest commits not in the log
    ("delta-golden/deltalog-invalid-protocol-version", "minReaderVersion=99"),
])
def test_tables_this_provider_cannot_read_are_refused(shared_table, name, feature):
    from airflow_provider_delta.errors import UnsupportedFeatureError

    uri = shared_table(name)
    with pytest.raises(UnsupportedFeatureError, match=feature) as caught:
        sensor_on(uri, initial="earliest").poke({})
    assert caught.value.permanent and uri in str(caught.value)


def test_log_gap_is_refused(shared_table):
    from airflow_provider_delta.errors import LogGapError

    with pytest.raises(LogGapError, match="commit\\(s\\) 1 are missing"):
        sensor_on(shared_table("delta-golden/versions-not-contiguous"), initial="earliest").poke({})


def test_shared_append_table_senses_its_last_versions(shared_table):
    uri = shared_table("delta-kernel/basic-with-checkpoint")
    found = sensor_on(uri, watermark=7).poke({}).xcom_value
    assert (found["start_version"], found["end_version"]) == (8, 14)


def test_recreated_table_is_told_by_its_id(growing_table, tmp_path, monkeypatch):
    """A table dropped and recreated at the same path, grown past the old watermark."""
    import json
    import shutil

    from deltalake import DeltaTable

    old = growing_table(4, "orders")  # versions 0..3
    old_id = DeltaTable(old.uri).metadata().id
    watermark = {old.uri: {"version": 3, "table_id": old_id}}
    monkeypatch.setenv("AIRFLOW_VAR_ORDERS_WM", json.dumps(watermark))  # a real Variable, no DB
    shutil.rmtree(old.uri)
    new = growing_table(6, "orders")  # versions 0..5 of another table at the same path
    new_id = DeltaTable(new.uri).metadata().id
    assert new_id != old_id

    def sensor(**kwargs):
        return DeltaVersionSensor(task_id="sense", table_uri=new.uri, watermark_store="variable",
                                  watermark_key="orders_wm", **kwargs)

    with pytest.raises(WatermarkError) as caught:
        sensor().poke({})
    message = str(caught.value)
    assert old_id in message and new_id in message and new.uri in message
    assert "reset_if_ahead=True" in message
    found = sensor(initial="earliest", reset_if_ahead=True).poke({}).xcom_value
    assert (found["start_version"], found["end_version"]) == (0, 5)
    # A watermark written for the new table is read on as before.
    monkeypatch.setenv("AIRFLOW_VAR_ORDERS_WM", json.dumps({new.uri: {"version": 3,
                                                                       "table_id": new_id}}))
    found = sensor().poke({}).xcom_value
    assert (found["start_version"], found["end_version"]) == (4, 5)
