"""The families' tool schemas: each family's specs equal the recorded ones (harness ids are content hashes
of them, and recorded runs and the demo table depend on those), key order included.

`python -m tests.test_tool_schemas` rewrites tests/fixtures/tool_specs.json from the current specs (only
for a deliberate change of a schema)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from coevolve.tasks import family_names, get_family
from coevolve.tasks.base import FINISH_TOOL
from coevolve.values import ToolSpec

FIXTURE = Path(__file__).parent / "fixtures" / "tool_specs.json"
FAMILIES = family_names()


def as_json(specs: tuple[ToolSpec, ...]) -> list[dict[str, Any]]:
    return [{"name": t.name, "description": t.description, "parameters": t.parameters, "impl": t.impl} for t in specs]


def family_specs(name: str) -> dict[str, Any]:
    """Every spec the family exposes: its baseline tools, its helper tools, its environment's tools (finish
    among them) and the id of its baseline harness."""
    family = get_family(name)
    optional = getattr(family, "optional_tools", None)
    return {
        "baseline": as_json(family.baseline_tools()),
        "optional": as_json(optional() if optional else ()),
        "env": as_json(family.make_env(family.instance_at("train", 0)).tool_specs()),
        "baseline_harness_id": family.baseline_harness().id,
    }


def current() -> dict[str, Any]:
    return {"finish": as_json((FINISH_TOOL,)), "families": {name: family_specs(name) for name in FAMILIES}}


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text())


def test_finish_is_the_recorded_one(recorded):
    assert json.dumps(current()["finish"], indent=1) == json.dumps(recorded["finish"], indent=1)


@pytest.mark.parametrize("name", FAMILIES)
def test_specs_are_the_recorded_ones(name, recorded):
    # compared as JSON text, so a change of key order fails too
    assert json.dumps(family_specs(name), indent=1) == json.dumps(recorded["families"][name], indent=1)


if __name__ == "__main__":
    FIXTURE.write_text(json.dumps(current(), indent=1) + "\n")
