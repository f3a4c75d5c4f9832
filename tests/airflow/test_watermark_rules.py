"""The start-version policy and the store factory: the rules, without a metadata DB."""

from __future__ import annotations

import json
import re

import pytest

from airflow_provider_delta.errors import InvalidParameterError, WatermarkError
from airflow_provider_delta.watermarks import (
    AssetStateWatermarkStore,
    VariableWatermarkStore,
    Watermark,
    XComWatermarkStore,
    LoadStart,
    make_watermark_store,
    resolve_load_start,
    validate_initial,
    watermark_for_table,
)

URI = "s3://bucket/orders"


def start(watermark=None, **kwargs):
    """The policy for a table with id "t1" at version 9, unless told otherwise."""
    stored = None if watermark is None else Watermark(watermark, "t1")
    return resolve_load_start(stored, **{"table_id": "t1", "latest": 9, "initial": "snapshot",
                                         "table_uri": URI, **kwargs})


@pytest.mark.parametrize(
    ("watermark", "initial", "expected"),
    [
        (4, "latest", LoadStart("changes", 5)),  # a watermark wins over `initial`
        (4, "snapshot", LoadStart("changes", 5)),
        (9, "earliest", LoadStart("changes", 10)),  # caught up: the next version to wait for
        (None, "snapshot", LoadStart("snapshot", 9)),  # Delta's default: snapshot, then changes
        (None, "latest", LoadStart("changes", 10)),  # the current snapshot counts as done
        (None, "earliest", LoadStart("changes", 0)),
        (None, 3, LoadStart("changes", 3)),
        (None, 12, LoadStart("changes", 12)),  # an explicit start beyond the head waits for it
    ],
)
def test_start_version_rules(watermark, initial, expected):
    assert start(watermark, initial=initial) == expected


@pytest.mark.parametrize(("held", "initial", "expected"), [
    (6, "snapshot", LoadStart("changes", 7)),  # the snapshot at 6 was committed: go on after it
    (9, "snapshot", LoadStart("changes", 10)),
    (None, "snapshot", LoadStart("snapshot", 9)),
    (6, "latest", LoadStart("changes", 7)),  # a lost watermark: not after `latest` again
    (None, "latest", LoadStart("changes", 10)),
    (6, "earliest", LoadStart("changes", 0)),  # changes: the sink skips its versions itself
])
def test_what_the_sink_holds_replaces_a_second_start_from_initial(held, initial, expected):
    asked = []
    found = start(initial=initial, sink_held_through=lambda first: asked.append(first) or held)
    assert found == expected
    assert asked == {"snapshot": [0], "latest": [None]}.get(initial, [])


def test_a_sink_holding_more_than_the_table_has_is_an_error():
    with pytest.raises(WatermarkError, match="holds this task's load of version 12.*recreated"):
        start(initial="latest", sink_held_through=lambda first: 12)


def test_the_sink_is_not_asked_when_a_watermark_decides():
    def unreachable(first):
        raise AssertionError("the sink was asked")

    assert start(4, sink_held_through=unreachable) == LoadStart("changes", 5)


def test_initial_latest_uses_the_version_it_is_given():
    assert start(initial="latest", latest_for_initial=lambda latest: 6) == LoadStart("changes", 7)


def test_watermark_above_latest_names_table_versions_and_fix():
    with pytest.raises(WatermarkError) as caught:
        start(12, latest=3)
    message = str(caught.value)
    assert URI in message and "12" in message and "3" in message
    assert "recreated" in message and "reset_if_ahead" in message
    assert caught.value.permanent and caught.value.version == 12


def test_reset_if_ahead_restarts_with_initial():
    assert start(12, initial="earliest", latest=3, reset_if_ahead=True) == LoadStart("changes", 0)
    # "latest" after a reset is the version the sensor began waiting at, not the head of now.
    assert start(12, initial="latest", latest=3, reset_if_ahead=True,
                 latest_for_initial=lambda latest: 2) == LoadStart("changes", 3)


def test_watermark_of_another_table_restarts_with_initial_on_reset():
    stored = Watermark(4, "old-id")
    with pytest.raises(WatermarkError, match="old-id"):
        resolve_load_start(stored, table_id="t1", latest=9, initial="snapshot", table_uri=URI)
    assert resolve_load_start(stored, table_id="t1", latest=9, initial="snapshot", table_uri=URI,
                              reset_if_ahead=True) == LoadStart("snapshot", 9)


@pytest.mark.parametrize("bad", ["newest", "Snapshot", -1, 1.5, True, None])
def test_bad_initial_is_refused(bad):
    with pytest.raises(InvalidParameterError,
                       match="^" + re.escape(f"load: {URI}: initial={bad!r} is not")):
        validate_initial(bad, URI, "load")


