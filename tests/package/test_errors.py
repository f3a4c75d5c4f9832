"""Every error class runs its parent's ``__init__``: what a parent sets (message, table, version)
is set for its subclasses too."""

from __future__ import annotations

import ast
import inspect

from airflow_provider_delta import errors


def _error_classes() -> list[type]:
    return [c for _, c in inspect.getmembers(errors, inspect.isclass)
            if issubclass(c, errors.DeltaProviderError) and c.__module__ == errors.__name__]


def test_every_init_calls_its_parents_init_through_super():
    skipping = []
    for cls in _error_classes():
        if "__init__" not in vars(cls):
            continue
        tree = ast.parse(inspect.getsource(cls.__init__).strip())
        calls = [n.func for n in ast.walk(tree) if isinstance(n, ast.Call)
                 and isinstance(n.func, ast.Attribute) and n.func.attr == "__init__"]
        through_super = [f for f in calls if isinstance(f.value, ast.Call)
                         and getattr(f.value.func, "id", None) == "super"]
        if len(through_super) != 1 or len(calls) != 1:
            skipping.append(cls.__name__)
    assert len(_error_classes()) > 20
    assert skipping == []


def test_subclasses_keep_what_their_parents_set():
    damaged = errors.DamagedLogFileError("file:///t", 1, "00000000000000000001.json", "torn")
    assert (damaged.table_uri, damaged.version) == ("file:///t", 1)
    assert str(damaged).startswith("file:///t: _delta_log/00000000000000000001.json (version 1) "
                                   "is damaged: torn. Restore the file")
    other = errors.SinkWriterOverlapError("file:///t", "file:///s", 3, None, [(1, 4, "app", 7)])
    assert (other.table_uri, other.version, other.committed) == ("file:///t", 3, [(1, 4)])
    assert "3..latest of file:///s overlap what another task" in str(other)
    assert "1..4 by appId app (target version 7)" in str(other) and "start_version=5" in str(other)
