"""The families' tool schemas: each family's specs equal the recorded ones (harness ids are content hashes
of them, and recorded runs and the demo table depend on those), key order included; and each schema fits
the method it describes: the same parameters in the same order, required exactly where the method has no
default, no other properties, and an example the schema accepts binds to the method and runs.

`python -m tests.test_tool_schemas` rewrites tests/fixtures/tool_specs.json from the current specs (only
for a deliberate change of a schema)."""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
from jsonschema import Draft202012Validator

from coevolve.tasks import family_names, get_family
from coevolve.tasks.base import FINISH_TOOL, TaskEnv
from coevolve.tasks.tools import Param, fill_doc, json_schema, tool_spec
from coevolve.values import ToolSpec

FIXTURE = Path(__file__).parent / "fixtures" / "tool_specs.json"
FAMILIES = family_names()
# strings offered to a `pattern` (the first one it accepts is the example)
PATTERN_CANDIDATES = ("a", "PR-1")


def as_json(specs: tuple[ToolSpec, ...]) -> list[dict[str, Any]]:
    return [dataclasses.asdict(t) for t in specs]


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


def example(schema: dict[str, Any], full: bool) -> Any:
    """A value `schema` accepts: with `full`, every property and one item in every array; else the least."""
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "object":
        props = schema.get("properties", {})
        names = list(props) if full else schema.get("required", [])
        return {n: example(props[n], full) for n in names}
    if kind == "array":
        n = min(max(schema.get("minItems", 0), int(full)), schema.get("maxItems", 1))
        return [example(schema.get("items", {"type": "string"}), full) for _ in range(n)]
    if kind == "string":
        if "pattern" in schema:
            return next(c for c in PATTERN_CANDIDATES if re.search(schema["pattern"], c))
        return "a" * max(1, schema.get("minLength", 1))
    if kind in ("integer", "number"):
        return schema.get("minimum", schema.get("exclusiveMinimum", 0) + 1)
    raise AssertionError(f"no example for {schema}")


def tool_methods(name: str) -> list[tuple[TaskEnv, ToolSpec, inspect.Signature]]:
    family = get_family(name)
    env = family.make_env(family.instance_at("train", 0))
    return [(env, t, inspect.signature(getattr(env, f"tool_{t.impl}"))) for t in env.tool_specs()]


@pytest.mark.parametrize("name", FAMILIES)
def test_schemas_fit_their_methods(name):
    for _env, spec, sig in tool_methods(name):
        schema = spec.parameters
        Draft202012Validator.check_schema(schema)
        assert schema["type"] == "object" and schema["additionalProperties"] is False, spec.name
        assert list(schema["properties"]) == list(sig.parameters), spec.name
        required = [p for p, v in sig.parameters.items() if v.default is inspect.Parameter.empty]
        assert schema.get("required", []) == required, spec.name


@pytest.mark.parametrize("name", FAMILIES)
def test_schema_examples_bind_and_run(name):
    for env, spec, sig in tool_methods(name):
        for full in (False, True):
            args = example(spec.parameters, full)
            Draft202012Validator(spec.parameters).validate(args)
            sig.bind(**args)
            if spec.impl not in env.blocking_tools:  # a sandbox run is test_refactor's business
                result = env.call(spec.impl, args)
                assert "bad arguments" not in result.content, (spec.name, args, result.content)


# ------------------------------------------------------------------ the derivation itself
def test_a_spec_is_read_from_the_signature_and_the_docstring():
    class Env:
        @fill_doc(limit=40.0)
        def tool_pick(
            self,
            what: Annotated[str, Param(minLength=1, description="a name")],
            how: Literal["a", "b"] | None = None,
            many: Annotated[list[dict[str, Any]] | None, Param(minItems=1, items={"type": "object"})] = None,
        ) -> str:
            """Pick one over {limit:g}
            of them.

            Not part of the description."""
            return what

    spec = tool_spec(Env.tool_pick)
    assert (spec.name, spec.impl, spec.description) == ("pick", "pick", "Pick one over 40 of them.")
    assert json.dumps(spec.parameters) == json.dumps({
        "type": "object",
        "properties": {
            "what": {"type": "string", "minLength": 1, "description": "a name"},
            "how": {"type": "string", "enum": ["a", "b"]},
            "many": {"type": "array", "minItems": 1, "items": {"type": "object"}},
        },
        "required": ["what"],
        "additionalProperties": False,
    })


def test_types_map_to_json_schema():
    cells = {"type": "object", "additionalProperties": {"type": ["string", "number"]}}
    assert json_schema(dict[str, str | float]) == cells
    rows = {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}}
    assert json_schema(list[list[int]]) == rows
    assert json_schema(dict[str, Any]) == {"type": "object"} and json_schema(bool) == {"type": "boolean"}
    with pytest.raises(TypeError):
        json_schema(Any)


def test_a_method_that_is_no_tool_or_has_no_docstring_is_refused():
    class Env:
        def pick(self) -> str:
            """Pick."""
            return ""

        def tool_pick(self) -> str:
            return ""

    for method in (Env.pick, Env.tool_pick):
        with pytest.raises(ValueError):
            tool_spec(method)


if __name__ == "__main__":
    FIXTURE.write_text(json.dumps(current(), indent=1) + "\n")
