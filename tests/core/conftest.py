"""Helpers for the core tests: an independent, plain reading of commit JSON files."""

from __future__ import annotations

import json
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
