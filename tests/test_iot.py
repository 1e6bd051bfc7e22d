"""IoT family: checker mutations per trap, tools, and the harness lever on the weak model."""

from __future__ import annotations

import json

import pytest

from agents.report import failure_causes
from harness_store.edits import apply_edit
from harness_store.values import AddHook, AddRecipe, HarnessEdit, HookSpec, Recipe
from tasks import get_family
from tasks.base import Knowledge
from tasks.iot import detect
from tests.rollouts import pass_rate, rollout_all

FAM = get_family("iot")
TRAP_FACT = {
    "spike": "sustained_only",
    "boundary": "inclusive_ranges",
    "override": "machine_overrides",
    "null": "null_is_offline",
}


def instance_with(trap: str):
    for inst in FAM.generate("train"):
        if trap in FAM.world(inst.seed, inst.params).traps:
            return inst
    raise AssertionError(f"no train instance has trap {trap}")


def solved_env(inst, knowledge: Knowledge):
    env = FAM.make_env(inst)
    for step in FAM.plan(inst, knowledge):
        assert not env.call(step.tool, dict(step.args)).error
    return env


@pytest.mark.parametrize("trap", sorted(TRAP_FACT))
def test_each_trap_left_unhandled_fails_the_checker(trap):
    inst = instance_with(trap)
    full = FAM.full_knowledge()
    assert FAM.check(solved_env(inst, full)).passed
    without = Knowledge(full.facts - {TRAP_FACT[trap]}, full.constraints)
    outcome = FAM.check(solved_env(inst, without))
    assert not outcome.passed
    assert outcome.detail["missing"] or outcome.detail["extra"]


def test_missing_peak_field_fails_when_asked():
    inst = instance_with("peak")
    full = FAM.full_knowledge()
    assert not FAM.check(solved_env(inst, Knowledge(full.facts, frozenset()))).passed


def test_report_at_wrong_key_or_malformed_fails():
    inst = FAM.generate("val", 1)[0]
    w = FAM.world(inst.seed, inst.params)
    report = json.dumps(detect(w, FAM.full_knowledge()))
    env = FAM.make_env(inst)
    env.call("upload_report", {"key": "report.json", "content": report})
    assert not FAM.check(env).passed
    env.call("upload_report", {"key": w.key, "content": "not json"})
    assert not FAM.check(env).passed
    env.call("upload_report", {"key": w.key, "content": report})
    assert FAM.check(env).passed


def test_sql_is_read_only_and_errors_are_observations():
    env = FAM.make_env(FAM.generate("val", 1)[0])
    r = env.call("sql_query", {"query": "DELETE FROM readings"})
    assert r.error and r.content.startswith("error")
    r = env.call("sql_query", {"query": "SELECT count(*) AS n FROM readings"})
    assert not r.error and "n" in r.content
    assert env.call("nope", {}).error
    assert env.call("sql_query", {"query": 3}).error


@pytest.fixture(scope="module")
def val():
    return FAM.generate("val", 50)


def test_weak_fails_far_more_than_expert(val):
    h = FAM.baseline_harness()
    weak = pass_rate(rollout_all(val, h, "synthetic/weak"))
    expert = pass_rate(rollout_all(val, h, "synthetic/expert"))
    assert expert >= 0.9 and weak <= 0.4, (expert, weak)


def test_missing_domain_recipe_raises_weak_pass_rate(val):
    base = FAM.baseline_harness()
    before = rollout_all(val, base, "synthetic/weak")
    # the failures name the missing fact; state it in a recipe
    missing = [f for t in before for c in t.causes if c.get("category") == "implicit-knowledge" for f in c["facts"]]
    top = max(set(missing), key=missing.count)
    fact = next(f for f in FAM.facts if f.id == top)
    edited = apply_edit(base, HarnessEdit((AddRecipe(Recipe(fact.id, fact.statement)),), rationale="state missing fact"))
    after = rollout_all(val, edited, "synthetic/weak")
    assert pass_rate(after) > pass_rate(before) + 0.05, (pass_rate(before), pass_rate(after))


def test_validation_hook_repairs_weak_tool_errors(val):
    base = FAM.baseline_harness()
    hooked = apply_edit(base, HarnessEdit((AddHook(HookSpec("before_call", "validate_args")),)))

    def tool_use_failures(trajs):
        return failure_causes(trajs).get("tool-use", 0)

    before = rollout_all(val, base, "synthetic/weak")
    after = rollout_all(val, hooked, "synthetic/weak")
    assert tool_use_failures(before) > 0
    assert tool_use_failures(after) == 0
    assert any("hook:validate_args" in e for t in after for turn in t.turns for e in turn.events)
