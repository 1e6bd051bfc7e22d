"""Budget family: checker mutations per policy rule and trap, overspending, comments, tool validation, and
the harness lever (a recipe stating the missing facts) on the weak model."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agents.report import failure_causes
from harness_store.edits import apply_edit
from harness_store.values import AddHook, AddRecipe, HarnessEdit, HookSpec, Recipe
from tasks import get_family
from tasks.base import Knowledge
from tasks.budget import REASONS, decide
from tests.rollouts import pass_rate, rollout_all

FAM = get_family("budget")
FULL = FAM.full_knowledge()
TRAP_FACT = {
    "running_balance": "posted_balance",
    "split_purchase": "split_purchases",
    "renamed_vendor": "blocked_by_tax_id",
}
POOL = FAM.generate("train") + FAM.generate("val")


def solved_env(inst, knowledge: Knowledge = FULL):
    env = FAM.make_env(inst)
    for step in FAM.plan(inst, knowledge):
        assert not env.call(step.tool, dict(step.args)).error, step.tool
    return env


def with_decisions(inst, decisions):
    env = FAM.make_env(inst)
    assert not env.call("decide_requests", {"decisions": decisions}).error
    return FAM.check(env)


def test_reference_passes_and_every_instance_needs_judgement():
    for inst in POOL[:30]:
        truth = decide(FAM.world(inst.seed, inst.params), FULL)
        assert any(d["decision"] != "approve" for d in truth), inst.id
        assert FAM.reference_solve(inst)[0].passed, inst.id


def test_empty_agent_scores_zero():
    for inst in POOL[:10]:
        outcome = FAM.check(FAM.make_env(inst))
        assert not outcome.passed and outcome.score == 0.0


@pytest.mark.parametrize("reason", sorted(set(REASONS) - {"within_policy"}))
def test_each_rule_left_unapplied_fails(reason):
    for inst in POOL:
        truth = decide(FAM.world(inst.seed, inst.params), FULL)
        if any(d["reason_code"] == reason for d in truth):
            break
    else:
        raise AssertionError(f"no instance decides {reason}")
    waved = [{**d, "decision": "approve", "reason_code": "within_policy"} if d["reason_code"] == reason else d
             for d in truth]  # fmt: skip
    outcome = with_decisions(inst, waved)
    assert not outcome.passed and outcome.detail["wrong"]
    assert with_decisions(inst, truth).passed


def test_an_undecided_request_fails():
    inst = POOL[0]
    truth = decide(FAM.world(inst.seed, inst.params), FULL)
    outcome = with_decisions(inst, truth[1:])
    assert not outcome.passed and outcome.detail["wrong"][0][1] == "undecided"


@pytest.mark.parametrize("trap", sorted(TRAP_FACT))
def test_each_trap_left_unhandled_fails_the_checker(trap):
    hits = [i for i in POOL if trap in FAM.world(i.seed, i.params).traps]
    assert len(hits) >= 3
    without = replace(FULL, facts=FULL.facts - {TRAP_FACT[trap]})
    for inst in hits:
        assert FAM.check(solved_env(inst)).passed
        outcome = FAM.check(solved_env(inst, without))
        assert not outcome.passed and outcome.detail["wrong"], inst.id


def test_posted_balance_trap_overspends_the_department():
    without = replace(FULL, facts=FULL.facts - {"posted_balance"})
    for inst in POOL:
        if "running_balance" in FAM.world(inst.seed, inst.params).traps:
            assert FAM.check(solved_env(inst, without)).detail["overspent"]


def test_facts_matter_only_where_their_trap_is():
    for trap, fact in TRAP_FACT.items():
        without = replace(FULL, facts=FULL.facts - {fact})
        for inst in POOL[:40]:
            if trap not in FAM.world(inst.seed, inst.params).traps:
                assert FAM.check(solved_env(inst, without)).passed, (fact, inst.id)


def test_currency_conversion_matters_somewhere():
    without = replace(FULL, facts=FULL.facts - {"currency_conversion"})
    assert any(not FAM.check(solved_env(i, without)).passed for i in POOL)


def test_rejections_need_comments_when_asked():
    for inst in POOL:
        w = FAM.world(inst.seed, inst.params)
        if w.comment_required and any(d["decision"] == "reject" for d in decide(w, FULL)):
            break
    else:
        raise AssertionError("no instance asks for comments on a rejection")
    outcome = FAM.check(solved_env(inst, replace(FULL, constraints=frozenset())))
    assert not outcome.passed and outcome.detail["uncommented"]
    assert FAM.check(solved_env(inst)).passed


def test_approving_everything_overspends_and_fails():
    for inst in POOL[:20]:
        w = FAM.world(inst.seed, inst.params)
        everything = [{"request_id": r.id, "decision": "approve", "reason_code": "within_policy"} for r in w.requests]
        outcome = with_decisions(inst, everything)
        assert not outcome.passed and outcome.score < 1.0


def test_decisions_can_be_revised_and_single_tools_work():
    inst = POOL[3]
    truth = decide(FAM.world(inst.seed, inst.params), FULL)
    env = FAM.make_env(inst)
    for d in truth:
        env.call("approve_request", {"request_id": d["request_id"]})
    assert not FAM.check(env).passed
    for d in truth:
        tool = {"approve": "approve_request", "reject": "reject_request", "escalate": "escalate_request"}[d["decision"]]
        args = {"request_id": d["request_id"], "reason_code": d["reason_code"]}
        if "comment" in d:
            args["comment"] = d["comment"]
        assert not env.call(tool, args).error
    assert FAM.check(env).passed


def test_bad_decisions_are_refused_whole():
    inst = POOL[0]
    w = FAM.world(inst.seed, inst.params)
    rid = w.requests[0].id
    env = FAM.make_env(inst)
    for bad in (
        [{"request_id": rid, "decision": "approve", "reason_code": "blocked_vendor"}],  # code does not fit
        [{"request_id": "PR-0", "decision": "approve", "reason_code": "within_policy"}],  # unknown request
        [{"request_id": rid, "decision": "approve", "reason_code": "within_policy"}] * 2,  # twice in one call
        [{"request_id": rid, "decision": "maybe", "reason_code": "within_policy"}],
        [{"request_id": rid, "decision": "approve", "reason_code": "within_policy", "extra": 1}],
        [],
    ):
        assert env.call("decide_requests", {"decisions": bad}).error
    assert env.register == {}
    assert env.call("get_department_budget", {"department": "Nowhere"}).error
    assert env.call("read_request", {"request_id": rid}).content.count(rid) == 1


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
    edited = apply_edit(FAM.baseline_harness(), HarnessEdit(recipes, rationale="state the missing purchasing rules"))
    after = rollout_all(val, edited, "synthetic/weak")
    assert pass_rate(after) > pass_rate(before) + 0.1, (pass_rate(before), pass_rate(after))


def test_validation_hook_repairs_weak_tool_errors(weak_baseline):
    val, before = weak_baseline
    hooked = apply_edit(FAM.baseline_harness(), HarnessEdit((AddHook(HookSpec("before_call", "validate_args")),)))
    after = rollout_all(val, hooked, "synthetic/weak")
    assert failure_causes(before).get("tool-use", 0) > 0
    assert failure_causes(after).get("tool-use", 0) == 0
    assert pass_rate(after) > pass_rate(before)
