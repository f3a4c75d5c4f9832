"""The package's import graph, read from the source with ``ast``: no circle inside the package
(imports inside functions and under TYPE_CHECKING count too), and one module per file name
that names a subject (``storage.py``)."""

from __future__ import annotations

import ast
from pathlib import Path

import airflow_provider_delta

PACKAGE_DIR = Path(airflow_provider_delta.__file__).parent


def module_names(package_dir: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file of the package."""
    root = package_dir.parent
    modules = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, wherever in the file the import is.

    ``from a.b import c`` is an edge to ``a.b.c`` when that is a module, else to ``a.b``;
    importing a module is not counted as importing its parent packages' ``__init__``.
    """
    modules = module_names(package_dir)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for target in _imported(node, name, is_package, modules):
                module = _nearest_module(target, modules)
                if module is not None and module != name:
                    graph[name].add(module)
    return graph


def _imported(node: ast.AST, importer: str, is_package: bool,
              modules: dict[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:  # relative: from the importer's package, one level up per extra dot
        package = importer.split(".")
        if not is_package:
            package.pop()
        package = package[:len(package) - (node.level - 1)]
        base = ".".join([*package, base] if base else package)
    return [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
            for alias in node.names]


def _nearest_module(dotted: str, modules: dict[str, Path]) -> str | None:
    parts = dotted.split(".")
    while parts:
        if ".".join(parts) in modules:
            return ".".join(parts)
        parts.pop()
    return None


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circle_inside_the_package():
    graph = import_graph(PACKAGE_DIR)
    assert len(graph) > 30 and sum(map(len, graph.values())) > 100  # the walk found the package
    assert circles(graph) == []


def test_a_circle_through_a_function_level_import_is_found(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from pkg.sub.a import A\n")
    (package / "sub" / "a.py").write_text("from .b import B\nA = 1\n")
    (package / "sub" / "b.py").write_text("def f():\n    from pkg.sub import a\nB = 2\n")
    (package / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                  "    from pkg import d\n")
    (package / "d.py").write_text("import pkg.c\n")
    assert circles(import_graph(package)) == [["pkg.c", "pkg.d"], ["pkg.sub.a", "pkg.sub.b"]]


def test_one_module_named_storage():
    named = sorted(str(p.relative_to(PACKAGE_DIR)) for p in PACKAGE_DIR.rglob("storage.py"))
    assert named == ["storage.py"]
