"""Payroll family: checker mutations per injected error and trap, read-only data, mail checks, and the
harness lever (a recipe stating the missing facts) on the weak model."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from agents.report import failure_causes
from harness_store.edits import apply_edit
from harness_store.values import AddHook, AddRecipe, HarnessEdit, HookSpec, Recipe
from tasks import get_family
from tasks.base import Knowledge
from tasks.payroll import ERROR_TYPES, audit
from tests.rollouts import pass_rate, rollout_all

FAM = get_family("payroll")
FULL = FAM.full_knowledge()
TRAP_FACT = {
    "ca_daily": "ca_daily_overtime",
    "salaried_long_week": "salaried_exempt",
    "rate_change": "rate_effective_date",
    "late_termination": "final_pay_through_termination",
}
POOL = FAM.generate("train") + FAM.generate("val")


def instance_where(pred):
    for inst in POOL:
        if pred(FAM.world(inst.seed, inst.params)):
            return inst
    raise AssertionError("no instance matches")


def solved_env(inst, knowledge: Knowledge = FULL):
    env = FAM.make_env(inst)
    for step in FAM.plan(inst, knowledge):
        assert not env.call(step.tool, dict(step.args)).error, step.tool
    return env


def test_reference_passes_and_truth_is_never_empty():
    for inst in POOL[:30]:
        w = FAM.world(inst.seed, inst.params)
        assert audit(w, FULL), inst.id
        assert FAM.reference_solve(inst)[0].passed, inst.id


def test_empty_agent_scores_zero():
    for inst in POOL[:10]:
        outcome = FAM.check(FAM.make_env(inst))
        assert not outcome.passed and outcome.score == 0.0


@pytest.mark.parametrize("kind", ERROR_TYPES)
def test_each_injected_error_left_unreported_fails(kind):
    inst = instance_where(lambda w: any(k == kind for _, _, k in w.injected))
    w = FAM.world(inst.seed, inst.params)
    truth = audit(w, FULL)
    assert any(f["error_type"] == kind for f in truth)
    plan = FAM.plan(inst, FULL)
    for mutated in (
        [f for f in truth if f["error_type"] != kind],  # finding dropped
        [{**f, "corrected_amount": f["corrected_amount"] + 25.0} if f["error_type"] == kind else f for f in truth],
        [{**f, "error_type": "wrong_rate" if kind != "wrong_rate" else "missed_overtime"}
         if f["error_type"] == kind else f for f in truth],
    ):  # fmt: skip
        env = FAM.make_env(inst)
        for step in plan:
            args = {"content": json.dumps(mutated)} if step.tool == "write_audit_report" else dict(step.args)
            assert not env.call(step.tool, args).error
        outcome = FAM.check(env)
        assert not outcome.passed and outcome.detail["missing"], kind


@pytest.mark.parametrize("trap", sorted(TRAP_FACT))
def test_each_trap_left_unhandled_fails_the_checker(trap):
    hits = [i for i in POOL if trap in FAM.world(i.seed, i.params).traps]
    assert len(hits) >= 3
    without = replace(FULL, facts=FULL.facts - {TRAP_FACT[trap]})
    for inst in hits:
        assert FAM.check(solved_env(inst)).passed
        outcome = FAM.check(solved_env(inst, without))
        assert not outcome.passed and (outcome.detail["missing"] or outcome.detail["extra"]), inst.id


def test_facts_matter_only_where_their_trap_is():
    """A missing uncommon fact never breaks an instance without its trap (the traps are the only lever)."""
    for trap, fact in TRAP_FACT.items():
        without = replace(FULL, facts=FULL.facts - {fact})
        for inst in POOL[:40]:
            if trap not in FAM.world(inst.seed, inst.params).traps:
                assert FAM.check(solved_env(inst, without)).passed, (fact, inst.id)


def test_recomputed_deductions_change_corrected_amounts():
    without = replace(FULL, facts=FULL.facts - {"deductions_follow_gross"})
    broken = [i for i in POOL[:40] if not FAM.check(solved_env(i, without)).passed]
    assert broken


def test_missing_cc_fails_when_asked():
    inst = instance_where(lambda w: w.cc_required)
    assert FAM.check(solved_env(inst)).passed
    outcome = FAM.check(solved_env(inst, replace(FULL, constraints=frozenset())))
    assert not outcome.passed and outcome.detail["mail"]


def _with_mail(inst, **change):
    plan = FAM.plan(inst, FULL)
    env = FAM.make_env(inst)
    for step in plan:
        args = {**step.args, **change} if step.tool == "send_email" else dict(step.args)
        env.call(step.tool, args)
    return FAM.check(env)


def test_mail_must_reach_the_manager_with_the_exact_subject_and_no_one_else():
    inst = instance_where(lambda w: not w.cc_required)
    w = FAM.world(inst.seed, inst.params)
    assert _with_mail(inst).passed
    assert not _with_mail(inst, to=f"payroll-noreply@{w.domain}").passed
    assert not _with_mail(inst, subject="Payroll audit").passed
    assert not _with_mail(inst, cc=["someone@elsewhere.example"]).passed
    assert not _with_mail(inst, cc=[w.controller[1]]).passed  # cc not asked for


def test_no_mail_or_malformed_report_fails():
    inst = POOL[0]
    plan = FAM.plan(inst, FULL)
    env = FAM.make_env(inst)
    for step in plan:
        if step.tool != "send_email":
            env.call(step.tool, dict(step.args))
    assert not FAM.check(env).passed
    env = FAM.make_env(inst)
    assert env.call("write_audit_report", {"content": "not json"}).error
    assert env.call("write_audit_report", {"content": '{"a": 1}'}).error
    assert env.report is None


def test_extra_or_duplicated_findings_fail():
    inst = POOL[1]
    w = FAM.world(inst.seed, inst.params)
    truth = audit(w, FULL)
    extra = {"employee_id": w.employees[0].id, "period": w.periods[0], "error_type": "wrong_rate",
             "corrected_amount": 1.0}  # fmt: skip
    for report in (truth + [extra], truth + truth[:1]):
        env = solved_env(inst)
        env.call("write_audit_report", {"content": json.dumps(report)})
        assert not FAM.check(env).passed


def test_payroll_data_is_read_only_and_tampering_is_detected():
    inst = POOL[2]
    env = solved_env(inst)
    for q in ("UPDATE pay_stubs SET net = 0", "DELETE FROM timesheets", "PRAGMA query_only = OFF",
              "DROP TABLE employees", "ATTACH DATABASE ':memory:' AS x"):  # fmt: skip
        r = env.call("sql_query", {"query": q})
        assert r.error and "read-only" in r.content, q
    assert FAM.check(env).passed
    env.db.set_authorizer(None)  # a tool that bypassed the guard
    env.db.execute("UPDATE pay_stubs SET net = net + 1")
    outcome = FAM.check(env)
    assert not outcome.passed and "altered" in outcome.detail["reason"]


def test_sql_errors_are_observations_and_multi_statement_works():
    env = FAM.make_env(POOL[0])
    r = env.call("sql_query", {"query": "SELECT count(*) AS n FROM employees; SELECT 'a;b' AS s"})
    assert not r.error and "a;b" in r.content and r.content.count("rows)") == 2
    assert env.call("sql_query", {"query": "SELECT * FROM nope"}).error
    slow = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
    assert env.call("sql_query", {"query": slow}).error
    assert env.call("send_email", {"to": "a@b.c, d@e.f", "subject": "s", "body": "b"}).error
    assert env.call("send_email", {"to": "a@b.c", "subject": "s", "body": "b", "cc": "x@y.z"}).error


def test_difficulty_raises_trap_rate():
    def traps(d):
        return sum(len(FAM.world(i.seed, i.params).traps) for i in FAM.generate("train", difficulty=d))

    assert traps(1) < traps(2) < traps(3)


def test_fact_statements_state_themselves():
    for item in (*FAM.facts, *FAM.constraints):
        assert item.stated_in(item.statement), item.id
        assert not item.stated_in(FAM.baseline_harness().render_system()), item.id
    assert sum(f.common for f in FAM.facts) <= 1


@pytest.fixture(scope="module")
def weak_baseline():
    val = FAM.generate("val")
    return val, rollout_all(val, FAM.baseline_harness(), "synthetic/weak")


def test_recipe_stating_missing_facts_raises_weak_pass_rate(weak_baseline):
    val, before = weak_baseline
    missing = {f for t in before for c in t.causes if c.get("category") == "implicit-knowledge" for f in c["facts"]}
    assert missing
    recipes = tuple(AddRecipe(Recipe(f.id, f.statement)) for f in FAM.facts if f.id in missing)
    edited = apply_edit(FAM.baseline_harness(), HarnessEdit(recipes, rationale="state the missing pay rules"))
    after = rollout_all(val, edited, "synthetic/weak")
    assert pass_rate(after) > pass_rate(before) + 0.1, (pass_rate(before), pass_rate(after))


def test_validation_hook_repairs_weak_tool_errors(weak_baseline):
    val, before = weak_baseline
    hooked = apply_edit(FAM.baseline_harness(), HarnessEdit((AddHook(HookSpec("before_call", "validate_args")),)))
    after = rollout_all(val, hooked, "synthetic/weak")
    assert failure_causes(before).get("tool-use", 0) > 0
    assert failure_causes(after).get("tool-use", 0) == 0
    assert pass_rate(after) > pass_rate(before)
