"""The payroll solution as a plan of steps, and the audit an auditor with some knowledge writes."""

from __future__ import annotations

import json
from typing import Any

from coevolve.tasks.base import Knowledge, PlanStep, round_money
from coevolve.tasks.payroll.world import FACT_IDS, PayrollWorld, deductions, expected_pay


def plan(w: PayrollWorld, knowledge: Knowledge) -> tuple[PlanStep, ...]:
    """Read the policy, query the data, save the audit report, email the manager, finish."""
    report = audit(w, knowledge)
    to = w.manager[1] if 0 not in knowledge.cut else f"payroll@{w.domain}"
    email: dict[str, Any] = {
        "to": to,
        "subject": w.subject,
        "body": f"The payroll audit report for {w.periods[0]} to {w.periods[-1]} is saved; "
        "the findings are listed there.",
    }
    if w.cc_required and "cc_controller" in knowledge.constraints:
        email["cc"] = [w.controller[1] if 0 not in knowledge.cut else f"controller@{w.domain}"]
    return (
        PlanStep("read_policy", {}),
        PlanStep("sql_query", {"query": audit_query(w)}),
        PlanStep("write_audit_report", {"content": json.dumps(report)}, facts=FACT_IDS, uses=(0, 1)),
        PlanStep("send_email", email, uses=(0,), constraint="cc_controller" if w.cc_required else None),
        PlanStep("finish", {"summary": f"audit report saved, {w.manager[0]} emailed"}),
    )


def audit_query(w: PayrollWorld) -> str:
    lo, hi = w.periods[0], w.periods[-1]
    return (
        "SELECT * FROM employees ORDER BY employee_id; "
        "SELECT * FROM pay_rates ORDER BY employee_id, effective_from; "
        f"SELECT * FROM timesheets WHERE period BETWEEN '{lo}' AND '{hi}' ORDER BY employee_id, work_date; "
        f"SELECT * FROM pay_stubs WHERE period BETWEEN '{lo}' AND '{hi}' ORDER BY stub_id"
    )


def audit(w: PayrollWorld, k: Knowledge) -> list[dict[str, Any]]:
    """The findings an auditor with knowledge `k` reports. Full knowledge gives the ground truth.

    Cut observations: without the data (step 1) nothing can be audited; without the policy (step 0)
    holidays and plan premiums are unknown, so holiday hours count as ordinary hours and health
    premiums go unchecked.
    """
    if 1 in k.cut:
        return []
    facts = k.facts
    see_policy = 0 not in k.cut
    hours: dict[tuple[str, str], list[tuple[str, float]]] = {}
    for eid, period, day, h in w.timesheets:
        hours.setdefault((eid, period), []).append((day, h))
    seen: set[tuple[str, str]] = set()
    findings = []
    for s in sorted(w.stubs, key=lambda s: s.stub_id):
        if s.period not in w.periods:
            continue
        e = w.employee(s.employee_id)
        key = (s.employee_id, s.period)
        kind, amount = None, 0.0
        if key in seen:
            kind = "duplicate_payment"
        seen.add(key)
        if kind is None and e.status == "terminated" and (
            "final_pay_through_termination" not in facts or (e.termination_date or "") < s.period
        ):
            kind = "terminated_paid"
        if kind is None:
            pay = expected_pay(w, e, s.period, hours.get(key, []), facts, see_policy)
            if abs(s.rate - pay.rate) > 0.001:
                kind = "wrong_rate"
            elif abs(s.gross - pay.gross) > 0.001 or (
                e.pay_type == "hourly" and (s.overtime_hours, s.holiday_hours) != (pay.overtime, pay.holiday)
            ):
                kind = "missed_overtime"
            if kind is not None:
                if "deductions_follow_gross" in facts:
                    health, k401 = deductions(w, e, pay.gross)
                else:
                    health, k401 = s.health, s.k401
                amount = round_money(pay.gross - health - k401)
            else:
                health, k401 = deductions(w, e, s.gross)
                if not see_policy:
                    health = s.health
                if abs(s.health - health) > 0.001 or abs(s.k401 - k401) > 0.001:
                    kind = "wrong_deduction"
                    amount = round_money(s.gross - health - k401)
        if kind is not None:
            findings.append({"employee_id": s.employee_id, "period": s.period, "error_type": kind,
                             "corrected_amount": amount})  # fmt: skip
    return findings
