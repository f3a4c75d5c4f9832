"""Tests that must share one pytest-xdist worker, whatever the pytest version.

pytest-xdist's ``--dist loadgroup`` tells the controller a test's group by appending
``@group`` to the test's id on the worker (``Item._nodeid``); pytest 9.2 builds ids from
``Item._id`` and no longer reads that attribute, so every group is split over the workers.
Here each worker writes the groups it collected to a file the controller named (every worker
collects the same tests, so they write the same map), and the controller's scheduler reads it
once the workers have collected: a test's scope is its group, else its own id.
"""

from __future__ import annotations

import atexit
import json
import os
import tempfile

_FILE_VARIABLE = "DELTA_TESTS_XDIST_GROUPS"  # set by the controller, inherited by its workers


def name_the_file() -> None:
    """On the controller: where its workers write the groups (a fresh temporary file)."""
    if os.environ.get("PYTEST_XDIST_WORKER") or os.environ.get(_FILE_VARIABLE):
        return
    handle, path = tempfile.mkstemp(prefix="delta-tests-groups-", suffix=".json")
    os.close(handle)
    atexit.register(_remove, path)
    os.environ[_FILE_VARIABLE] = path


def write_groups(groups: dict[str, str]) -> None:
    """On a worker: its collected tests' groups, by test id (replaced whole, never half
    written)."""
    path = os.environ.get(_FILE_VARIABLE)
    if not os.environ.get("PYTEST_XDIST_WORKER") or not path:
        return
    partial = f"{path}.{os.environ['PYTEST_XDIST_WORKER']}"
    with open(partial, "w", encoding="utf-8") as handle:
        json.dump(groups, handle)
    os.replace(partial, path)


def make_scheduler(config, log):
    """The controller's ``--dist loadgroup`` scheduler, grouping by the workers' file."""
    from xdist.scheduler import LoadScopeScheduling

    class FileGroupScheduling(LoadScopeScheduling):
        _groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._groups is None:
                self._groups = _read_groups()
            bare = nodeid.rsplit("@", 1)[0]  # pytest before 9.2 still carries xdist's suffix
            return self._groups.get(bare, nodeid)

    return FileGroupScheduling(config, log)


def _read_groups() -> dict[str, str]:
    path = os.environ.get(_FILE_VARIABLE)
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (TypeError, OSError, ValueError):
        return {}


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