def test_factory_builds_each_kind():
    assert isinstance(make_watermark_store("xcom", key="k", table_uri=URI, task_id="load"),
                      XComWatermarkStore)
    assert isinstance(make_watermark_store("variable", key="k", table_uri=URI),
                      VariableWatermarkStore)
    assert isinstance(make_watermark_store("asset_state", key="k", table_uri=URI),
                      AssetStateWatermarkStore)


def test_unknown_store_kind_lists_the_valid_ones():
    with pytest.raises(WatermarkError, match="unknown watermark store 'redis'.*xcom, variable, asset_state"):
        make_watermark_store("redis", key="k", table_uri=URI)


def test_empty_key_is_refused():
    with pytest.raises(WatermarkError, match="non-empty key"):
        make_watermark_store("variable", key="", table_uri=URI)


@pytest.mark.parametrize("raw", ["7", -2, 3.0, False, {"v": 1}, {"version": -1, "table_id": "a"},
                                 {"version": 1, "table_id": 5}, {"table_id": "a"}, [1, "a"]])
def test_malformed_stored_value_is_an_error(raw):
    store = make_watermark_store("variable", key="wm", table_uri=URI)
    with pytest.raises(WatermarkError, match="not a table version"):
        store._checked(raw, "somewhere")


def test_store_refuses_to_write_a_non_version():
    store = make_watermark_store("variable", key="wm", table_uri=URI)
    with pytest.raises(WatermarkError, match="refusing to store"):
        store.write({}, -1)


@pytest.mark.parametrize("asset", [None, "not_an_inlet"])
def test_asset_state_store_explains_an_unreachable_asset(asset):
    from airflow.sdk.execution_time.context import AssetStateStoreAccessors

    store = make_watermark_store("asset_state", key="wm", table_uri=URI, asset=asset)
    context = {"asset_state_store": AssetStateStoreAccessors(inlets=[])}
    with pytest.raises(WatermarkError, match="Add the asset to the task's inlets or outlets"):
        store.read(context)


def test_asset_state_store_needs_airflow_3_3():
    store = make_watermark_store("asset_state", key="wm", table_uri=URI)
    with pytest.raises(WatermarkError, match="Airflow >= 3.3"):
        store.read({})


@pytest.mark.parametrize(("raw", "expected"), [
    (7, Watermark(7, None)),  # written before table ids were recorded: still read
    ({"version": 7, "table_id": "a1"}, Watermark(7, "a1")),
    ({"version": 0}, Watermark(0, None)),
])
def test_stored_value_formats(raw, expected):
    store = make_watermark_store("variable", key="wm", table_uri=URI)
    assert store._checked(raw, "somewhere") == expected


@pytest.mark.parametrize(("stored", "expected"), [
    ({URI: 4}, Watermark(4, None)),
    ({URI: {"version": 4, "table_id": "a1"}, "s3://bucket/other": 9}, Watermark(4, "a1")),
    ({"s3://bucket/other": 9}, None),
])
def test_variable_store_reads_both_formats(monkeypatch, stored, expected):
    # An environment variable is a real Airflow Variable (secrets backend), no DB needed.
    monkeypatch.setenv("AIRFLOW_VAR_WM", json.dumps(stored))
    store = make_watermark_store("variable", key="wm", table_uri=URI)
    assert store.read_watermark({}) == expected
    assert store.read({}) == (expected and expected.version)


@pytest.mark.parametrize(("stored", "current"), [
    (Watermark(4, None), "b2"),  # no id recorded: not checked
    (Watermark(4, "b2"), "b2"),
    (Watermark(4, "a1"), None),  # current id unknown: not checked
])
def test_watermark_of_the_same_table_is_kept(stored, current):
    assert watermark_for_table(stored, current, table_uri=URI) == 4


def test_watermark_of_another_table_names_both_ids_and_the_fix():
    with pytest.raises(WatermarkError) as caught:
        watermark_for_table(Watermark(4, "a1"), "b2", table_uri=URI)
    message = str(caught.value)
    assert URI in message and "a1" in message and "b2" in message
    assert "recreated" in message and "reset_if_ahead=True" in message
    assert "clear the watermark" in message
    assert caught.value.permanent and caught.value.version == 4


def test_watermark_of_another_table_is_dropped_with_reset_if_ahead():
    assert watermark_for_table(Watermark(4, "a1"), "b2", table_uri=URI, reset_if_ahead=True) is None
    assert watermark_for_table(None, "b2", table_uri=URI) is None
