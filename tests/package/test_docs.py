"""The docs' requirements table is pyproject's: the floors a user reads are the ones declared."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]


def test_index_lists_every_dependency_with_its_floor():
    declared = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())["project"]["dependencies"]
    index = (REPOSITORY / "docs" / "index.rst").read_text()
    listed = dict(re.findall(r"^``([a-z0-9-]+)``\s+``(>=[0-9.]+)``$", index, re.MULTILINE))
    assert listed == dict(re.match(r"([a-z0-9-]+)(>=[0-9.]+)$", d).groups() for d in declared)
