"""The package's floors (docs/ARCHITECTURE.md, "Layout"): every import inside `coevolve`, the lazy ones
in function bodies included, goes to the same floor or a lower one, and no files import each other in a
circle. Read from the source with `ast`, so nothing is imported to check it."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "coevolve"

# Lowest floor first; a module stands on the floor of the longest prefix listed here.
FLOORS = [
    ("coevolve.errors", "coevolve.defaults", "coevolve.values", "coevolve.codec", "coevolve.text", "coevolve.settings"),
    ("coevolve.llm", "coevolve.edits"),
    ("coevolve.store",),
    ("coevolve.sandbox",),
    ("coevolve.tasks",),
    ("coevolve.analysis",),
    ("coevolve.agents",),
    ("coevolve.config",),  # builds the agents' settings from the configuration tree
    ("coevolve.pipeline",),  # the co-evolution's steps on the tree's sections, and its cycle schedule
    ("coevolve.testbed",),
    ("coevolve.services",),
    ("coevolve.cluster",),
    ("coevolve.jobs",),
    ("coevolve.cli",),
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules `name` imports anywhere in its file (a `from pkg import sub` names `pkg.sub`)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for a in node.names:
                out.add(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base)
    return {m for m in out if m in known and m != name}


def floor(name: str) -> int:
    best, level = "", -1
    for i, prefixes in enumerate(FLOORS):
        for p in prefixes:
            if (name == p or name.startswith(p + ".")) and len(p) > len(best):
                best, level = p, i
    return level


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports(name, path, set(mods)) for name, path in mods.items()}


def test_every_module_stands_on_a_floor():
    assert [m for m in modules() if m != "coevolve" and floor(m) < 0] == []


def test_no_import_runs_back_up():
    up = sorted(f"{a} (floor {floor(a)}) -> {b} (floor {floor(b)})"
                for a, deps in graph().items() if a != "coevolve" for b in deps if floor(b) > floor(a))
    assert up == []


def test_no_circle_across_files():
    g = graph()
    # Tarjan's strongly connected components: any with more than one module is a circle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    assert circles == []


def test_the_checker_sees_a_back_arrow_and_a_circle(tmp_path, monkeypatch):
    """The two checks above would fail on a house that has what they look for."""
    pkg = tmp_path / "coevolve"
    (pkg / "tasks").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "values.py").write_text("from coevolve.tasks import base\n")
    (pkg / "tasks" / "__init__.py").write_text("")
    (pkg / "tasks" / "base.py").write_text("def f():\n    from coevolve import values\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", pkg)
    g = graph()
    assert g["coevolve.values"] == {"coevolve.tasks.base"} and g["coevolve.tasks.base"] == {"coevolve.values"}
    assert floor("coevolve.tasks.base") > floor("coevolve.values")
