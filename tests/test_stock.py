"""Stock alerting family: checker mutations, trap branches, and a harness edit that helps the weak agent."""

from __future__ import annotations

from dataclasses import replace

import pytest

from harness_store.edits import apply_edit
from harness_store.values import AddRecipe, HarnessEdit, Recipe
from tasks import get_family
from tasks.base import Knowledge
from tasks.stock import SHEET, StockEnv
from tests.rollouts import pass_rate, rollout_all

FAMILY = get_family("stock")
FULL = FAMILY.full_knowledge()
TRAP_FACT = {
    "at_threshold": "strictly_below",
    "reserved": "available_stock",
    "discontinued": "skip_discontinued",
    "open_alert": "open_alert_dedup",
    "case_pack": "case_pack",
}


def run_plan(inst, knowledge: Knowledge) -> StockEnv:
    env = FAMILY.make_env(inst)
    for step in FAMILY.plan(inst, knowledge):
        result = env.call(step.tool, dict(step.args))
        assert not result.error, result.content
    assert isinstance(env, StockEnv)
    return env


def with_trap(trap: str, n: int = 3) -> list:
    found = []
    for split in ("val", "train", "test"):
        for inst in FAMILY.generate(split, difficulty=3):
            if trap in FAMILY.world(inst.seed, inst.params).traps:
                found.append(inst)
                if len(found) == n:
                    return found
    return found


def test_reference_passes_and_empty_agent_scores_zero():
    for inst in FAMILY.generate("val", 10):
        outcome, _ = FAMILY.reference_solve(inst)
        assert outcome.passed and outcome.score == 1.0
        empty = FAMILY.check(FAMILY.make_env(inst))
        assert not empty.passed and empty.score == 0.0


@pytest.mark.parametrize("trap,fact", sorted(TRAP_FACT.items()))
def test_unknown_fact_fails_where_its_trap_is_present(trap, fact):
    instances = with_trap(trap)
    assert instances, f"no instance with trap {trap}"
    for inst in instances:
        k = replace(FULL, facts=FULL.facts - {fact})
        outcome = FAMILY.check(run_plan(inst, k))
        assert not outcome.passed, (inst.id, trap)
        assert outcome.score < 1.0


def test_unknown_facts_are_harmless_without_their_traps():
    for inst in FAMILY.generate("val"):
        traps = set(FAMILY.world(inst.seed, inst.params).traps)
        missing = {f for t, f in TRAP_FACT.items() if t not in traps}
        k = replace(FULL, facts=FULL.facts - missing)
        assert FAMILY.check(run_plan(inst, k)).passed, inst.id


def test_skipped_priority_constraint_fails():
    for inst in with_trap("urgent"):
        outcome = FAMILY.check(run_plan(inst, replace(FULL, constraints=frozenset())))
        assert not outcome.passed


@pytest.mark.parametrize("cut", [0, 1, 2])
def test_unseen_observation_fails(cut):
    for inst in FAMILY.generate("val", 5):
        outcome = FAMILY.check(run_plan(inst, replace(FULL, cut=frozenset({cut}))))
        assert not outcome.passed, (inst.id, cut)


def _reference_env(inst) -> StockEnv:
    return run_plan(inst, FULL)


def test_damaged_existing_row_fails():
    inst = FAMILY.instance_at("val", 0)
    env = _reference_env(inst)
    header = env.sheets[SHEET][0]
    col = header[header.index("Status")]
    old = env.sheets[SHEET][1][header.index("Status")]
    env.call(
        "update_cell", {"sheet": SHEET, "row": 2, "column": col, "value": "open" if old != "open" else "x"}
    )
    outcome = FAMILY.check(env)
    assert not outcome.passed and outcome.score == 0.0


def test_supplier_sheet_change_fails():
    inst = FAMILY.instance_at("val", 1)
    env = _reference_env(inst)
    env.call("update_cell", {"sheet": "Suppliers", "row": 2, "column": "Email", "value": "x@y.example"})
    assert not FAMILY.check(env).passed


def test_duplicate_or_extra_email_fails():
    inst = FAMILY.instance_at("val", 2)
    emails = FAMILY.plan(inst, FULL)[4].args["emails"]
    env = _reference_env(inst)
    env.call("send_emails", {"emails": emails[:1]})
    assert not FAMILY.check(env).passed
    env = _reference_env(inst)
    env.call("send_emails", {"emails": [{**emails[0], "to": "someone@else.example"}]})
    assert not FAMILY.check(env).passed


def test_duplicate_row_or_wrong_cell_fails():
    inst = FAMILY.instance_at("val", 3)
    rows = FAMILY.plan(inst, FULL)[3].args["rows"]
    env = _reference_env(inst)
    env.call("append_rows", {"sheet": SHEET, "rows": rows[:1]})
    assert not FAMILY.check(env).passed
    env = _reference_env(inst)
    last = len(env.sheets[SHEET])
    env.call("update_cell", {"sheet": SHEET, "row": last, "column": "Reorder Qty", "value": 99999})
    assert not FAMILY.check(env).passed


def test_numbers_as_strings_are_accepted():
    inst = FAMILY.instance_at("val", 4)
    env = FAMILY.make_env(inst)
    for step in FAMILY.plan(inst, FULL):
        args = dict(step.args)
        if step.tool == "append_rows":
            args["rows"] = [[str(c) for c in r] for r in args["rows"]]
        env.call(step.tool, args)
    assert FAMILY.check(env).passed


def test_bad_arguments_give_error_observations():
    env = FAMILY.make_env(FAMILY.instance_at("val", 0))
    for tool, args in [
        ("read_files", {"paths": ["nope.txt"]}),
        ("read_sheet", {"sheet": ["x"]}),
        ("append_rows", {"sheet": SHEET, "rows": [["too", "short"]]}),
        ("update_cell", {"sheet": SHEET, "row": 1, "column": "SKU", "value": "x"}),
        ("send_emails", {"emails": [{"to": "not an address", "subject": "s", "body": "b"}]}),
        (
            "send_emails",
            {"emails": [{"to": "a@b.example", "subject": "s", "body": "b", "priority": "urgent"}]},
        ),
        ("list_products", {"verbose": True}),
    ]:
        result = env.call(tool, args)
        assert result.error and result.content.startswith("error"), (tool, result.content)
    assert env.sent == []


def test_stating_missing_facts_raises_weak_pass_rate():
    val = FAMILY.generate("val", 30)  # 30 of 50 keeps the test fast; the gap shows on any prefix
    base = FAMILY.baseline_harness()
    uncommon = [f for f in FAMILY.facts if not f.common]
    assert all(f.stated_in(f.statement) for f in FAMILY.facts)
    assert all(c.stated_in(c.statement) for c in FAMILY.constraints)
    edit = HarnessEdit(
        ops=tuple(AddRecipe(Recipe(f.id, f.statement)) for f in uncommon),
        rationale="state the stock domain rules",
        targets="implicit-knowledge",
    )
    before = pass_rate(rollout_all(val, base, "synthetic/weak"))
    after = pass_rate(rollout_all(val, apply_edit(base, edit), "synthetic/weak"))
    print(f"weak on val[:30]: {before:.2f} -> {after:.2f}")
    assert after > before + 0.05, (before, after)
