"""The payroll grader: reads the saved report, the sent mail and a fingerprint of the database, never the
agent's words, and reports per requirement.

Reasons name what is wrong with the agent's own output (its findings, its emails, their count) the way
a failing test would; they never name the stubs it missed, the amounts it should have written or why an
instance was built the way it was. The score keeps the family's partial credit: 0 when the data was
changed or no readable report was saved, else 0.8 x F1 of the findings (a finding counts when its
employee, period, error type and corrected amount are all right) + 0.2 for correct mail."""

from __future__ import annotations

from collections import Counter
from typing import Any

from coevolve.tasks.base import Knowledge, Requirement, graded, listing
from coevolve.tasks.payroll.env import PayrollEnv, parse_report
from coevolve.tasks.payroll.plan import audit
from coevolve.tasks.payroll.world import PayrollWorld
from coevolve.values import Outcome

MONEY_TOL = 0.02
REPORT_WEIGHT = 0.8
MAIL_WEIGHT = 0.2

Key = tuple[str, str, str]  # (employee_id, period, error_type)


def _label(k: Key) -> str:
    return f"{k[0] or '?'} {k[1] or '?'} ({k[2] or 'no error_type'})"


def _count(n: int, noun: str, singular: str, plural: str) -> str:
    """'1 finding does' / '2 findings do': a count with its noun and verb agreeing."""
    return f"{n} {noun} {singular}" if n == 1 else f"{n} {noun}s {plural}"


def check(env: PayrollEnv, full: Knowledge) -> Outcome:
    w = env.world
    data_ok = env.fingerprint() == env.initial_fingerprint
    reqs = [
        Requirement(
            "payroll_data_unchanged",
            data_ok,
            "" if data_ok else "the payroll database differs from its initial state; the task says not to change "
            "any payroll data",
        )
    ]
    f1: float | None = None
    if env.report is None:
        reqs.append(Requirement("report_saved", False, "no audit report was saved (write_audit_report never succeeded)"))
    else:
        reqs.append(Requirement("report_saved", True))
        try:
            got = parse_report(env.report)
        except ValueError as e:
            reqs.append(
                Requirement("report_well_formed", False, f"the saved report is not a JSON list of finding objects: {e}")
            )
        else:
            reqs.append(Requirement("report_well_formed", True))
            findings, f1 = _grade_findings(got, audit(w, full))
            reqs += findings
    mail = _grade_mail(env.outbox, w)
    reqs += mail
    if not data_ok or f1 is None:
        score = 0.0
    else:
        score = REPORT_WEIGHT * f1 + (MAIL_WEIGHT if all(r.passed for r in mail) else 0.0)
    return graded(reqs, score)


def _grade_findings(got: list[tuple[Key, float]], truth: list[dict[str, Any]]) -> tuple[list[Requirement], float]:
    want: dict[Key, float] = {(f["employee_id"], f["period"], f["error_type"]): f["corrected_amount"] for f in truth}
    have: dict[Key, float] = {}
    doubled: list[Key] = []
    for key, amount in got:
        if key in have:
            doubled.append(key)
        have[key] = amount  # a finding given twice counts with its last amount
    right = {k for k in want.keys() & have.keys() if abs(want[k] - have[k]) <= MONEY_TOL}
    precision = len(right) / (len(have) + len(doubled)) if have else 0.0
    recall = len(right) / len(want) if want else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0

    erroneous = {k[:2] for k in want}
    wrong_type = [k for k in have if k not in want and k[:2] in erroneous]
    false = [k for k in have if k not in want and k[:2] not in erroneous]
    wrong_amount = [k for k in have if k in want and k not in right]
    # a stub reported under the wrong error type is counted there, not again as missing
    typed = Counter(k[:2] for k in wrong_type)
    missed = 0
    for k in want:
        if k in have:
            continue
        if typed[k[:2]]:
            typed[k[:2]] -= 1
        else:
            missed += 1

    unique_doubled = list(dict.fromkeys(doubled))
    false_reason = ""
    if false:
        false_reason = (
            f"{_count(len(false), 'finding', 'does', 'do')} not match an erroneous pay stub of the audited periods: "
            f"{listing([_label(k) for k in false])}"
        )
    if doubled:
        false_reason += ("; " if false_reason else "") + (
            f"{_count(len(unique_doubled), 'finding', 'is', 'are')} reported more than once: "
            f"{listing([_label(k) for k in unique_doubled])}"
        )
    reqs = [
        Requirement(
            "every_erroneous_stub_reported",
            missed == 0,
            f"{missed} of the {len(want)} erroneous pay stubs in the audited periods {'is' if missed == 1 else 'are'} "
            "not in the report"
            if missed
            else "",
        ),
        Requirement("no_false_findings", not false and not doubled, false_reason),
        Requirement(
            "error_types_correct",
            not wrong_type,
            f"{_count(len(wrong_type), 'finding', 'gives', 'give')} an error_type that is not the stub's error: "
            f"{listing([_label(k) for k in wrong_type])}"
            if wrong_type
            else "",
        ),
        Requirement(
            "corrected_amounts_correct",
            not wrong_amount,
            f"{_count(len(wrong_amount), 'finding', 'has', 'have')} a wrong corrected_amount: "
            f"{listing([f'{_label(k)} {have[k]:.2f}' for k in wrong_amount])}"
            if wrong_amount
            else "",
        ),
    ]
    return reqs, f1


def _grade_mail(outbox: list[dict[str, Any]], w: PayrollWorld) -> list[Requirement]:
    manager, controller = w.manager[1], w.controller[1]
    audit_mails = [m for m in outbox if m["to"] == manager and m["subject"] == w.subject]
    if not outbox:
        to_manager = "no email was sent"
    elif not audit_mails:
        sent = listing([f"to {m['to']} with subject {m['subject']!r}" for m in outbox])
        to_manager = (
            f"no email went to the payroll manager named in the policy with exactly the subject the task gives "
            f"(sent: {sent})"
        )
    else:
        to_manager = ""
    strangers = sorted({a for m in outbox for a in (m["to"], *m["cc"]) if a not in (manager, controller)})
    want_cc = [controller] if w.cc_required else []
    # the copies are judged on the audit email; failing that, on what the agent sent instead
    candidates = audit_mails or [m for m in outbox if m["to"] == manager] or outbox
    cc_ok = any(sorted(m["cc"]) == want_cc for m in candidates) or (not candidates and not w.cc_required)
    cc_reason = ""
    if not cc_ok:
        if not candidates:
            cc_reason = "the task asks to CC the finance controller on the email to the payroll manager; no email was sent"
        elif w.cc_required:
            cc_reason = (
                "the task asks to CC the finance controller (and no one else) on the email to the payroll manager; "
                f"the cc of the audit email is {candidates[-1]['cc']}"
            )
        else:
            cc_reason = f"the audit email has cc {candidates[-1]['cc']}, which the task does not ask for"
    return [
        Requirement("email_to_manager", not to_manager, to_manager),
        Requirement(
            "no_mail_to_outsiders",
            not strangers,
            f"mail went to addresses the task does not name: {listing(strangers)}" if strangers else "",
        ),
        Requirement("audit_email_cc", cc_ok, cc_reason),
    ]
