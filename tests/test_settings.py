"""Every environment variable the project reads is a documented field of `coevolve.settings`, and only
that module reads the environment for one (docs/ARCHITECTURE.md §7)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from coevolve.settings import Environment, environment, export, variable

ROOT = Path(__file__).resolve().parents[1]
NAME = re.compile(r"COEVOLVE_[A-Z0-9_]*[A-Z0-9]")


def _code() -> dict[Path, str]:
    return {p: p.read_text() for p in sorted((ROOT / "coevolve").rglob("*.py"))}


def test_every_variable_named_in_the_code_is_a_setting():
    declared = {variable(f) for f in Environment.model_fields}
    named = {m for text in _code().values() for m in NAME.findall(text)}
    assert named - declared == set()


def test_only_the_settings_module_reads_the_environment_for_a_project_variable():
    reads = re.compile(r"os\.(environ\.get|getenv)\(\s*[\"']COEVOLVE_|os\.environ\[[\"']COEVOLVE_")
    readers = [str(p.relative_to(ROOT)) for p, text in _code().items() if reads.search(text)]
    assert readers == []


def test_the_architecture_page_lists_every_variable_with_its_description():
    page = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    for name, field in Environment.model_fields.items():
        assert f"| `{variable(name)}` | {field.description} |" in page


def test_the_environment_overrides_the_defaults_and_empty_means_unset(monkeypatch):
    monkeypatch.delenv("COEVOLVE_STORE", raising=False)
    assert environment().store == ".coevolve"
    monkeypatch.setenv("COEVOLVE_STORE", "/tmp/elsewhere")
    assert environment().store == "/tmp/elsewhere"
    monkeypatch.setenv("COEVOLVE_STORE", "")
    assert environment().store == ".coevolve"
    monkeypatch.setenv("COEVOLVE_LOG_LEVEL", "info")
    export(log_level="error")
    assert environment().log_level == "error"
    with pytest.raises(KeyError, match="not a setting"):
        variable("stores")
