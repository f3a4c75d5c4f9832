"""What a writer of blind appends needs of a table's snapshot -- every ``txn`` action (appId ->
version, and when it was last updated), the protocol, the metadata, the domain metadata and the
newest commit's in-commit timestamp -- at a cost that does not grow with the table's history:
one read of those columns of the newest checkpoint, then the commits after it, and later only
the commits since the version read.

Checkpoints carry every txn, except where the table sets ``delta.setTransactionRetentionDuration``:
then Delta drops, at its next checkpoint, each txn not updated within it (and each without a
``lastUpdated``), and reads the snapshot without them; :func:`live_txns` applies the same rule.
deltalake 1.6 answers one appId at a time and cannot list them; the sinks need them all.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_delta.core.delta_log import TableLocation
from airflow_provider_delta.core.replay import (
    checkpoint_part_actions, find_checkpoint, raise_unreadable, read_commits,
)

_COLUMNS = ["txn", "protocol", "metaData", "domainMetadata"]
TXN_RETENTION_KEY = "delta.setTransactionRetentionDuration"
# Delta's interval units (CalendarInterval without months: Delta refuses those for durations).
_UNIT_MS = {"nanosecond": 1e-6, "microsecond": 1e-3, "millisecond": 1, "second": 1000,
            "minute": 60_000, "hour": 3_600_000, "day": 86_400_000, "week": 604_800_000}
_INTERVAL_PART = re.compile(r"(-?\d+)\s*([a-z]+?)s?(?=\s|$)")


@dataclass
class SnapshotRecords:
    """The txns, protocol and metadata of a snapshot, as far as applied."""

    txns: dict[str, int] = field(default_factory=dict)
    protocol: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    txn_updated: dict[str, int | None] = field(default_factory=dict)  # appId -> lastUpdated
    domains: dict[str, str] = field(default_factory=dict)  # domain -> its configuration
    # (version, commitInfo) of the newest commit applied (none: only a checkpoint read yet)
    newest_commit: tuple[int, dict[str, Any]] | None = None

    def apply(self, actions: Iterable[Mapping[str, Any]], version: int | None = None) -> None:
        for action in actions:
            if "txn" in action:
                txn = action["txn"]
                self.txns[txn["appId"]] = int(txn["version"])
                updated = txn.get("lastUpdated")
                self.txn_updated[txn["appId"]] = None if updated is None else int(updated)
            elif "protocol" in action:
                self.protocol = action["protocol"]
            elif "metaData" in action:
                self.metadata = action["metaData"]
            elif "domainMetadata" in action:
                domain = action["domainMetadata"]
                if domain.get("removed"):
                    self.domains.pop(domain["domain"], None)
                else:
                    self.domains[domain["domain"]] = domain["configuration"]
            elif "commitInfo" in action and version is not None:
                self.newest_commit = version, action["commitInfo"]

    def domain(self, name: str) -> dict[str, Any] | None:
        """The configuration of domain ``name`` (parsed), None if the table has none."""
        configuration = self.domains.get(name)
        return None if configuration is None else json.loads(configuration)

    def configuration(self) -> Mapping[str, str]:
        return (self.metadata or {}).get("configuration") or {}


def snapshot_records(location: TableLocation, version: int) -> SnapshotRecords:
    """The records of the snapshot at ``version``."""
    records = SnapshotRecords()
    checkpoint = find_checkpoint(location, version)
    for part in checkpoint or ():
        records.apply(checkpoint_part_actions(location, part, _COLUMNS))
    first = checkpoint[0].version + 1 if checkpoint else 0
    apply_commits(records, location, range(first, version + 1), from_checkpoint=bool(checkpoint))
    return records


def apply_commits(records: SnapshotRecords, location: TableLocation, versions: range, *,
                  from_checkpoint: bool = True) -> None:
    """Apply the commits ``versions`` (raises, half applied, if one is unreadable)."""
    for version, actions in read_commits(location, versions):
        if actions is None:
            raise_unreadable(location, versions.stop - 1, version, from_checkpoint=from_checkpoint)
        records.apply(actions, version)


def interval_ms(interval: str) -> int:
    """Milliseconds of a Delta interval property (``interval 7 days``, ``2 weeks``)."""
    text = interval.strip().lower()
    text = text[len("interval"):] if text.startswith("interval") else text
    parts = _INTERVAL_PART.findall(text.strip())
    if not parts or any(unit not in _UNIT_MS for _, unit in parts):
        raise ValueError(f"not a Delta interval: {interval!r}")
    return int(sum(int(amount) * _UNIT_MS[unit] for amount, unit in parts))


def txn_retention_ms(configuration: Mapping[str, str]) -> int | None:
    """The table's ``delta.setTransactionRetentionDuration`` (None: txns never expire)."""
    value = configuration.get(TXN_RETENTION_KEY)
    return None if value is None else interval_ms(value)


def live_txns(records: SnapshotRecords, now_ms: int) -> tuple[dict[str, int], dict[str, int]]:
    """The txns Delta's snapshot holds at ``now_ms``, and those it forgot (expired under
    the table's transaction retention, or without ``lastUpdated`` under one) but the log still
    shows until its next checkpoint."""
    retention = txn_retention_ms(records.configuration())
    if retention is None:
        return dict(records.txns), {}
    cutoff = now_ms - retention
    live, expired = {}, {}
    for app_id, version in records.txns.items():
        updated = records.txn_updated.get(app_id)
        (live if updated is not None and updated > cutoff else expired)[app_id] = version
    return live, expired
