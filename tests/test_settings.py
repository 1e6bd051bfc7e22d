"""Every environment variable the project reads is a documented field of `coevolve.settings`, and only
that module reads the environment for one (docs/ARCHITECTURE.md §7)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from coevolve.settings import Environment, environment, export, setting, variable

ROOT = Path(__file__).resolve().parents[1]
NAME = re.compile(r"COEVOLVE_[A-Z0-9_]*[A-Z0-9]")


def _code() -> dict[Path, str]:
    return {p: p.read_text() for p in sorted((ROOT / "coevolve").rglob("*.py"))}


def test_every_variable_named_in_the_code_is_a_setting():
    declared = {variable(f) for f in Environment.model_fields}
    named = {m for text in _code().values() for m in NAME.findall(text)}
    assert named - declared == set()


def _environ_uses(tree: ast.AST) -> list[int]:
    """Lines that read or write `os.environ` / `os.getenv` for a project variable: a `COEVOLVE_*`
    literal, or a module-level name bound to one (or to `variable(...)`)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            v = node.value
            if (isinstance(v, ast.Constant) and isinstance(v.value, str) and v.value.startswith("COEVOLVE_")) or (
                    isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "variable"):
                names.add(node.targets[0].id)

    def project(arg: ast.AST) -> bool:
        return (isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("COEVOLVE_")) or (
            isinstance(arg, ast.Name) and arg.id in names)

    def environ(node: ast.AST) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "environ"

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and project(node.args[0]) and isinstance(node.func, ast.Attribute) and (
                (node.func.attr in ("get", "setdefault", "pop") and environ(node.func.value)) or node.func.attr == "getenv") or isinstance(node, ast.Subscript) and environ(node.value) and project(node.slice):
            lines.append(node.lineno)
    return lines


def test_only_the_settings_module_reads_the_environment_for_a_project_variable():
    uses = {str(p.relative_to(ROOT)): lines for p, text in _code().items()
            if p.name != "settings.py" and (lines := _environ_uses(ast.parse(text)))}
    assert uses == {}


def test_the_check_sees_a_read_through_a_constant():
    tree = ast.parse('import os\nX_ENV = "COEVOLVE_X"\ndef f():\n    return os.environ.get(X_ENV), os.environ["COEVOLVE_Y"]\n')
    assert _environ_uses(tree) == [4, 4]


def test_the_architecture_page_lists_every_variable_with_its_description():
    page = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    for name, field in Environment.model_fields.items():
        assert f"| `{variable(name)}` | {field.description} |" in page


def test_the_environment_overrides_the_defaults_and_empty_means_unset(monkeypatch):
    monkeypatch.delenv("COEVOLVE_STORE", raising=False)
    assert environment().store == setting("store") == ".coevolve"
    monkeypatch.setenv("COEVOLVE_STORE", "/tmp/elsewhere")
    assert environment().store == setting("store") == "/tmp/elsewhere"
    monkeypatch.setenv("COEVOLVE_STORE", "")
    assert environment().store == setting("store") == ".coevolve"
    monkeypatch.setenv("COEVOLVE_LOG_LEVEL", "info")
    export(log_level="error")
    assert environment().log_level == "error"
    with pytest.raises(KeyError, match="not a setting"):
        variable("stores")
    with pytest.raises(KeyError, match="not a setting"):
        setting("stores")
