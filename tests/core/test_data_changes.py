"""Which commits change data, as the data-change-only waits ask the probe."""

from __future__ import annotations

import pytest

from airflow_provider_delta.core.actions import changes_data
from airflow_provider_delta.core.probe import VersionProbe
from tests.core.conftest import commit_actions


@pytest.mark.parametrize(("name", "data_versions"), [
    ("delta-rs/cdf-table", [0, 1, 2, 3]),  # a write, two updates and a delete, with cdc files
    ("delta-rs/simple_table_with_cdc", [1, 2]),  # version 0 creates the table, empty
])
def test_data_versions_of_shared_tables(shared_table, name, data_versions):
    uri = shared_table(name)
    probe = VersionProbe(uri)
    latest = probe.latest(since=None)
    assert probe.data_versions(0, latest) == data_versions


def test_cdc_files_alone_change_data(shared_table):
    """A commit whose rows changed only in its change data files (dataChange=false there)."""
    uri = shared_table("delta-rs/simple_table_with_cdc")
    cdc_only = [a for a in commit_actions(uri, 2) if "cdc" in a or "commitInfo" in a]
    assert [a["cdc"]["dataChange"] for a in cdc_only if "cdc" in a] == [False]
    assert changes_data(cdc_only)
    assert not changes_data([a for a in cdc_only if "commitInfo" in a])


def test_a_probe_reads_each_commit_once(shared_table, tmp_path):
    """Later asks read only the commits not classified yet: a damaged old commit is not read
    again (the cost of a poke follows the new commits, not the history)."""
    uri = shared_table("delta-rs/cdf-table")
    probe = VersionProbe(uri)
    assert probe.data_versions(1, 2) == [1, 2]
    (tmp_path / "shared" / "delta-rs" / "cdf-table" / "_delta_log" /
     f"{1:020d}.json").write_text("torn")
    assert probe.data_versions(1, 3) == [1, 2, 3]
    assert VersionProbe(uri).data_versions(2, 3) == [2, 3]
