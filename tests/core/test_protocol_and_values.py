"""Reader-feature refusals, column-mapping renames and partition value typing."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from airflow_provider_delta.core import latest_version, plan_changes, plan_snapshot
from airflow_provider_delta.core.actions import parse_partition_value
from airflow_provider_delta.core.protocol import is_type_widening
from airflow_provider_delta.errors import SchemaChangeError, UnsupportedFeatureError
from tests.conftest import NAME_MAPPING_PROTOCOL, upgraded_to_name_mapping, widened_schema
from tests.core.conftest import commit_actions, data_change_adds


def _commit(table: str, actions: list[dict]) -> int:
    """Append a commit holding ``actions`` to the table's log; returns its version."""
    version = latest_version(table) + 1
    lines = [json.dumps({"commitInfo": {"timestamp": 1_700_000_000_000, "operation": "TEST"}})]
    lines += [json.dumps(action) for action in actions]
    path = Path(table) / "_delta_log" / f"{version:020d}.json"
    path.write_text("\n".join(lines) + "\n")
    return version


def _metadata(table: str, version: int = 0) -> dict:
    return next(a["metaData"] for a in commit_actions(table, version) if "metaData" in a)


@pytest.mark.parametrize("feature", ["futureFeature", "catalogManaged", "catalogOwned-preview"])
def test_protocol_upgrade_inside_the_range_is_refused_naming_version_and_feature(
        shared_table, feature):
    path = shared_table("delta-golden/snapshot-data1")
    version = _commit(path, [{"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                                           "readerFeatures": [feature],
                                           "writerFeatures": [feature]}}])
    with pytest.raises(UnsupportedFeatureError) as caught:
        plan_changes(path, 0)
    assert caught.value.feature == feature and caught.value.version == version
    before = plan_changes(path, 0, version - 1)  # the range before it still plans
    assert [f.path for f in before] == data_change_adds(path, 0) + data_change_adds(path, 1)
    with pytest.raises(UnsupportedFeatureError):
        plan_snapshot(path)


def test_supported_reader_features_are_accepted(shared_table):
    path = shared_table("delta-golden/snapshot-data1")
    features = ["columnMapping", "deletionVectors", "timestampNtz", "v2Checkpoint",
                "vacuumProtocolCheck", "domainMetadata", "rowTracking"]
    _commit(path, [{"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                                 "readerFeatures": features, "writerFeatures": features}}])
    plan = plan_changes(path, 0)
    assert plan.metadata.reader_features == tuple(features)
    assert plan.metadata.min_reader_version == 3


def test_variant_type_feature_of_deltalake_deletion_vector_tables_is_planned(tmp_path):
    """deltalake lists variantType on every table it creates with deletion vectors."""
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"id": [1, 2]}),
                    configuration={"delta.enableDeletionVectors": "true"})
    write_deltalake(path, pa.table({"id": [3]}), mode="append")
    changes = plan_changes(path, 0)
    assert "variantType" in changes.metadata.reader_features
    assert [f.path for f in changes] == data_change_adds(path, 0) + data_change_adds(path, 1)
    assert sorted(f.path for f in plan_snapshot(path)) == sorted(f.path for f in changes)


@pytest.mark.parametrize("old, new, allowed", [
    ("byte", "short", True), ("short", "integer", True), ("integer", "long", True),
    ("byte", "long", True), ("float", "double", True), ("integer", "double", True),
    ("date", "timestamp_ntz", True), ("decimal(10,2)", "decimal(20,2)", True),
    ("decimal(10,2)", "decimal(20,5)", True), ("decimal(10,2)", "decimal(12,4)", True),
    ("integer", "decimal(10,0)", True), ("byte", "decimal(11,1)", True),
    ("long", "decimal(21,1)", True),
    ("long", "integer", False), ("long", "double", False), ("double", "float", False),
    ("decimal(10,2)", "decimal(11,4)", False), ("decimal(10,2)", "decimal(12,1)", False),
    ("integer", "decimal(10,1)", False), ("long", "decimal(19,0)", False),
    ("integer", "string", False), ("timestamp_ntz", "date", False),
    ("date", "timestamp", False), ("timestamp", "timestamp_ntz", False),
])
def test_type_widening_rules(old, new, allowed):
    assert is_type_widening(old, new) is allowed


_WIDENING_PROTOCOL = {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                                   "readerFeatures": ["typeWidening"],
                                   "writerFeatures": ["typeWidening"]}}


def test_type_widening_inside_a_range_is_allowed_other_type_changes_are_not(tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({
        "id": pa.array([1], pa.int32()),
        "s": pa.array([{"a": 1}], pa.struct([("a", pa.int16())])),
        "m": pa.array([[(1, 1.5)]], pa.map_(pa.int32(), pa.float32())),
    }))
    metadata = _metadata(path)
    schema = json.loads(metadata["schemaString"])
    schema = widened_schema(schema, [(["id"], "long"), (["s", "a"], "integer"),
                                     (["m", "key"], "long"), (["m", "value"], "double")], 1)
    widened = _commit(path, [_WIDENING_PROTOCOL,
                             {"metaData": dict(metadata, schemaString=json.dumps(schema))}])
    plan = plan_changes(path, 0)
    assert plan.metadata.schema == schema and set(plan.metadata_changes) == {0, widened}
    narrowed = _commit(path, [{"metaData": dict(metadata, schemaString=json.dumps(
        widened_schema(schema, [(["s", "a"], "short")], 2)))}])
    with pytest.raises(SchemaChangeError, match="'s.a' changed type integer -> short") as caught:
        plan_changes(path, 0)
    assert caught.value.version == narrowed
    assert path in str(caught.value) and f"ends at version {narrowed - 1}" in str(caught.value)


