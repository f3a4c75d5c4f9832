"""A table's ``txn`` actions (appId -> version) at a version, at a cost that does not grow
with the table's history: the newest checkpoint's ``txn`` column, then the commits after it.

Checkpoints carry every txn (Delta never drops one unless the table sets a transaction
retention), so a log cleaned below its newest checkpoint answers the same as a full one.
deltalake 1.6 answers one appId at a time and cannot list them; the sinks need them all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from airflow_provider_delta.core.delta_log import TableLocation
from airflow_provider_delta.core.replay import (
    checkpoint_part_actions, find_checkpoint, raise_unreadable, read_commits,
)


def snapshot_transactions(location: TableLocation, version: int) -> dict[str, int]:
    """Every appId's txn version in the snapshot at ``version``."""
    txns: dict[str, int] = {}
    checkpoint = find_checkpoint(location, version)
    for part in checkpoint or ():
        apply_transactions(txns, checkpoint_part_actions(location, part, ["txn"]))
    first = checkpoint[0].version + 1 if checkpoint else 0
    txns.update(commit_transactions(location, range(first, version + 1),
                                    from_checkpoint=bool(checkpoint)))
    return txns


def commit_transactions(location: TableLocation, versions: range, *,
                        from_checkpoint: bool = True) -> dict[str, int]:
    """The txn actions of the commits ``versions``, the later ones winning."""
    txns: dict[str, int] = {}
    for version, actions in read_commits(location, versions):
        if actions is None:
            raise_unreadable(location, versions.stop - 1, version, from_checkpoint=from_checkpoint)
        apply_transactions(txns, actions)
    return txns


def apply_transactions(txns: dict[str, int], actions: Iterable[Mapping[str, Any]]) -> None:
    for action in actions:
        txn = action.get("txn")
        if txn is not None:
            txns[txn["appId"]] = int(txn["version"])
