"""Helpers for the core tests: an independent, plain reading of commit JSON files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from urllib.parse import unquote


def commit_actions(table: str, version: int) -> list[dict]:
    """The actions of one commit, read straight from its JSON file."""
    text = (Path(table) / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def data_change_adds(table: str, version: int) -> list[str]:
    """Absolute decoded URIs of a commit's AddFiles with dataChange=true, in log order."""
    return [
        f"file://{table}/{unquote(a['add']['path'])}"
        for a in commit_actions(table, version)
        if "add" in a and a["add"].get("dataChange", True)
    ]


def has_data_change_remove(table: str, version: int) -> bool:
    return any("remove" in a and a["remove"].get("dataChange", True)
               for a in commit_actions(table, version))


def append_unchanged_merge(table: str) -> int:
    """Commit what Delta Spark commits for a MERGE that matched rows but changed none (its
    metrics say so): the table's files removed and re-added as copies, no cdc files.
    deltalake writes no commit for such a MERGE, so the commit is written here as Delta does.
    Returns the new version.
    """
    log = Path(table) / "_delta_log"
    version = max(int(p.stem) for p in log.glob("*.json"))
    live: dict[str, dict] = {}
    for v in range(version + 1):
        for action in commit_actions(table, v):
            if "add" in action:
                live[action["add"]["path"]] = action["add"]
            elif "remove" in action:
                live.pop(action["remove"]["path"], None)
    metrics = {"numTargetRowsInserted": "0", "numTargetRowsUpdated": "0",
               "numTargetRowsDeleted": "0", "numTargetRowsCopied": "1"}
    lines = [{"commitInfo": {"timestamp": 1_700_000_000_000, "operation": "MERGE",
                             "operationMetrics": metrics}}]
    for path, add in live.items():
        copy = f"copied-{version + 1}-{Path(path).name}"
        shutil.copyfile(Path(table) / unquote(path), Path(table) / copy)
        lines.append({"remove": {"path": path, "dataChange": True, "size": add["size"],
                                 "partitionValues": add.get("partitionValues") or {}}})
        lines.append({"add": {**add, "path": copy, "dataChange": True}})
    (log / f"{version + 1:020d}.json").write_text("\n".join(json.dumps(a) for a in lines) + "\n")
    return version + 1
