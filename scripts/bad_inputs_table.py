"""Print the "Bad input" table of docs/mistakes.rst from the cases the tests run
(``tests/operators/bad_inputs.py``): ``python scripts/bad_inputs_table.py``."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from operators.bad_inputs import rst_table  # noqa: E402 - needs the path above

if __name__ == "__main__":
    sys.stdout.write(rst_table())
