"""`apply_edit`: every operation, every way an edit is refused (its meaning, and its types at the boundary,
from JSON and from dataclasses), and the stability of harness ids."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from coevolve.codec import content_id
from coevolve.edits import (
    MAX_EDIT_CHARS,
    MAX_HARNESS_CHARS,
    MAX_OPS,
    MAX_RECIPES,
    MAX_SECTIONS,
    MAX_TEXT,
    MAX_TOOLS,
    EditError,
    apply_edit,
    edit_from_json,
    edit_to_json,
    harness_chars,
    validate_harness,
)
from coevolve.values import (
    AddHook,
    AddRecipe,
    AddTool,
    AlterTool,
    AppendSection,
    ContextPolicy,
    Harness,
    HarnessEdit,
    HookSpec,
    PromptSection,
    Recipe,
    RemoveHook,
    RemoveSection,
    RemoveTool,
    SetContextPolicy,
    SetMaxTurns,
    SetSection,
    ToolSpec,
)

READ_SCHEMA = {
    "type": "object",
    "properties": {"sensor": {"type": "string"}, "since": {"type": "integer"}},
    "required": ["sensor"],
}
BASE = Harness(
    family="iot",
    system_prompt=(
        PromptSection("role", "You audit IoT sensors."),
        PromptSection("rules", "Report every anomaly."),
    ),
    tools=(
        ToolSpec("read_sensor", "Read a sensor's series.", READ_SCHEMA, "iot.read_sensor"),
        ToolSpec("finish", "Finish the task.", {"type": "object", "properties": {}}, "finish"),
    ),
    hooks=(HookSpec("before_call", "validate_args", {"tools": ["read_sensor"]}),),
    context=ContextPolicy("keep-all", 32000, 6),
    recipes=(Recipe("units", "Temperatures are in Celsius."),),
    max_turns=24,
)
EDIT = HarnessEdit(
    ops=(
        AppendSection("rules", "Check the unit before comparing thresholds."),
        AddHook(HookSpec("on_finish", "finish_checklist", {"items": ["all sensors read"]})),
        SetContextPolicy(ContextPolicy("truncate-middle", 8000, 4)),
    ),
    rationale="weak model forgets units",
    targets="implicit-knowledge",
)

OBJ = {"type": "object", "properties": {"q": {"type": "string"}}}


def apply(*ops: object) -> Harness:
    return apply_edit(BASE, HarnessEdit(ops=tuple(ops)))  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def base_is_untouched():
    """No edit, applied or refused, may change the input harness (its dicts are mutable)."""
    saved = copy.deepcopy(BASE)
    saved_id = BASE.id
    yield
    assert BASE == saved
    assert BASE.id == saved_id


# ---------------------------------------------------------------------------------- each op
def test_set_section_replaces_in_place():
    h = apply(SetSection("role", "You are a careful IoT analyst."))
    assert [s.name for s in h.system_prompt] == ["role", "rules"]
    assert h.section("role").text == "You are a careful IoT analyst."
    assert h.section("rules") == BASE.section("rules")


def test_set_section_adds_a_new_section_at_the_end():
    h = apply(SetSection("format", "Answer in JSON."))
    assert [s.name for s in h.system_prompt] == ["role", "rules", "format"]
    assert h.render_system().endswith(
        "Answer in JSON.\n\nDomain notes:\n- units: Temperatures are in Celsius."
    )


def test_append_section():
    h = apply(AppendSection("rules", "  Never guess a reading.  "))
    assert h.section("rules").text == "Report every anomaly.\nNever guess a reading."


def test_remove_section():
    h = apply(RemoveSection("rules"))
    assert [s.name for s in h.system_prompt] == ["role"]


def test_add_tool():
    tool = ToolSpec("list_sensors", "List sensors.", OBJ, "iot.list_sensors")
    h = apply(AddTool(tool))
    assert [t.name for t in h.tools] == ["read_sensor", "finish", "list_sensors"]
    assert h.tool("list_sensors") == tool


def test_alter_tool_description_only():
    h = apply(AlterTool("read_sensor", description="Read one sensor; units are Celsius."))
    t = h.tool("read_sensor")
    assert t.description == "Read one sensor; units are Celsius."
    assert t.parameters == BASE.tool("read_sensor").parameters
    assert t.impl == "iot.read_sensor"


def test_alter_tool_parameters_only():
    h = apply(AlterTool("read_sensor", parameters=OBJ))
    t = h.tool("read_sensor")
    assert t.parameters == OBJ
    assert t.description == BASE.tool("read_sensor").description
    assert [x.name for x in h.tools] == ["read_sensor", "finish"]  # position kept


def test_remove_tool():
    h = apply(RemoveTool("read_sensor"))
    assert [t.name for t in h.tools] == ["finish"]


def test_add_and_remove_hook():
    hook = HookSpec("on_turn", "progress_reminder", {"after_turns": 5, "text": "Wrap up."})
    h = apply(AddHook(hook))
    assert h.hooks == (*BASE.hooks, hook)
    h2 = apply(RemoveHook("before_call", "validate_args"))
    assert h2.hooks == ()


def test_set_context_policy():
    h = apply(SetContextPolicy(ContextPolicy("summarise", 4000, 3)))
    assert h.context == ContextPolicy("summarise", 4000, 3)


def test_add_recipe():
    h = apply(AddRecipe(Recipe("drift", "Drift above 2%/h is an anomaly.")))
    assert [r.name for r in h.recipes] == ["units", "drift"]
    assert "- drift: Drift above 2%/h is an anomaly." in h.render_system()


def test_set_max_turns():
    assert apply(SetMaxTurns(40)).max_turns == 40


def test_ops_apply_in_order():
    h = apply(SetSection("notes", "first"), AppendSection("notes", "second"), RemoveSection("role"))
    assert [s.name for s in h.system_prompt] == ["rules", "notes"]
    assert h.section("notes").text == "first\nsecond"


def test_multi_op_edit_result():
    h = apply_edit(BASE, EDIT)
    assert h.section("rules").text.endswith("Check the unit before comparing thresholds.")
    assert [k.kind for k in h.hooks] == ["validate_args", "finish_checklist"]
    assert h.context.strategy == "truncate-middle"
    assert h.family == BASE.family and h.tools == BASE.tools


# ---------------------------------------------------------------------------------- refusals
BAD = [
    pytest.param(
        AppendSection("nope", "x"), "AppendSection", "no prompt section 'nope'", id="append-unknown-section"
    ),
    pytest.param(AppendSection("rules", "   "), "AppendSection", "non-empty", id="append-blank-text"),
    pytest.param(
        RemoveSection("nope"), "RemoveSection", "no prompt section 'nope'", id="remove-unknown-section"
    ),
    pytest.param(SetSection("role", ""), "SetSection", "non-empty", id="set-empty-section"),
    pytest.param(
        SetSection("role", "x" * 20_001), "SetSection", "over the 20000 limit", id="set-huge-section"
    ),
    pytest.param(AlterTool("nope", description="d"), "AlterTool", "no tool 'nope'", id="alter-unknown-tool"),
    pytest.param(
        AlterTool("read_sensor"), "AlterTool", "needs a description or parameters", id="alter-nothing"
    ),
    pytest.param(
        AlterTool("read_sensor", parameters={"type": "string"}),
        "AlterTool",
        "type object",
        id="alter-bad-schema",
    ),
    pytest.param(RemoveTool("nope"), "RemoveTool", "no tool 'nope'", id="remove-unknown-tool"),
    pytest.param(RemoveTool("finish"), "RemoveTool", "finish tool cannot be removed", id="remove-finish"),
    pytest.param(
        AddTool(ToolSpec("read_sensor", "again", OBJ, "x")), "AddTool", "already exists", id="duplicate-tool"
    ),
    pytest.param(
        AddTool(ToolSpec("bad name!", "d", OBJ, "x")), "AddTool", "alphanumeric", id="bad-tool-name"
    ),
    pytest.param(
        AddTool(ToolSpec("t", "d", OBJ, "")), "AddTool", "names no implementation", id="tool-no-impl"
    ),
    pytest.param(AddTool("not a tool"), "AddTool", "must be a ToolSpec", id="tool-wrong-type"),
    pytest.param(
        AddHook(HookSpec("before_call", "telepathy", {})),
        "AddHook",
        "hook kind 'telepathy'",
        id="bad-hook-kind",
    ),
    pytest.param(
        AddHook(HookSpec("on_lunch", "validate_args", {})),
        "AddHook",
        "hook event 'on_lunch'",
        id="bad-hook-event",
    ),
    pytest.param(
        AddHook(HookSpec("on_turn", "validate_args", {})),
        "AddHook",
        "runs on 'before_call'",
        id="hook-wrong-event",
    ),
    pytest.param(
        AddHook(HookSpec("on_finish", "finish_checklist", {"colour": "red"})),
        "AddHook",
        "unknown params ['colour']",
        id="bad-hook-params",
    ),
    pytest.param(
        AddHook(HookSpec("before_call", "validate_args", {})),
        "AddHook",
        "already present",
        id="duplicate-hook",
    ),
    pytest.param(
        RemoveHook("on_turn", "progress_reminder"), "RemoveHook", "no hook", id="remove-missing-hook"
    ),
    pytest.param(
        SetContextPolicy(ContextPolicy("forget-everything")),
        "SetContextPolicy",
        "context strategy 'forget-everything'",
        id="bad-context-strategy",
    ),
    pytest.param(
        SetContextPolicy(ContextPolicy("keep-all", token_budget=10)),
        "SetContextPolicy",
        "token_budget 10",
        id="bad-token-budget",
    ),
    pytest.param(
        SetContextPolicy(ContextPolicy("keep-all", keep_last=0)),
        "SetContextPolicy",
        "keep_last 0",
        id="bad-keep-last",
    ),
    pytest.param(AddRecipe(Recipe("units", "again")), "AddRecipe", "already exists", id="duplicate-recipe"),
    pytest.param(SetMaxTurns(0), "SetMaxTurns", "max_turns", id="zero-turns"),
    pytest.param(SetMaxTurns(True), "SetMaxTurns", "max_turns", id="bool-turns"),
    pytest.param("set everything right", "str", "unknown operation", id="not-an-op"),
]


@pytest.mark.parametrize(("op", "op_name", "why"), BAD)
def test_invalid_op_is_refused_naming_the_op(op, op_name, why):
    with pytest.raises(EditError) as info:
        apply(op)
    msg = str(info.value)
    assert msg.startswith(f"op 0 ({op_name}): "), msg
    assert why in msg, msg


@pytest.mark.parametrize(("op", "op_name", "why"), BAD[:6])
def test_invalid_op_after_valid_ones_names_its_index(op, op_name, why):
    edit = HarnessEdit(ops=(SetSection("notes", "n"), AddRecipe(Recipe("r", "t")), op))
    with pytest.raises(EditError, match=rf"^op 2 \({op_name}\): .*{re.escape(why)}"):
        apply_edit(BASE, edit)


def test_empty_edit_is_refused():
    with pytest.raises(EditError, match="no operations"):
        apply_edit(BASE, HarnessEdit(ops=()))


@pytest.mark.parametrize(
    "ops",
    [
        pytest.param((SetSection("role", "You audit IoT sensors."),), id="same-text"),
        pytest.param((SetMaxTurns(24),), id="same-max-turns"),
        pytest.param((SetSection("tmp", "t"), RemoveSection("tmp")), id="add-then-remove"),
        pytest.param((SetContextPolicy(ContextPolicy()),), id="same-policy"),
    ],
)
def test_no_op_edit_is_refused(ops):
    with pytest.raises(EditError, match="changes nothing"):
        apply_edit(BASE, HarnessEdit(ops=ops))


# ---------------------------------------------------------------------------------- ids
def test_id_changes_after_an_edit_and_is_the_content_id():
    h = apply_edit(BASE, EDIT)
    assert h.id != BASE.id
    assert h.id == content_id(h)
    assert apply_edit(BASE, EDIT).id == h.id  # pure: same edit, same result
    assert apply(SetMaxTurns(25)).id != apply(SetMaxTurns(26)).id


def test_ids_are_stable_across_processes():
    """Another interpreter (other hash seed, fresh imports) computes the same ids."""
    script = (
        "import importlib.util, json, sys\n"
        "from coevolve.edits import apply_edit\n"
        "spec = importlib.util.spec_from_file_location('edits_under_test', sys.argv[1])\n"
        "m = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(m)\n"
        "print(json.dumps([m.BASE.id, apply_edit(m.BASE, m.EDIT).id]))\n"
    )
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", script, __file__],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    there = json.loads(out.stdout.strip().splitlines()[-1])
    assert there == [BASE.id, apply_edit(BASE, EDIT).id]
    assert len(set(there)) == 2


# ------------------------------------------------------------------ the typed boundary (issue 23)
# Every edit is parsed into a typed model before it is applied, wherever it comes from: a proposer's JSON
# (`edit_from_json`), a dataclass built in code or decoded from a stored record (`apply_edit`). A wrong
# type, a missing field, an unknown op or field, or a value JSON cannot carry is one EditError, one line,
# naming the op index, the op kind and the field; never another exception.

# A valid JSON form of each op against BASE; each test below breaks one thing in one of them.
VALID_JSON_OPS: dict[str, dict[str, Any]] = {
    "set_section": {"name": "role", "text": "You audit sensors carefully."},
    "append_section": {"name": "rules", "text": "Check units."},
    "remove_section": {"name": "rules"},
    "add_tool": {
        "name": "list_sensors",
        "description": "List sensors.",
        "parameters": OBJ,
        "impl": "iot.list",
    },
    "alter_tool": {"name": "read_sensor", "description": "Read one sensor.", "parameters": OBJ},
    "remove_tool": {"name": "read_sensor"},
    "add_hook": {"event": "on_finish", "kind": "finish_checklist", "params": {"items": ["all read"]}},
    "remove_hook": {"event": "before_call", "kind": "validate_args"},
    "set_context_policy": {"strategy": "summarise", "token_budget": 4000, "keep_last": 3},
    "add_recipe": {"name": "drift", "text": "Drift above 2%/h is an anomaly."},
    "set_max_turns": {"max_turns": 30},
}
REQUIRED_JSON_FIELDS: dict[str, list[str]] = {
    "set_section": ["name", "text"],
    "append_section": ["name", "text"],
    "remove_section": ["name"],
    "add_tool": ["name", "description", "parameters"],
    "alter_tool": ["name"],
    "remove_tool": ["name"],
    "add_hook": ["kind"],
    "remove_hook": ["event", "kind"],
    "set_context_policy": ["strategy"],
    "add_recipe": ["name", "text"],
    "set_max_turns": ["max_turns"],
}
INT_FIELDS = {"token_budget", "keep_last", "max_turns"}
OBJECT_FIELDS = {"parameters", "params"}
# null means "left out" for these (alter_tool: keep the old value; add_hook: the kind's event, no params)
NULL_ALLOWED = {
    ("alter_tool", "description"),
    ("alter_tool", "parameters"),
    ("add_hook", "event"),
    ("add_hook", "params"),
}
WRONG_FOR_STRING = [{"a": 1}, 5, 1.5, True, ["x"]]
WRONG_FOR_OBJECT = ["schema", ["type", "object"], 5, True]
WRONG_FOR_INT = [1.5, 3.0, "3", True, {"n": 1}, [3]]

# The two crashes hypothesis found (`make test` on a fresh clone, tests/test_fuzz.py).
CRASH_ADD_TOOL = {"op": "add_tool", "name": {"x": 1}, "description": "d", "parameters": {"type": "object"}}
CRASH_ADD_RECIPE = {"op": "add_recipe", "name": {"x": 1}}


def one_line_edit_error(fn: Callable[[], object]) -> str:
    """The message of the one EditError that `fn` raises (any other exception fails the test)."""
    with pytest.raises(EditError) as info:
        fn()
    msg = str(info.value)
    assert msg and "\n" not in msg, msg
    return msg


def from_json_and_apply(*ops: object, **edit_fields: object) -> Harness:
    return apply_edit(
        BASE, edit_from_json({"rationale": "r", "targets": "t", "ops": list(ops), **edit_fields})
    )


def json_op(op_kind: str, /, **changes: object) -> dict[str, Any]:
    """The valid JSON op of that kind with some fields changed (positional-only: a field may be `kind`)."""
    return {"op": op_kind, **VALID_JSON_OPS[op_kind], **changes}


def test_every_valid_json_op_template_applies():
    for kind in VALID_JSON_OPS:
        assert from_json_and_apply(json_op(kind)) != BASE, kind


def test_the_add_tool_crash_is_an_edit_error_naming_op_and_field():
    msg = one_line_edit_error(lambda: from_json_and_apply(CRASH_ADD_TOOL))
    assert msg.startswith("op 0 (add_tool): field 'name' must be a string, not an object"), msg
    msg = one_line_edit_error(lambda: apply(AddTool(ToolSpec({"x": 1}, "d", OBJ, "impl"))))
    assert msg.startswith("op 0 (AddTool): field 'tool.name' must be a string, not an object"), msg
    msg = one_line_edit_error(lambda: apply(AddTool(ToolSpec("ok", "d", OBJ, {"x": 1}))))
    assert msg.startswith("op 0 (AddTool): field 'tool.impl' must be a string"), msg


def test_the_add_recipe_crash_is_an_edit_error_naming_op_and_field():
    msg = one_line_edit_error(lambda: from_json_and_apply(CRASH_ADD_RECIPE))
    assert msg.startswith("op 0 (add_recipe): field 'name' must be a string, not an object"), msg
    msg = one_line_edit_error(lambda: apply(AddRecipe(Recipe({"x": 1}, "t"))))
    assert msg.startswith("op 0 (AddRecipe): field 'recipe.name' must be a string, not an object"), msg
    msg = one_line_edit_error(lambda: apply(AddRecipe(Recipe("units", ["again"]))))
    assert msg.startswith("op 0 (AddRecipe): field 'recipe.text' must be a string, not a list"), msg


def _wrong_json_values() -> list[Any]:
    cases = []
    for kind, fields in VALID_JSON_OPS.items():
        for field in fields:
            wrong = (
                WRONG_FOR_INT
                if field in INT_FIELDS
                else WRONG_FOR_OBJECT
                if field in OBJECT_FIELDS
                else WRONG_FOR_STRING
            )
            if (kind, field) not in NULL_ALLOWED:
                wrong = [*wrong, None]
            cases += [pytest.param(kind, field, v, id=f"{kind}-{field}-{type(v).__name__}") for v in wrong]
    return cases


@pytest.mark.parametrize(("kind", "field", "value"), _wrong_json_values())
def test_a_wrong_type_in_a_json_op_is_one_error_naming_index_kind_and_field(kind, field, value):
    first = json_op("set_section", name="notes", text="n")
    msg = one_line_edit_error(lambda: from_json_and_apply(first, json_op(kind, **{field: value})))
    assert msg.startswith(f"op 1 ({kind}): field '{field}' must be "), msg


@pytest.mark.parametrize(
    ("kind", "field"), [(k, f) for k, fields in REQUIRED_JSON_FIELDS.items() for f in fields]
)
def test_a_missing_required_field_is_one_error_naming_it(kind, field):
    op = json_op(kind)
    del op[field]
    msg = one_line_edit_error(lambda: from_json_and_apply(op))
    assert msg.startswith(f"op 0 ({kind}): field '{field}' is required but missing"), msg


def test_optional_json_fields_take_their_documented_defaults():
    edit = edit_from_json(
        {
            "ops": [
                {"op": "add_tool", "name": "list_sensors", "description": "d", "parameters": OBJ},
                {"op": "add_hook", "kind": "progress_reminder"},
                {"op": "add_hook", "kind": "finish_checklist", "event": None, "params": None},
                {"op": "set_context_policy", "strategy": "pin-notes"},
                {"op": "alter_tool", "name": "read_sensor", "description": "d", "parameters": None},
            ]
        }
    )
    assert edit.ops == (
        AddTool(ToolSpec("list_sensors", "d", OBJ, "list_sensors")),
        AddHook(HookSpec("on_turn", "progress_reminder", {})),
        AddHook(HookSpec("on_finish", "finish_checklist", {})),
        SetContextPolicy(ContextPolicy("pin-notes", ContextPolicy().token_budget, ContextPolicy().keep_last)),
        AlterTool("read_sensor", "d", None),
    )
    assert edit.rationale == "" and edit.targets == ""


def test_json_form_round_trips():
    edit = HarnessEdit(
        ops=(
            *EDIT.ops,
            AddTool(ToolSpec("list_sensors", "d", OBJ, "iot.list")),
            AlterTool("read_sensor", "d"),
            SetMaxTurns(30),
            RemoveHook("before_call", "validate_args"),
            AddRecipe(Recipe("r", "t")),
        ),
        rationale="why",
        targets="tool-use",
    )
    assert edit_from_json(json.loads(json.dumps(edit_to_json(edit)))) == edit


@pytest.mark.parametrize(
    ("op", "needle"),
    [
        pytest.param(
            {"op": "rewrite_model", "name": "x"},
            "op 0: unknown op 'rewrite_model' (ops: set_section,",
            id="unknown-op",
        ),
        pytest.param({"op": {"x": 1}}, "op 0: 'op' must be a string, not an object", id="op-not-a-string"),
        pytest.param({"op": 3}, "op 0: 'op' must be a string, not an integer", id="op-an-int"),
        pytest.param({"name": "x"}, "op 0: must be an object with a string 'op'", id="no-op-key"),
        pytest.param(
            ["set_section"], "op 0: must be an object with a string 'op', not a list", id="op-a-list"
        ),
        pytest.param(None, "op 0: must be an object with a string 'op', not null", id="op-null"),
    ],
)
def test_an_unknown_or_shapeless_op_is_one_error(op, needle):
    msg = one_line_edit_error(lambda: from_json_and_apply(op))
    assert msg.startswith(needle), msg


@pytest.mark.parametrize("kind", sorted(VALID_JSON_OPS))
def test_an_unknown_field_is_refused_listing_the_fields(kind):
    """Unknown fields are refused, not ignored: a misplaced field (params written at the top level) would
    otherwise apply a different edit from the one the proposer meant."""
    msg = one_line_edit_error(lambda: from_json_and_apply(json_op(kind, colour="red")))
    fields = (
        ", ".join(VALID_JSON_OPS[kind])
        if kind != "set_context_policy"
        else "strategy, token_budget, keep_last"
    )
    assert msg.startswith(f"op 0 ({kind}): field 'colour' is not a field of this operation ("), msg
    assert all(f in msg for f in fields.split(", ")), msg


@pytest.mark.parametrize(
    ("obj", "needle"),
    [
        pytest.param([], "an edit must be a JSON object with 'ops', not a list", id="edit-a-list"),
        pytest.param({"rationale": "r"}, "edit: field 'ops' is required but missing", id="no-ops"),
        pytest.param({"ops": []}, "edit: field 'ops' must not be empty", id="empty-ops"),
        pytest.param(
            {"ops": {"op": "remove_tool"}}, "edit: field 'ops' must be a list, not an object", id="ops-dict"
        ),
        pytest.param(
            {"ops": [json_op("set_max_turns")], "rationale": {"x": 1}},
            "edit: field 'rationale' must be a string, not an object",
            id="rationale-dict",
        ),
        pytest.param(
            {"ops": [json_op("set_max_turns")], "targets": None},
            "edit: field 'targets' must be a string, not null",
            id="targets-null",
        ),
        pytest.param(
            {"ops": [json_op("set_max_turns")], "confidence": 0.9},
            "edit: field 'confidence' is not a field of an edit (fields: rationale, targets, ops)",
            id="edit-extra-field",
        ),
    ],
)
def test_a_malformed_edit_object_is_one_error(obj, needle):
    msg = one_line_edit_error(lambda: apply_edit(BASE, edit_from_json(obj)))
    assert msg.startswith(needle), msg


def _deep(levels: int) -> dict[str, Any]:
    root: dict[str, Any] = {"type": "object"}
    node = root
    for _ in range(levels):
        node["x"] = {}
        node = node["x"]
    return root


def _cyclic() -> dict[str, Any]:
    d: dict[str, Any] = {"type": "object"}
    d["self"] = d
    return d


NON_JSON_PARAMETERS = [
    pytest.param(
        {"type": "object", "maximum": float("inf")}, "inf, which is not a JSON number at maximum", id="inf"
    ),
    pytest.param({"type": "object", "maximum": float("nan")}, "nan, which is not a JSON number", id="nan"),
    pytest.param(
        {"type": "object", "maximum": 2**70}, "integer outside the 64-bit range at maximum", id="huge-int"
    ),
    pytest.param({"type": "object", "enum": {1, 2}}, "holds a set, which is not a JSON value", id="set"),
    pytest.param({"type": "object", 3: "x"}, "has an integer as a key", id="int-key"),
    pytest.param({"type": "object", "d\ud800": 1}, "not valid Unicode", id="surrogate-key"),
    pytest.param({"type": "object", "x": b"bytes"}, "holds a bytes", id="bytes"),
    pytest.param(_deep(40), "nested deeper than 32 levels", id="deep"),
    pytest.param(_deep(100_000), "nested deeper than 32 levels", id="very-deep"),
    pytest.param(_cyclic(), "nested deeper than 32 levels", id="cyclic"),
]


@pytest.mark.parametrize(("parameters", "needle"), NON_JSON_PARAMETERS)
def test_a_value_json_cannot_carry_is_one_error(parameters, needle):
    msg = one_line_edit_error(lambda: from_json_and_apply(json_op("alter_tool", parameters=parameters)))
    assert msg.startswith("op 0 (alter_tool): field 'parameters' "), msg
    assert needle in msg, msg
    msg = one_line_edit_error(lambda: apply(AlterTool("read_sensor", parameters=parameters)))
    assert msg.startswith("op 0 (AlterTool): field 'parameters' ") and needle in msg, msg
    msg = one_line_edit_error(
        lambda: apply(AddHook(HookSpec("on_finish", "finish_checklist", {"items": [parameters]})))
    )
    assert msg.startswith("op 0 (AddHook): field 'hook.params' "), msg


def test_non_json_values_in_text_fields_and_deep_edits_are_one_error():
    msg = one_line_edit_error(lambda: from_json_and_apply(json_op("set_section", text="bad \ud800 text")))
    assert msg.startswith("op 0 (set_section): field 'text' is not valid Unicode"), msg
    msg = one_line_edit_error(lambda: from_json_and_apply(json_op("set_max_turns", max_turns=10**5000)))
    assert msg.startswith("op 0 (set_max_turns): field 'max_turns' must be a 64-bit integer"), msg
    nested: list[Any] = []
    for _ in range(100_000):
        nested = [nested]
    msg = one_line_edit_error(lambda: apply_edit(BASE, edit_from_json({"ops": nested})))
    assert msg.startswith("op 0: must be an object with a string 'op', not a list"), msg


# The dataclass ops, typed wrongly field by field, as a stored record or other code could hand them over
# (no type checker runs on this file: the misuse is deliberate).
VALID_DATACLASS_OPS = [
    SetSection("role", "You audit sensors carefully."),
    AppendSection("rules", "Check units."),
    RemoveSection("rules"),
    AddTool(ToolSpec("list_sensors", "List sensors.", OBJ, "iot.list")),
    AlterTool("read_sensor", "Read one sensor.", OBJ),
    RemoveTool("read_sensor"),
    AddHook(HookSpec("on_finish", "finish_checklist", {"items": ["all read"]})),
    RemoveHook("before_call", "validate_args"),
    SetContextPolicy(ContextPolicy("summarise", 4000, 3)),
    AddRecipe(Recipe("drift", "Drift above 2%/h is an anomaly.")),
    SetMaxTurns(30),
]


def _leaf_fields(value: Any, prefix: str = "") -> list[tuple[str, str, Callable[[Any], Any]]]:
    """(path, annotation, rebuild-with-this-field-replaced) for every scalar or dict field, one level into
    the wrapped parts (AddTool's ToolSpec ...)."""
    out = []
    for f in dataclasses.fields(value):
        inner = getattr(value, f.name)
        if dataclasses.is_dataclass(inner):
            for path, annotation, rebuild in _leaf_fields(inner, f"{prefix}{f.name}."):
                out.append(
                    (path, annotation, lambda v, r=rebuild, n=f.name: dataclasses.replace(value, **{n: r(v)}))
                )
        else:
            out.append(
                (prefix + f.name, str(f.type), lambda v, n=f.name: dataclasses.replace(value, **{n: v}))
            )
    return out


def _wrong_dataclass_fields() -> list[Any]:
    cases = []
    for op in VALID_DATACLASS_OPS:
        for path, annotation, rebuild in _leaf_fields(op):
            wrong = (
                WRONG_FOR_OBJECT
                if "dict" in annotation
                else WRONG_FOR_INT
                if annotation == "int"
                else WRONG_FOR_STRING
            )
            if "None" not in annotation:
                wrong = [*wrong, None]
            cases += [
                pytest.param(
                    rebuild(v), type(op).__name__, path, id=f"{type(op).__name__}-{path}-{type(v).__name__}"
                )
                for v in wrong
            ]
    return cases


def test_every_valid_dataclass_op_template_applies():
    for op in VALID_DATACLASS_OPS:
        assert apply(op) != BASE, op


@pytest.mark.parametrize(("op", "op_name", "path"), _wrong_dataclass_fields())
def test_a_wrongly_typed_dataclass_op_is_one_error_naming_the_field(op, op_name, path):
    first = SetSection("notes", "n")
    msg = one_line_edit_error(lambda: apply_edit(BASE, HarnessEdit(ops=(first, op))))
    assert msg.startswith(f"op 1 ({op_name}): field '{path}' must be "), msg


@pytest.mark.parametrize(
    ("op", "needle"),
    [
        pytest.param(
            AddHook({"event": "on_finish"}),
            "op 0 (AddHook): hook must be a HookSpec, not an object",
            id="hook-a-dict",
        ),
        pytest.param(
            SetContextPolicy("summarise"),
            "op 0 (SetContextPolicy): policy must be a ContextPolicy",
            id="policy-a-string",
        ),
        pytest.param(
            AddRecipe(None), "op 0 (AddRecipe): recipe must be a Recipe, not null", id="recipe-none"
        ),
        pytest.param(
            {"op": "set_max_turns", "max_turns": 30}, "op 0 (dict): unknown operation", id="json-not-parsed"
        ),
    ],
)
def test_a_dataclass_op_wrapping_the_wrong_thing_is_one_error(op, needle):
    msg = one_line_edit_error(lambda: apply(op))
    assert msg.startswith(needle), msg


def test_a_wrongly_typed_edit_or_harness_is_one_error():
    assert one_line_edit_error(lambda: apply_edit(BASE, {"ops": []})).startswith("edit must be a HarnessEdit")
    assert "ops must be a tuple" in one_line_edit_error(
        lambda: apply_edit(BASE, HarnessEdit(ops=SetMaxTurns(3)))
    )
    assert "rationale and targets must be strings" in one_line_edit_error(
        lambda: apply_edit(BASE, HarnessEdit(ops=(SetMaxTurns(3),), rationale={"x": 1}))
    )
    broken_tool = dataclasses.replace(BASE, tools=(ToolSpec({"x": 1}, "d", OBJ, "i"), *BASE.tools[1:]))
    msg = one_line_edit_error(lambda: apply_edit(broken_tool, HarnessEdit(ops=(SetMaxTurns(30),))))
    assert msg.startswith("harness field 'tools[0].name' must be a string, not an object"), msg
    assert one_line_edit_error(lambda: validate_harness(broken_tool)) == msg
    broken_section = dataclasses.replace(BASE, system_prompt=(PromptSection("rules", {"x": 1}),))
    msg = one_line_edit_error(
        lambda: apply_edit(broken_section, HarnessEdit(ops=(AppendSection("rules", "more"),)))
    )
    assert msg.startswith("harness field 'system_prompt[0].text' must be a string"), msg
    msg = one_line_edit_error(lambda: validate_harness(dataclasses.replace(BASE, recipes=({"name": "r"},))))
    assert msg.startswith("harness recipes[0] must be a Recipe, not an object"), msg
    msg = one_line_edit_error(lambda: validate_harness(dataclasses.replace(BASE, max_turns="24")))
    assert msg.startswith("harness max_turns must be an integer, not a string"), msg


def test_a_stored_edit_decoded_with_wrong_types_is_one_error():
    """What the store's codec decodes is typed only by its tags: a record written by a buggy producer
    comes back as dataclasses with wrong field types, and is refused like any other bad edit."""
    from coevolve.codec import from_plain

    record = {
        "~t": "HarnessEdit",
        "rationale": "r",
        "targets": "t",
        "ops": [{"~t": "AddRecipe", "recipe": {"~t": "Recipe", "name": {"x": 1}, "text": "t"}}],
    }
    edit = from_plain(record)
    assert isinstance(edit, HarnessEdit)
    msg = one_line_edit_error(lambda: apply_edit(BASE, edit))
    assert msg.startswith("op 0 (AddRecipe): field 'recipe.name' must be a string, not an object"), msg


def test_malformed_proposer_answers_are_recorded_failed_proposals():
    from coevolve.agents.meta.proposer import parse_response

    answer = json.dumps(
        {
            "edits": [
                {"rationale": "crash 1", "ops": [CRASH_ADD_TOOL]},
                {"rationale": "crash 2", "ops": [CRASH_ADD_RECIPE]},
                {"rationale": "nan", "ops": [json_op("add_hook", params={"items": [float("nan")]})]},
                {"rationale": "fine", "targets": "other", "ops": [json_op("set_max_turns")]},
                "not an edit",
            ]
        }
    )
    props = parse_response(f"Here you go:\n```json\n{answer}\n```", BASE)
    assert [p.candidate is None for p in props] == [True, True, True, False, True]
    assert props[0].error.startswith("op 0 (add_tool): field 'name' must be a string"), props[0].error
    assert props[1].error.startswith("op 0 (add_recipe): field 'name' must be a string"), props[1].error
    assert "not a JSON number" in props[2].error, props[2].error
    assert props[3].error is None and props[3].candidate.max_turns == 30
    assert props[4].error.startswith("an edit must be a JSON object"), props[4].error
    assert all(p.edit is None and "\n" not in p.error for p in props if p.error)


# ---------------------------------------------------------------------------------- limits (issue 24.6)
def _quickly(fn: Callable[[], object], seconds: float = 1.0) -> object:
    """`fn`'s result, asserting that it took well under a second (a cap is checked before the work)."""
    import time

    started = time.perf_counter()
    result = fn()
    assert time.perf_counter() - started < seconds
    return result


def test_an_edit_at_the_op_cap_applies_and_one_op_more_is_refused_before_any_op_is_read():
    at_cap = [json_op("set_max_turns", max_turns=25 + i % 2) for i in range(MAX_OPS)]
    h = _quickly(lambda: from_json_and_apply(*at_cap))
    assert h.max_turns == 25 + (MAX_OPS - 1) % 2
    msg = one_line_edit_error(lambda: from_json_and_apply(*at_cap, json_op("set_max_turns")))
    assert msg == f"edit has {MAX_OPS + 1} operations, over the {MAX_OPS} limit (split it into several edits)"
    # a million ops, none even an object: refused by count at once, no op parsed
    huge = {"ops": [None] * 1_000_000}
    msg = _quickly(lambda: one_line_edit_error(lambda: edit_from_json(huge)))
    assert msg.startswith("edit has 1000000 operations, over the 64 limit"), msg
    million = HarnessEdit(ops=(SetMaxTurns(30),) * 1_000_000)
    msg = _quickly(lambda: one_line_edit_error(lambda: apply_edit(BASE, million)))
    assert msg.startswith("edit has 1000000 operations"), msg


@pytest.mark.parametrize(
    ("make", "present", "cap", "what", "op_name"),
    [
        pytest.param(lambda i: SetSection(f"s{i}", "text"), len(BASE.system_prompt), MAX_SECTIONS,
                     "prompt sections", "SetSection", id="sections"),
        pytest.param(lambda i: AddTool(ToolSpec(f"t{i}", "d", OBJ, "x")), len(BASE.tools), MAX_TOOLS,
                     "tools", "AddTool", id="tools"),
        pytest.param(lambda i: AddRecipe(Recipe(f"r{i}", "text")), len(BASE.recipes), MAX_RECIPES,
                     "recipes", "AddRecipe", id="recipes"),
    ],
)
def test_a_harness_at_a_part_cap_applies_and_one_part_more_is_refused(make, present, cap, what, op_name):
    room = cap - present
    assert room <= MAX_OPS
    h = _quickly(lambda: apply(*(make(i) for i in range(room))))
    assert len(h.system_prompt) + len(h.tools) + len(h.recipes) == len(BASE.system_prompt) + len(BASE.tools) + len(
        BASE.recipes
    ) + room
    ops = tuple(make(i) for i in range(room + 1))
    msg = one_line_edit_error(lambda: apply(*ops))
    assert msg == f"op {room} ({op_name}): the harness would have {cap + 1} {what}, over the {cap} limit", msg
    # the full harness takes no more of them, and a stored harness past the cap is refused as it is read
    msg = one_line_edit_error(lambda: apply_edit(h, HarnessEdit(ops=(make(room),))))
    assert msg.startswith(f"op 0 ({op_name}): the harness would have {cap + 1} {what}"), msg
    field = {"prompt sections": "system_prompt", "tools": "tools", "recipes": "recipes"}[what]
    over = dataclasses.replace(BASE, **{field: getattr(BASE, field) * (8000 // max(1, present))})
    n = len(getattr(over, field))
    for check in (lambda: validate_harness(over), lambda: apply_edit(over, HarnessEdit(ops=(SetMaxTurns(30),)))):
        assert _quickly(lambda check=check: one_line_edit_error(check)) == f"harness has {n} {what}, over the {cap} limit"


def test_a_harness_at_the_size_cap_applies_and_one_character_more_is_refused():
    room = MAX_HARNESS_CHARS - harness_chars(BASE)
    names = [f"n{i}" for i in range(room // MAX_TEXT + 1)]
    room -= sum(len(n) for n in names)
    texts = [MAX_TEXT] * (room // MAX_TEXT) + [room % MAX_TEXT]
    assert all(texts) and len(texts) == len(names)
    h = _quickly(lambda: apply(*(SetSection(n, "x" * size) for n, size in zip(names, texts))))
    assert harness_chars(h) == MAX_HARNESS_CHARS
    msg = one_line_edit_error(lambda: apply_edit(h, HarnessEdit(ops=(AppendSection(names[-1], "y"),))))
    # appending adds "\n" + "y": two characters
    assert msg == f"harness holds {MAX_HARNESS_CHARS + 2} characters, over the {MAX_HARNESS_CHARS} limit", msg
    # what a tool's schema carries counts too
    tool = ToolSpec("t", "d", OBJ, "x")
    msg = one_line_edit_error(lambda: apply_edit(h, HarnessEdit(ops=(AddTool(tool),))))
    assert msg == f"harness holds {MAX_HARNESS_CHARS + 3 + len(json.dumps(OBJ))} characters, over the {MAX_HARNESS_CHARS} limit"


def test_an_edit_carrying_too_much_is_refused_even_when_the_harness_stays_small():
    per_op = MAX_TEXT - 10
    fits = MAX_EDIT_CHARS // (per_op + len("notes"))
    h = _quickly(lambda: apply(*(SetSection("notes", f"{i:02d}" + "x" * (per_op - 2)) for i in range(fits))))
    assert len(h.section("notes").text) == per_op
    ops = [SetSection("notes", f"{i:02d}" + "x" * (per_op - 2)) for i in range(fits + 1)]
    msg = one_line_edit_error(lambda: apply(*ops))
    assert msg == f"op {fits} (SetSection): the edit's operations carry over {MAX_EDIT_CHARS} characters", msg


def test_an_edit_rationale_or_targets_past_the_text_cap_is_refused():
    assert apply_edit(BASE, HarnessEdit(ops=(SetMaxTurns(30),), rationale="r" * MAX_TEXT)).max_turns == 30
    for field in ("rationale", "targets"):
        edit = HarnessEdit(ops=(SetMaxTurns(30),), **{field: "r" * (MAX_TEXT + 1)})
        msg = one_line_edit_error(lambda edit=edit: apply_edit(BASE, edit))
        assert msg == f"edit {field} is {MAX_TEXT + 1} characters, over the {MAX_TEXT} limit", msg


def test_applying_an_edit_builds_the_harness_once_not_once_per_op(monkeypatch):
    """Linear application: ops change a working copy keyed by name and the harness is built once at the
    end. Rebuilding every part on every op (the old way) made 10^6 `set_section` ops quadratic."""
    full = apply(*(SetSection(f"s{i}", "t") for i in range(MAX_SECTIONS - len(BASE.system_prompt))))
    built = []
    real_init = Harness.__init__

    def counting_init(self, *args, **kwargs):
        built.append(1)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(Harness, "__init__", counting_init)
    edit = HarnessEdit(ops=tuple(SetSection(f"s{i % 60}", f"v{i}") for i in range(MAX_OPS)))
    h = _quickly(lambda: apply_edit(full, edit))
    assert len(built) == 1
    assert h.section("s3").text == "v63" and len(h.system_prompt) == MAX_SECTIONS
