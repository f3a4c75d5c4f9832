"""What a writer of blind appends needs of a table's snapshot -- every ``txn`` action (appId ->
version), the protocol and the metadata -- at a cost that does not grow with the table's
history: one read of those columns of the newest checkpoint, then the commits after it, and
later only the commits since the version read.

Checkpoints carry every txn (Delta never drops one unless the table sets a transaction
retention), so a log cleaned below its newest checkpoint answers the same as a full one.
deltalake 1.6 answers one appId at a time and cannot list them; the sinks need them all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_delta.core.delta_log import TableLocation
from airflow_provider_delta.core.replay import (
    checkpoint_part_actions, find_checkpoint, raise_unreadable, read_commits,
)

_COLUMNS = ["txn", "protocol", "metaData"]


@dataclass
class SnapshotRecords:
    """The txns, protocol and metadata of a snapshot, as far as applied."""

    txns: dict[str, int] = field(default_factory=dict)
    protocol: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None

    def apply(self, actions: Iterable[Mapping[str, Any]]) -> None:
        for action in actions:
            if "txn" in action:
                self.txns[action["txn"]["appId"]] = int(action["txn"]["version"])
            elif "protocol" in action:
                self.protocol = action["protocol"]
            elif "metaData" in action:
                self.metadata = action["metaData"]


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
        records.apply(actions)
