"""The Airflow-facing classes stay thin: parameters and ``execute`` (or ``poke``, ``run``), with
the work in the layers below. Counted with ``ast`` from the ``class`` line to its last line,
docstring included."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import airflow_provider_delta

PACKAGE_DIR = Path(airflow_provider_delta.__file__).parent
AIRFLOW_FACING = ("operators", "sensors", "triggers", "hooks")
MAX_CLASS_LINES = 250


def class_sizes(path: Path) -> dict[str, int]:
    """Class name -> its number of lines, for every class in ``path`` (nested ones too)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return {node.name: node.end_lineno - node.lineno + 1 for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef)}


def test_a_long_class_is_counted_whole(tmp_path):
    body = "\n".join(f"    x{n} = {n}" for n in range(MAX_CLASS_LINES))
    module = tmp_path / "long.py"
    module.write_text(f"class Long:\n{body}\n\n\nclass Short:\n    pass\n")
    assert class_sizes(module) == {"Long": MAX_CLASS_LINES + 1, "Short": 2}


@pytest.mark.parametrize("folder", AIRFLOW_FACING)
def test_no_airflow_facing_class_is_over_250_lines(folder):
    files = sorted((PACKAGE_DIR / folder).glob("*.py"))
    assert files, f"{folder}/ holds no module"
    too_long = {f"{path.relative_to(PACKAGE_DIR)}:{name}": lines for path in files
                for name, lines in class_sizes(path).items() if lines > MAX_CLASS_LINES}
    assert not too_long, f"classes over {MAX_CLASS_LINES} lines: {too_long}"
