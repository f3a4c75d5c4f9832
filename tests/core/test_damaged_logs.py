"""Damaged log files: named precisely (table, version, file, what is wrong), with Delta's
fallbacks where the log still allows them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from deltalake import DeltaTable

from airflow_provider_delta.core import latest_version, plan_changes, plan_snapshot
from airflow_provider_delta.core.delta_log import TableLocation
from airflow_provider_delta.core.probe import VersionProbe
from airflow_provider_delta.core.replay import split_commit
from airflow_provider_delta.errors import DamagedLogFileError
from tests.core.conftest import data_change_adds
from tests.core.test_log_gaps import appended_table


def log_file(table: str, name: str) -> Path:
    return Path(table) / "_delta_log" / name


def commit_file(table: str, version: int) -> Path:
    return log_file(table, f"{version:020d}.json")


def checkpoint_file(table: str, version: int) -> Path:
    return log_file(table, f"{version:020d}.checkpoint.parquet")


def all_adds(table: str, versions: range) -> list[str]:
    return sorted(path for v in versions for path in data_change_adds(table, v))


def assert_names(error: DamagedLogFileError, table: str, version: int, name: str, *words: str):
    message = str(error)
    assert error.version == version and error.file_name == name
    assert table in message and f"_delta_log/{name} (version {version}) is damaged" in message
    for word in words:
        assert word in message


@pytest.mark.parametrize(("damage", "line", "cut"), [
    ("torn", "line 2", lambda raw: raw[:-40]),  # the last line cut short by a broken write
    ("garbage", "line 1", lambda raw: b"\x00\x17 not json\n" + raw),
])
def test_torn_or_garbage_commit_line(tmp_path, damage, line, cut):
    path = appended_table(tmp_path, 3)
    commit = commit_file(path, 1)
    commit.write_bytes(cut(commit.read_bytes()))
    with pytest.raises(DamagedLogFileError) as caught:
        plan_changes(path, 0, 2)
    assert_names(caught.value, path, 1, commit.name, line, "torn or garbage", "Restore")
    assert caught.value.permanent
    with pytest.raises(DamagedLogFileError):
        plan_snapshot(path)


def test_zero_byte_commit_is_damage_not_an_empty_commit(tmp_path):
    path = appended_table(tmp_path, 4)
    commit_file(path, 2).write_bytes(b"")
    with pytest.raises(DamagedLogFileError) as caught:
        plan_changes(path, 1, 3)
    assert_names(caught.value, path, 2, commit_file(path, 2).name, "empty")
    # At the head, the sensor's probe reports it instead of offering the version for loading.
    commit_file(path, 3).write_bytes(b"")
    probe = VersionProbe(path)
    assert probe.location.commit_exists(3)
    with pytest.raises(DamagedLogFileError) as at_head:
        probe.new_range(3, 3)
    assert_names(at_head.value, path, 3, commit_file(path, 3).name, "empty")
    with pytest.raises(DamagedLogFileError):
        latest_version(path)


@pytest.mark.parametrize("damage", [b"", b"PAR1\x15\x04"])  # zero bytes, a truncated write
def test_bad_checkpoint_falls_back_to_the_commits(tmp_path, damage):
    path = appended_table(tmp_path, 5)
    DeltaTable(path).create_checkpoint()  # at 4; commits 0..4 are all still there
    checkpoint_file(path, 4).write_bytes(damage)
    assert sorted(f.path for f in plan_snapshot(path)) == all_adds(path, range(5))
    assert latest_version(path) == 4
    assert [f.path for f in plan_changes(path, 4)] == data_change_adds(path, 4)


def test_truncated_checkpoint_falls_back_to_an_older_checkpoint(tmp_path):
    path = appended_table(tmp_path, 3)
    DeltaTable(path).create_checkpoint()  # at 2
    more = appended_table(tmp_path, 3)  # the same folder, versions 3..5
    assert more == path
    DeltaTable(path).create_checkpoint()  # at 5
    expected = all_adds(path, range(6))
    for version in range(2):  # the log was cleaned below the checkpoint at 2
        os.remove(commit_file(path, version))
    intact = checkpoint_file(path, 5).read_bytes()
    checkpoint_file(path, 5).write_bytes(intact[: len(intact) // 2])
    assert sorted(f.path for f in plan_snapshot(path)) == expected
    assert [f.path for f in plan_changes(path, 5)] == data_change_adds(path, 5)


def test_truncated_checkpoint_without_fallback_names_the_checkpoint(tmp_path):
    path = appended_table(tmp_path, 5)
    DeltaTable(path).create_checkpoint()  # at 4
    for version in range(4):
        os.remove(commit_file(path, version))
    intact = checkpoint_file(path, 4).read_bytes()
    checkpoint_file(path, 4).write_bytes(intact[:100])
    with pytest.raises(DamagedLogFileError) as caught:
        plan_snapshot(path)
    assert_names(caught.value, path, 4, checkpoint_file(path, 4).name,
                 "not a readable Parquet file", "commit 0 is gone", "restore the file")


def test_last_checkpoint_naming_a_deleted_checkpoint(tmp_path):
    path = appended_table(tmp_path, 5)
    DeltaTable(path).create_checkpoint()  # at 4, named by _last_checkpoint
    os.remove(checkpoint_file(path, 4))
    assert len(plan_snapshot(path)) == 5  # commits 0..4 still rebuild it, as Delta does
    for version in range(4):
        os.remove(commit_file(path, version))
    with pytest.raises(DamagedLogFileError) as caught:
        plan_snapshot(path)
    assert_names(caught.value, path, 4, "_last_checkpoint",
                 "checkpoint of version 4, which is not in the log", "commit 0")
    assert "can recreate" not in str(caught.value)


@pytest.mark.parametrize("text", [
    b'{"commitInfo":{"a":1}}\n{"add":{"path":"x"}}\n{"txn":{"appId":"i","version":1}}',
    b'{"add":{"path":"x"}}\n\n  {"add":{"path":"y"}}\n{"metaData":{"id":"m"}}\n',
    b'{"remove":{"path":"x"}}',
    b' {"protocol":{"minReaderVersion":1}}\r\n{"add":{"path":"x"}}\r\n',
])
def test_a_commit_split_keeps_every_other_action(tmp_path, text):
    """The actions that are not file actions, found without splitting the file lines out."""
    split = split_commit(TableLocation(str(tmp_path)), 1, text, ("add", "remove"))
    expected = [json.loads(line) for line in text.splitlines()
                if line.strip() and not line.lstrip().startswith((b'{"add":', b'{"remove":'))]
    assert split.actions == expected and split.text == text
