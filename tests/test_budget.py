"""Budget family: golden instances (hand-derived registers) with mutations, the checker's report per
policy rule and constraint, concepts, tools. The checks every family shares (traps, rules, handbook) are in
test_family_contract.py, the levers (stated facts help, hooks help) in test_families.py."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from coevolve.tasks import get_family
from coevolve.tasks.budget import REASONS, decide, policy_text
from tests.helpers import failed, solved_env

FAM = get_family("budget")
FULL = FAM.full_knowledge()
GOLDEN = json.loads((Path(__file__).resolve().parent.parent / "coevolve" / "tasks" / "budget" / "golden.json").read_text())[
    "instances"
]
POOL = FAM.generate("train") + FAM.generate("val")
TOOL_FOR = {"approve": "approve_request", "reject": "reject_request", "escalate": "escalate_request"}


def world(inst):
    return FAM.world(inst.seed, inst.params)


def env_with(inst, decisions):
    env = FAM.make_env(inst)
    if decisions:
        result = env.call("decide_requests", {"decisions": decisions})
        assert not result.error, result.content
    return env


def check_with(inst, decisions):
    return FAM.check(env_with(inst, decisions))


def codes(register) -> list[tuple[str, str, str]]:
    return sorted((d["request_id"], d["decision"], d["reason_code"]) for d in register)


# ------------------------------------------------------------------ golden instances
@pytest.mark.parametrize("golden", GOLDEN, ids=lambda g: g["id"])
def test_reference_solver_records_the_hand_derived_register(golden):
    inst = FAM.instance(golden["id"])
    outcome, env = FAM.reference_solve(inst)
    assert outcome.passed
    assert codes(env.register.values()) == codes(golden["register"])
    commented = {rid for rid, d in env.register.items() if d.get("comment")}
    assert commented == {d["request_id"] for d in golden["register"] if d.get("comment")}


@pytest.mark.parametrize("golden", GOLDEN, ids=lambda g: g["id"])
def test_checker_accepts_the_golden_register_and_rejects_each_mutation(golden):
    inst = FAM.instance(golden["id"])
    register = golden["register"]
    assert FAM.check(env_with(inst, register)).passed
    approved = next(i for i, d in enumerate(register) if d["decision"] == "approve")
    not_approved = next(i for i, d in enumerate(register) if d["decision"] != "approve")

    def altered(i, **change):
        return [{**d, **change} if j == i else d for j, d in enumerate(register)]

    other_reject = {"blocked_vendor": "missing_quotes"}.get(register[not_approved]["reason_code"], "blocked_vendor")
    mutations = {  # what -> (mutated register, the requirement that must fail)
        "decision dropped": (register[1:], "every_request_decided"),
        "decision dropped at the end": (register[:-1], "every_request_decided"),
        "approval turned into a rejection": (
            altered(approved, decision="reject", reason_code="missing_quotes"), "rejections_correct"),
        "approval turned into an escalation": (
            altered(approved, decision="escalate", reason_code="above_approval_limit"), "escalations_correct"),
        "rejection or escalation approved": (
            altered(not_approved, decision="approve", reason_code="within_policy"), "approvals_correct"),
        "other rejection code": (
            altered(not_approved, decision="reject", reason_code=other_reject), "rejections_correct"),
    }  # fmt: skip
    for what, (mutated, requirement) in mutations.items():
        mutated = [{k: v for k, v in d.items() if k != "comment" or d["decision"] == "reject"} for d in mutated]
        if FAM.world(inst.seed, inst.params).comment_required:
            mutated = [d if d["decision"] != "reject" or d.get("comment") else {**d, "comment": "Rejected."} for d in mutated]
        outcome = FAM.check(env_with(inst, mutated))
        assert not outcome.passed, what
        assert requirement in failed(outcome) and all(failed(outcome).values()), what
    # adding a decision for a request that is not in the queue is refused by the register itself
    env = env_with(inst, register)
    extra = {"request_id": "PR-0001", "decision": "approve", "reason_code": "within_policy"}
    assert env.call("decide_requests", {"decisions": [extra]}).error
    assert FAM.check(env).passed


def test_a_rejection_without_its_comment_fails_when_comments_are_asked():
    golden = next(g for g in GOLDEN if any(d.get("comment") for d in g["register"]))
    inst = FAM.instance(golden["id"])
    bare = [{k: v for k, v in d.items() if k != "comment"} for d in golden["register"]]
    outcome = check_with(inst, bare)
    assert set(failed(outcome)) == {"rejections_commented"}
    one_bare = [{k: v for k, v in d.items() if k != "comment"} if i == 2 else d for i, d in enumerate(golden["register"])]
    assert golden["register"][2].get("comment")
    reason = failed(check_with(inst, one_bare))["rejections_commented"]
    assert golden["register"][2]["request_id"] in reason and "1 rejection has none" in reason


# ------------------------------------------------------------------ checker reports
def test_reference_passes_and_every_instance_needs_judgement():
    for inst in POOL[:30]:
        truth = decide(world(inst), FULL)
        assert any(d["decision"] != "approve" for d in truth), inst.id
        assert FAM.reference_solve(inst)[0].passed, inst.id


def test_empty_agent_scores_zero_with_a_graders_reason():
    for inst in POOL[:10]:
        outcome = FAM.check(FAM.make_env(inst))
        assert not outcome.passed and outcome.score == 0.0
        assert "no decision was recorded" in failed(outcome)["every_request_decided"]


@pytest.mark.parametrize("reason", sorted(set(REASONS) - {"within_policy"}))
def test_each_rule_left_unapplied_fails_naming_the_agents_own_decision(reason):
    for inst in POOL:
        truth = decide(world(inst), FULL)
        if any(d["reason_code"] == reason for d in truth):
            break
    else:
        raise AssertionError(f"no instance decides {reason}")
    waved = [{**d, "decision": "approve", "reason_code": "within_policy"} if d["reason_code"] == reason else d
             for d in truth]  # fmt: skip
    outcome = check_with(inst, waved)
    assert not outcome.passed and 0 < outcome.score < 1
    why = failed(outcome)
    assert "approvals_correct" in why
    for d in truth:
        if d["reason_code"] == reason:
            assert f"{d['request_id']} (approved as within_policy)" in why["approvals_correct"]
    assert reason not in json.dumps(outcome.detail)  # the expected code is never revealed
    assert check_with(inst, truth).passed


def test_a_wrong_reason_code_fails_the_kind_of_decision_the_agent_made():
    inst = next(i for i in POOL if any(d["reason_code"] == "missing_quotes" for d in decide(world(i), FULL)))
    truth = decide(world(inst), FULL)
    wrong = [{**d, "reason_code": "over_category_cap"} if d["reason_code"] == "missing_quotes" else d for d in truth]
    why = failed(check_with(inst, wrong))
    assert set(why) == {"rejections_correct"}
    assert "rejected as over_category_cap" in why["rejections_correct"]
    assert "missing_quotes" not in why["rejections_correct"]


def test_an_undecided_request_fails_with_a_count():
    inst = POOL[0]
    truth = decide(world(inst), FULL)
    outcome = check_with(inst, truth[1:])
    assert set(failed(outcome)) == {"every_request_decided"}
    assert failed(outcome)["every_request_decided"] == f"1 of the {len(truth)} pending requests has no recorded decision"


def test_posted_balance_trap_overspends_the_department():
    without = replace(FULL, facts=FULL.facts - {"posted_balance"})
    for inst in POOL:
        if "running_balance" in world(inst).traps:
            reason = failed(FAM.check(solved_env(FAM, inst, without)))["no_department_overspent"]
            assert "approved requests add up to" in reason and "USD" in reason


def test_currency_conversion_matters_somewhere():
    without = replace(FULL, facts=FULL.facts - {"currency_conversion"})
    assert any(not FAM.check(solved_env(FAM, i, without)).passed for i in POOL)


def test_rejections_need_comments_when_asked():
    for inst in POOL:
        w = world(inst)
        if w.comment_required and any(d["decision"] == "reject" for d in decide(w, FULL)):
            break
    else:
        raise AssertionError("no instance asks for comments on a rejection")
    outcome = FAM.check(solved_env(FAM, inst, replace(FULL, constraints=frozenset())))
    assert set(failed(outcome)) == {"rejections_commented"}
    assert "the task asks for a comment on every rejection" in failed(outcome)["rejections_commented"]
    assert FAM.check(solved_env(FAM, inst)).passed
    plain = next(i for i in POOL if not world(i).comment_required)
    report = FAM.check(solved_env(FAM, plain)).detail["requirements"]
    assert "rejections_commented" not in {r["id"] for r in report}


def test_approving_everything_overspends_and_fails():
    for inst in POOL[:20]:
        w = world(inst)
        everything = [{"request_id": r.id, "decision": "approve", "reason_code": "within_policy"} for r in w.requests]
        outcome = check_with(inst, everything)
        assert not outcome.passed and outcome.score < 1.0
        assert "approvals_correct" in failed(outcome)


def test_score_is_the_share_of_right_decisions():
    inst = POOL[0]
    truth = decide(world(inst), FULL)
    outcome = check_with(inst, truth[1:])
    assert outcome.score == round(0.9 * (len(truth) - 1) / len(truth), 4)
    assert check_with(inst, truth).score == 1.0


# ------------------------------------------------------------------ tools
def test_decisions_can_be_revised_and_single_tools_work():
    inst = POOL[3]
    truth = decide(world(inst), FULL)
    env = FAM.make_env(inst)
    for d in truth:
        env.call("approve_request", {"request_id": d["request_id"]})
    assert not FAM.check(env).passed
    for d in truth:
        args = {"request_id": d["request_id"], "reason_code": d["reason_code"]}
        if "comment" in d:
            args["comment"] = d["comment"]
        assert not env.call(TOOL_FOR[d["decision"]], args).error
    assert FAM.check(env).passed


def test_bad_decisions_are_refused_whole():
    inst = POOL[0]
    rid = world(inst).requests[0].id
    env = FAM.make_env(inst)
    for bad in (
        [{"request_id": rid, "decision": "approve", "reason_code": "blocked_vendor"}],  # code does not fit
        [{"request_id": "PR-0", "decision": "approve", "reason_code": "within_policy"}],  # unknown request
        [{"request_id": rid, "decision": "approve", "reason_code": "within_policy"}] * 2,  # twice in one call
        [{"request_id": rid, "decision": "maybe", "reason_code": "within_policy"}],
        [{"request_id": rid, "decision": "approve", "reason_code": "within_policy", "extra": 1}],
        [],
    ):
        result = env.call("decide_requests", {"decisions": bad})
        assert result.error and result.content.startswith("error")
    assert env.register == {}
    assert env.call("get_department_budget", {"department": "Nowhere"}).error
    assert env.call("read_request", {"request_id": rid}).content.count(rid) == 1
    assert env.call("nope", {}).error


# ------------------------------------------------------------------ facts, constraints, handbook
PARAPHRASES = {
    "posted_balance": [
        "Today's approvals are not yet in the department balance, so deduct each one before the next request.",
        "Keep a running total of approved spend per department and compare it against the budget.",
        "Budget figures only update overnight, so subtract what you have already approved.",
        "Remember that the balances shown exclude approvals made earlier today.",
        "After approving a request, lower the department's available funds by its amount before the next one.",
    ],
    "split_purchases": [
        "Several requests from the same department to the same vendor count as one purchase for the quote rule.",
        "Watch for purchases split into smaller requests to one supplier to stay under the quote threshold.",
        "If one department's multiple requests to one vendor together exceed the threshold, they need quotes.",
    ],
    "blocked_by_tax_id": [
        "Match blocked vendors on tax ID, not on name: a blocked company may trade under a new name.",
        "A vendor is blocked if its vendor_tax_id appears on the blocked list, whatever name it uses.",
        "Blocked suppliers sometimes rebrand, so compare tax IDs against the blocked list.",
        "Blocked vendors may use a new trading name; check the vendor_tax_id.",
    ],
    "currency_conversion": [
        "All policy limits are in USD; convert EUR and GBP amounts with the exchange rates before comparing.",
        "Amounts in other currencies must be converted to US dollars before checking caps and budgets.",
    ],
    "comment_rejections": [
        "When the task asks for it, add a comment for the requester to every rejection.",
        "Each rejected request must carry a short note to the requester naming the rule.",
        "Add a comment to each rejection when the instructions ask for one.",
    ],
}
NOT_STATED = [
    "Attach the supplier's quote together with the request.",
    "A supplier quote counts as one of the required quotes.",
    "The desk must explain the rejection codes to new staff.",
    "An approved request is not in the queue any more. The budget is set yearly.",
    "Purchase orders are created overnight for approved requests.",
    "Check the balance.",
    "Approve the request.",
    "Quotes are attached to requests.",
    "Blocked vendors: reject with blocked_vendor.",
    "Reject with a reason code.",
    "The tax ID of every vendor is recorded in the vendor master.",
    "A purchase over the quote threshold needs at least two quotes from different vendors.",
    "Rejections use one of blocked_vendor, missing_quotes, split_purchase or insufficient_budget.",
    "The budget service shows each department's balance.",
    "Exchange rates to USD are published monthly by treasury.",
    "The exchange rates to USD in the policy are updated monthly.",
    "Rejections should never include comments; just set the status.",
]


@pytest.mark.parametrize("item", [*FAM.facts, *FAM.constraints], ids=lambda i: i.id)
def test_concepts_recognise_paraphrases_not_keywords(item):
    assert item.stated_in(item.statement)
    for text in PARAPHRASES[item.id]:
        assert item.concept.where(text), text
    for text in NOT_STATED:
        assert not item.stated_in(text), text


def test_tool_observations_do_not_state_the_facts():
    for inst in POOL[:30]:
        env = FAM.make_env(inst)
        texts = [policy_text(world(inst)), env.call("list_requests", {}).content]
        texts.append(env.call("get_department_budget", {}).content)
        for item in FAM.facts:
            assert not any(item.stated_in(t) for t in texts), (item.id, inst.id)