def test_reader_version_above_three_is_refused(shared_table):
    path = shared_table("delta-golden/snapshot-data1")
    _commit(path, [{"protocol": {"minReaderVersion": 4, "minWriterVersion": 7}}])
    with pytest.raises(UnsupportedFeatureError, match="minReaderVersion=4"):
        plan_changes(path, 1)


def test_column_mapping_rename_is_non_additive(shared_table):
    path = shared_table("delta-golden/table-with-columnmapping-mode-name")
    metadata = _metadata(path)
    schema = json.loads(metadata["schemaString"])
    old_name = schema["fields"][0]["name"]
    schema["fields"][0]["name"] = old_name + "_renamed"  # same physical name, new logical one
    version = _commit(path, [{"metaData": dict(metadata, schemaString=json.dumps(schema))}])
    with pytest.raises(SchemaChangeError, match=old_name) as caught:
        plan_changes(path, 0)
    assert caught.value.version == version


def _upgrade_commit(path: str, meta_action: dict) -> int:
    return _commit(path, [NAME_MAPPING_PROTOCOL, {"metaData": meta_action}])


def _deltalake_table(path: str) -> None:
    table = pa.table({"id": [1], "info": pa.array([{"a": 1}], pa.struct([("a", pa.int64())])),
                      "region": ["eu"]})
    write_deltalake(path, table, partition_by=["region"])
    write_deltalake(path, table, partition_by=["region"], mode="append")


def test_upgrade_to_name_column_mapping_inside_a_range_is_allowed(tmp_path):
    """DeltaSourceColumnMappingSuite, "allowed workflows - upgrade to name mode"."""
    path = str(tmp_path / "t")
    _deltalake_table(path)
    upgrade = _upgrade_commit(path, upgraded_to_name_mapping(_metadata(path)))
    plan = plan_changes(path, 0)
    assert plan.metadata.column_mapping_mode == "name"
    assert sorted(plan.metadata_changes) == [0, upgrade]
    assert [f.path for f in plan] == data_change_adds(path, 0) + data_change_adds(path, 1)


@pytest.mark.parametrize("change, detail", [
    ("new physical name", "column 'info.a' maps to a different physical column"),
    ("id mode", "column mapping mode none -> id"),
])
def test_column_mapping_upgrades_delta_does_not_read_across_are_refused(tmp_path, change,
                                                                        detail):
    path = str(tmp_path / "t")
    _deltalake_table(path)
    upgraded = upgraded_to_name_mapping(_metadata(path))
    if change == "id mode":
        upgraded["configuration"]["delta.columnMapping.mode"] = "id"
    else:  # a physical name the files written before the upgrade do not use
        upgraded["schemaString"] = upgraded["schemaString"].replace(
            '"delta.columnMapping.physicalName": "a"', '"delta.columnMapping.physicalName": "col-a"')
    version = _upgrade_commit(path, upgraded)
    with pytest.raises(SchemaChangeError) as caught:
        plan_changes(path, 0)
    assert caught.value.version == version and detail in str(caught.value)


def test_column_mapping_partition_values_are_keyed_by_logical_name(shared_table):
    plan = plan_snapshot(shared_table("delta-rs/table_with_column_mapping"))
    assert {tuple(f.partition_values) for f in plan} == {("Company Very Short",)}
    assert {f.partition_values["Company Very Short"] for f in plan} >= {"BMS", "BME"}


UTC = dt.timezone.utc


@pytest.mark.parametrize("raw, type_name, expected", [
    ("12", "integer", 12), ("-3", "byte", -3), ("9000000000", "long", 9_000_000_000),
    ("1.5", "double", 1.5), ("NaN", "float", "nan"), ("true", "boolean", True),
    ("false", "boolean", False), ("-2342342.23423", "decimal(12,5)", Decimal("-2342342.23423")),
    ("2021-09-08", "date", dt.date(2021, 9, 8)),
    ("2021-09-08 11:11:11", "timestamp", dt.datetime(2021, 9, 8, 11, 11, 11, tzinfo=UTC)),
    ("2021-09-08 11:11:11.5", "timestamp", dt.datetime(2021, 9, 8, 11, 11, 11, 500000, tzinfo=UTC)),
    ("1970-01-01T00:00:00.123456Z", "timestamp", dt.datetime(1970, 1, 1, 0, 0, 0, 123456, tzinfo=UTC)),
    ("2021-09-08T13:11:11+02:00", "timestamp", dt.datetime(2021, 9, 8, 11, 11, 11, tzinfo=UTC)),
    ("2013-07-05 17:01:00.123456789", "timestamp_ntz", dt.datetime(2013, 7, 5, 17, 1, 0, 123456)),
    ("\u0001\u0002", "binary", b"\x01\x02"), ("null", "string", "null"), ("a b", "string", "a b"),
    (None, "integer", None), ("", "date", None), ("", "string", None),
])
def test_partition_value_serialization(raw, type_name, expected):
    value = parse_partition_value(raw, type_name)
    if expected == "nan":
        assert value != value
    else:
        assert value == expected and type(value) is type(expected)
    if type_name == "timestamp_ntz":
        assert value.tzinfo is None
