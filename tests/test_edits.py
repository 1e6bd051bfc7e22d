"""`apply_edit`: every operation, every way an edit is refused, and the stability of harness ids."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness_store.codec import content_id
from harness_store.edits import EditError, apply_edit
from harness_store.values import (
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
        "from harness_store.edits import apply_edit\n"
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
