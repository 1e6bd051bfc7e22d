"""Payroll family: golden instances (hand-derived audits) with mutations, checker reports per injected error,
the facts' concepts, read-only data, mail checks. The checks every family shares (traps, rules, handbook)
are in test_family_contract.py, the levers (stated facts help, hooks help, synthetic pass rates) in
test_families.py."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from coevolve.tasks import get_family
from coevolve.tasks.payroll import ERROR_TYPES, TRAPS, audit
from tests.helpers import failed, solved_env

FAM = get_family("payroll")
FULL = FAM.full_knowledge()
GOLDEN = json.loads((Path(__file__).resolve().parent.parent / "coevolve" / "tasks" / "payroll" / "golden.json").read_text())[
    "instances"
]
POOL = FAM.generate("train") + FAM.generate("val")
LABELS = (*TRAPS, "traps", "injected", "trap")


def instance_where(pred):
    for inst in POOL:
        if pred(FAM.world(inst.seed, inst.params)):
            return inst
    raise AssertionError("no instance matches")


def env_with(inst, report, email: dict | None = None):
    """A fresh env holding exactly this report and (when given) this one email."""
    env = FAM.make_env(inst)
    assert not env.call("write_audit_report", {"content": json.dumps(report)}).error
    if email is not None:
        assert not env.call("send_email", {"body": "The audit report is saved.", **email}).error
    return env


def assert_graders_report(outcome) -> None:
    """Every line has an id; a passed line has no reason, a failed one says why; no generator labels."""
    lines = outcome.detail["requirements"]
    assert lines and set(outcome.detail) == {"requirements"}
    for r in lines:
        assert bool(r["reason"]) != r["passed"], r
    text = json.dumps(outcome.detail)
    assert not any(label in text for label in LABELS), text


def norm(report) -> list[tuple[str, str, str, float]]:
    return sorted((x["employee_id"], x["period"], x["error_type"], round(float(x["corrected_amount"]), 2)) for x in report)


# ------------------------------------------------------------------ golden instances
@pytest.mark.parametrize("golden", GOLDEN, ids=lambda g: g["id"])
def test_reference_solver_writes_the_hand_derived_audit(golden):
    inst = FAM.instance(golden["id"])
    outcome, env = FAM.reference_solve(inst)
    assert outcome.passed
    assert norm(json.loads(env.report)) == norm(golden["report"])
    assert [(m["to"], m["subject"], m["cc"]) for m in env.outbox] == [
        (golden["email"]["to"], golden["email"]["subject"], golden["email"]["cc"])
    ]


@pytest.mark.parametrize("golden", GOLDEN, ids=lambda g: g["id"])
def test_checker_accepts_the_golden_state_and_rejects_each_mutation(golden):
    inst = FAM.instance(golden["id"])
    w = FAM.world(inst.seed, inst.params)
    report, email = golden["report"], golden["email"]
    outcome = FAM.check(env_with(inst, report, email))
    assert outcome.passed and outcome.score == 1.0
    assert_graders_report(outcome)

    first = report[0]
    flagged = {(f["employee_id"], f["period"]) for f in report}
    clean = next(s for s in w.stubs if s.period in w.periods and (s.employee_id, s.period) not in flagged)
    other_type = next(t for t in ERROR_TYPES if t != first["error_type"])
    controller = w.controller[1]
    mutations = {
        "finding dropped": (report[1:], email, {"every_erroneous_stub_reported"}),
        "finding added": (
            [*report, {"employee_id": clean.employee_id, "period": clean.period, "error_type": "wrong_rate",
                       "corrected_amount": clean.net}],
            email,
            {"no_false_findings"},
        ),
        "amount altered": (
            [{**first, "corrected_amount": first["corrected_amount"] + 10}, *report[1:]], email,
            {"corrected_amounts_correct"},
        ),
        "error type altered": ([{**first, "error_type": other_type}, *report[1:]], email, {"error_types_correct"}),
        "finding doubled": ([*report, first], email, {"no_false_findings"}),
        "subject altered": (report, {**email, "subject": "Payroll audit"}, {"email_to_manager"}),
        "mail to the unattended inbox": (
            report, {**email, "to": f"payroll-noreply@{w.domain}"}, {"email_to_manager", "no_mail_to_outsiders"}
        ),
        "cc constraint violated": (report, {**email, "cc": [] if w.cc_required else [controller]}, {"audit_email_cc"}),
    }  # fmt: skip
    for what, (mutated, mail, expected) in mutations.items():
        outcome = FAM.check(env_with(inst, mutated, mail))
        assert not outcome.passed, what
        assert set(failed(outcome)) == expected, (what, failed(outcome))
        assert_graders_report(outcome)
    outcome = FAM.check(env_with(inst, report))
    assert not outcome.passed and set(failed(outcome)) == {"email_to_manager"} | (
        {"audit_email_cc"} if w.cc_required else set()
    )


def test_reasons_name_the_agents_items_never_the_expected_ones():
    golden = next(g for g in GOLDEN if len(g["report"]) >= 2)
    inst = FAM.instance(golden["id"])
    first, second, *rest = golden["report"]
    wrong = {**first, "corrected_amount": first["corrected_amount"] + 10}
    outcome = FAM.check(env_with(inst, [wrong, *rest], golden["email"]))
    reasons = failed(outcome)
    assert f"{wrong['corrected_amount']:.2f}" in reasons["corrected_amounts_correct"]  # the agent's own number
    text = json.dumps(outcome.detail)
    assert f"{first['corrected_amount']:.2f}" not in text  # not the expected one
    assert f"{second['employee_id']} {second['period']}" not in text  # nor the finding it missed
    assert "1 of the" in reasons["every_erroneous_stub_reported"]


def test_partial_credit_is_kept():
    golden = next(g for g in GOLDEN if len(g["report"]) == 2)
    inst = FAM.instance(golden["id"])
    half = FAM.check(env_with(inst, golden["report"][1:], golden["email"]))
    assert half.score == pytest.approx(0.8 * (2 / 3) + 0.2, abs=1e-4)  # precision 1, recall 1/2, mail right
    no_mail = FAM.check(env_with(inst, golden["report"]))
    assert no_mail.score == pytest.approx(0.8)
    assert FAM.check(FAM.make_env(inst)).score == 0.0


# ------------------------------------------------------------------ checker reports
def test_reference_passes_and_truth_is_never_empty():
    for inst in POOL[:30]:
        w = FAM.world(inst.seed, inst.params)
        assert audit(w, FULL), inst.id
        outcome = FAM.reference_solve(inst)[0]
        assert outcome.passed, inst.id
        assert_graders_report(outcome)


def test_empty_agent_scores_zero_with_a_reason():
    for inst in POOL[:10]:
        outcome = FAM.check(FAM.make_env(inst))
        assert not outcome.passed and outcome.score == 0.0
        reasons = failed(outcome)
        assert "no audit report" in reasons["report_saved"] and "no email" in reasons["email_to_manager"]
        assert_graders_report(outcome)


@pytest.mark.parametrize("kind", ERROR_TYPES)
def test_each_injected_error_left_unreported_fails(kind):
    inst = instance_where(lambda w: any(k == kind for _, _, k in w.injected))
    w = FAM.world(inst.seed, inst.params)
    truth = audit(w, FULL)
    assert any(f["error_type"] == kind for f in truth)
    plan = FAM.plan(inst, FULL)
    other = "wrong_rate" if kind != "wrong_rate" else "missed_overtime"
    for mutated, requirement in (
        ([f for f in truth if f["error_type"] != kind], "every_erroneous_stub_reported"),
        ([{**f, "corrected_amount": f["corrected_amount"] + 25.0} if f["error_type"] == kind else f for f in truth],
         "corrected_amounts_correct"),
        ([{**f, "error_type": other} if f["error_type"] == kind else f for f in truth], "error_types_correct"),
    ):  # fmt: skip
        env = FAM.make_env(inst)
        for step in plan:
            args = {"content": json.dumps(mutated)} if step.tool == "write_audit_report" else dict(step.args)
            assert not env.call(step.tool, args).error
        outcome = FAM.check(env)
        assert not outcome.passed and set(failed(outcome)) == {requirement}, (kind, failed(outcome))
        assert_graders_report(outcome)


def test_recomputed_deductions_change_corrected_amounts():
    without = replace(FULL, facts=FULL.facts - {"deductions_follow_gross"})
    broken = [FAM.check(solved_env(FAM, i, without)) for i in POOL[:40]]
    broken = [o for o in broken if not o.passed]
    assert broken
    assert all(set(failed(o)) == {"corrected_amounts_correct"} for o in broken)


def test_missing_cc_fails_when_asked():
    inst = instance_where(lambda w: w.cc_required)
    assert FAM.check(solved_env(FAM, inst)).passed
    outcome = FAM.check(solved_env(FAM, inst, replace(FULL, constraints=frozenset())))
    assert not outcome.passed
    assert "finance controller" in failed(outcome)["audit_email_cc"]
    assert_graders_report(outcome)


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
    outcome = _with_mail(inst, to=f"payroll-noreply@{w.domain}")
    assert set(failed(outcome)) == {"email_to_manager", "no_mail_to_outsiders"}
    assert f"payroll-noreply@{w.domain}" in failed(outcome)["no_mail_to_outsiders"]
    assert w.manager[1] not in json.dumps(outcome.detail)  # the expected address is not given away
    assert set(failed(_with_mail(inst, subject="Payroll audit"))) == {"email_to_manager"}
    assert set(failed(_with_mail(inst, cc=["someone@elsewhere.example"]))) == {"no_mail_to_outsiders", "audit_email_cc"}
    assert set(failed(_with_mail(inst, cc=[w.controller[1]]))) == {"audit_email_cc"}  # cc not asked for


def test_no_mail_or_malformed_report_fails():
    inst = POOL[0]
    plan = FAM.plan(inst, FULL)
    env = FAM.make_env(inst)
    for step in plan:
        if step.tool != "send_email":
            env.call(step.tool, dict(step.args))
    outcome = FAM.check(env)
    assert not outcome.passed and failed(outcome) == {"email_to_manager": "no email was sent"}
    env = FAM.make_env(inst)
    assert env.call("write_audit_report", {"content": "not json"}).error
    assert env.call("write_audit_report", {"content": '{"a": 1}'}).error
    assert env.call("write_audit_report", {"content": "[" * 50_000}).error  # too deep: an error, not a crash
    assert env.report is None
    env.report = '{"a": 1}'  # a report that bypassed the tool's validation
    outcome = FAM.check(env)
    assert "report_well_formed" in failed(outcome) and outcome.score == 0.0


def test_extra_or_duplicated_findings_fail():
    inst = POOL[1]
    w = FAM.world(inst.seed, inst.params)
    truth = audit(w, FULL)
    flagged = {(f["employee_id"], f["period"]) for f in truth}
    clean = next(s for s in w.stubs if s.period in w.periods and (s.employee_id, s.period) not in flagged)
    extra = {"employee_id": clean.employee_id, "period": clean.period, "error_type": "wrong_rate",
             "corrected_amount": 1.0}  # fmt: skip
    for report, says in ((truth + [extra], f"{clean.employee_id} {clean.period}"), (truth + truth[:1], "more than once")):
        env = solved_env(FAM, inst)
        env.call("write_audit_report", {"content": json.dumps(report)})
        outcome = FAM.check(env)
        assert not outcome.passed and says in failed(outcome)["no_false_findings"]


def test_payroll_data_is_read_only_and_tampering_is_detected():
    inst = POOL[2]
    env = solved_env(FAM, inst)
    for q in ("UPDATE pay_stubs SET net = 0", "DELETE FROM timesheets", "PRAGMA query_only = OFF",
              "DROP TABLE employees", "ATTACH DATABASE ':memory:' AS x"):  # fmt: skip
        r = env.call("sql_query", {"query": q})
        assert r.error and "read-only" in r.content, q
    assert FAM.check(env).passed
    env.db.set_authorizer(None)  # a tool that bypassed the guard
    env.db.execute("UPDATE pay_stubs SET net = net + 1")
    outcome = FAM.check(env)
    assert not outcome.passed and outcome.score == 0.0
    assert set(failed(outcome)) == {"payroll_data_unchanged"}
    # each env has its own copy of the world's tables: the next rollout of the instance starts untouched
    again = solved_env(FAM, inst)
    assert FAM.check(again).passed and env.initial_fingerprint == again.fingerprint() != env.fingerprint()


def test_sql_errors_are_observations_and_multi_statement_works():
    env = FAM.make_env(POOL[0])
    r = env.call("sql_query", {"query": "SELECT count(*) AS n FROM employees; SELECT 'a;b' AS s"})
    assert not r.error and "a;b" in r.content and r.content.count("rows)") == 2
    assert env.call("sql_query", {"query": "SELECT * FROM nope"}).error
    slow = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
    assert env.call("sql_query", {"query": slow}).error
    assert env.call("send_email", {"to": "a@b.c, d@e.f", "subject": "s", "body": "b"}).error
    assert env.call("send_email", {"to": "a@b.c", "subject": "s", "body": "b", "cc": "x@y.z"}).error


# ------------------------------------------------------------------ facts, concepts, handbook
PARAPHRASES = {
    "ca_daily_overtime": "For CA staff, any hours beyond eight in a single day are paid at time and a half, "
    "even in a short week.",
    "salaried_exempt": "Salaried people don't get overtime: they receive their weekly salary no matter how many "
    "hours they log.",
    "rate_effective_date": "employees.rate is only the current rate; pay each week at the rate that was in "
    "force when the week began.",
    "final_pay_through_termination": "A leaver is owed every week that starts on or before their termination "
    "date; only later weeks are overpaid.",
    "deductions_follow_gross": "If you fix the gross, recalculate the 401(k) from the corrected gross.",
    "cc_controller": "When asked, copy the finance controller on the audit email.",
}
NEAR_MISSES = {
    "ca_daily_overtime": ("Overtime is paid at 1.5x for hours over 40 in a week.", "California employees work 8 hours a day."),
    "salaried_exempt": ("The rate of a salaried employee is the weekly salary.", "Salaried employees are exempt from badge checks."),
    "rate_effective_date": ("Rate changes are recorded in pay_rates (effective_from, rate).", "rate in effect"),
    "final_pay_through_termination": ("HR enters termination dates before the final pay run.", "final pay"),
    "deductions_follow_gross": ("401(k): the elected percentage of gross pay, rounded to the cent.", "recompute"),
    "cc_controller": ("Finance controller: Ana Baker <ana.baker@acme.example>", "The controller keeps a copy of the ledger."),
}  # fmt: skip


def test_concepts_recognise_statements_and_paraphrases_not_keywords():
    items = {i.id: i for i in (*FAM.facts, *FAM.constraints)}
    assert set(items) == set(PARAPHRASES) == set(NEAR_MISSES)
    for iid, item in items.items():
        assert item.stated_in(item.statement), iid
        assert item.stated_in(PARAPHRASES[iid]), iid
        for text in NEAR_MISSES[iid]:
            assert not item.stated_in(text), (iid, text)
        for other, text in PARAPHRASES.items():
            assert other == iid or not item.stated_in(text), (iid, other)

