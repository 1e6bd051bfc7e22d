"""Payroll auditing: find the erroneous pay stubs of some weekly pay periods and report them.

Services: a payroll database in sqlite (employees, pay-rate history, daily timesheets, issued pay
stubs) behind a read-only SQL tool, a pay-policy document, a report store and a mailbox. The agent
writes a JSON audit report (one finding per erroneous stub: employee, period, error type, corrected
net pay) and emails the payroll manager. The checker reads the stored report, the sent mail and a
fingerprint of the database, never the agent's words.

Injected errors: missed overtime, wrong rate, duplicate payment, terminated employee paid, wrong
deduction. Traps (difficulty-dependent) need implicit knowledge: California daily overtime,
salaried exemption, the rate in effect for the period, and final pay through the termination date.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import random
import sqlite3
import time
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, ClassVar

from harness_store.values import Outcome, TaskInstance, ToolSpec
from tasks.base import (
    FINISH_TOOL,
    Constraint,
    DomainFact,
    Knowledge,
    PlanStep,
    TaskEnv,
    TaskFamily,
    ToolArgError,
    ToolResult,
    read_only_authorizer,
)

ERROR_TYPES = ("missed_overtime", "wrong_rate", "duplicate_payment", "terminated_paid", "wrong_deduction")
TRAPS = ("ca_daily", "salaried_long_week", "rate_change", "late_termination")
TRAP_RATE = {1: 0.06, 2: 0.12, 3: 0.3}
STATES = ("CA", "TX", "NY", "WA", "FL", "IL", "AZ", "OR")
DAILY_OT_STATES = ("CA",)
OT_MULT = 1.5
HOLIDAY_MULT = 2.0
WEEKLY_OT_HOURS = 40.0
DAILY_OT_HOURS = 8.0
PLANS = ("none", "single", "family")
K401_CHOICES = (0, 0, 3, 4, 5, 6)
HOLIDAYS_2026 = (
    "2026-01-01", "2026-01-19", "2026-02-16", "2026-05-25", "2026-07-03",
    "2026-09-07", "2026-11-26", "2026-11-27", "2026-12-25",
)  # fmt: skip
FIRST = ("Ana", "Ben", "Chen", "Dara", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jae", "Kim", "Lu", "Mo", "Nia",
         "Oto", "Pia", "Raj", "Sol", "Tea", "Uma", "Vik", "Wes", "Xia", "Yan", "Zoe")  # fmt: skip
LAST = ("Abbott", "Baker", "Cruz", "Diaz", "Evans", "Ford", "Garcia", "Huang", "Ito", "Jones", "Khan",
        "Lopez", "Meyer", "Nolan", "Okafor", "Patel", "Quinn", "Ross", "Silva", "Tran", "Ueda", "Vega")  # fmt: skip
COMPANIES = (("Acme Logistics", "acme-logistics.example"), ("Birch Foods", "birchfoods.example"),
             ("Cobalt Tools", "cobalt-tools.example"), ("Delta Clinics", "deltaclinics.example"))  # fmt: skip
MAX_ROWS = 5000
MAX_STATEMENTS = 10
SQL_TIME_LIMIT_S = 2.0
MONEY_TOL = 0.02
TABLES = ("employees", "pay_rates", "timesheets", "pay_stubs")
SCHEMA = {
    "employees": "employee_id TEXT, name TEXT, pay_type TEXT, state TEXT, rate REAL, status TEXT, "
    "termination_date TEXT, health_plan TEXT, k401_pct REAL",
    "pay_rates": "employee_id TEXT, effective_from TEXT, rate REAL",
    "timesheets": "employee_id TEXT, period TEXT, work_date TEXT, hours REAL",
    "pay_stubs": "stub_id INTEGER, employee_id TEXT, period TEXT, regular_hours REAL, overtime_hours REAL, "
    "holiday_hours REAL, rate REAL, gross REAL, health REAL, k401 REAL, net REAL, paid_on TEXT",
}


# ---------------------------------------------------------------------------------- world values
@dataclass(frozen=True)
class Employee:
    id: str
    name: str
    pay_type: str  # hourly | salaried
    state: str
    rate: float  # current: hourly rate, or weekly salary
    status: str  # active | terminated
    termination_date: str | None
    health_plan: str
    k401_pct: float
    rates: tuple[tuple[str, float], ...]  # (effective_from, rate), ascending


@dataclass(frozen=True)
class Stub:
    stub_id: int
    employee_id: str
    period: str
    regular_hours: float
    overtime_hours: float
    holiday_hours: float
    rate: float
    gross: float
    health: float
    k401: float
    net: float
    paid_on: str


@dataclass(frozen=True)
class PayrollWorld:
    company: str
    domain: str
    periods: tuple[str, ...]  # the audited weeks (Mondays)
    history: tuple[str, ...]  # earlier weeks in the database, not audited
    holidays: tuple[str, ...]
    premiums: dict[str, float]
    employees: tuple[Employee, ...]
    timesheets: tuple[tuple[str, str, str, float], ...]  # employee, period, date, hours
    stubs: tuple[Stub, ...]
    manager: tuple[str, str]  # name, address
    controller: tuple[str, str]
    cc_required: bool
    traps: tuple[str, ...]
    injected: tuple[tuple[str, str, str], ...]  # (employee, period, kind) as generated, for tests

    @property
    def subject(self) -> str:
        return f"Payroll audit {self.periods[0]} to {self.periods[-1]}"

    def employee(self, eid: str) -> Employee:
        return next(e for e in self.employees if e.id == eid)


def _d(s: str) -> dt.date:
    return dt.date.fromisoformat(s)


def _days(period: str) -> list[str]:
    start = _d(period)
    return [(start + dt.timedelta(days=i)).isoformat() for i in range(7)]


def _money(x: float) -> float:
    return round(x + 1e-9, 2)


# ---------------------------------------------------------------------------------- pay rules
def rate_in_effect(e: Employee, period: str) -> float:
    rate = e.rates[0][1]
    for eff, r in e.rates:
        if eff <= period:
            rate = r
    return rate


@dataclass(frozen=True)
class Pay:
    rate: float
    regular: float
    overtime: float
    holiday: float
    gross: float


def expected_pay(
    w: PayrollWorld, e: Employee, period: str, hours: list[tuple[str, float]], facts: frozenset[str], see_policy: bool
) -> Pay:
    """The pay an auditor with `facts` expects for one employee-week (full facts: the true pay)."""
    rate = rate_in_effect(e, period) if "rate_effective_date" in facts else e.rate
    holidays = set(w.holidays) if see_policy else set()
    hol = sum(h for d, h in hours if d in holidays)
    work = [h for d, h in hours if d not in holidays]
    total = sum(work)
    if e.pay_type == "salaried":
        if "salaried_exempt" in facts:
            return Pay(rate, WEEKLY_OT_HOURS, 0.0, 0.0, _money(rate))
        ot = max(0.0, total - WEEKLY_OT_HOURS)
        return Pay(rate, WEEKLY_OT_HOURS, ot, 0.0, _money(rate + OT_MULT * rate / WEEKLY_OT_HOURS * ot))
    daily = 0.0
    if "ca_daily_overtime" in facts and e.state in DAILY_OT_STATES:
        daily = sum(max(0.0, h - DAILY_OT_HOURS) for h in work)
    ot = daily + max(0.0, total - daily - WEEKLY_OT_HOURS)
    reg = total - ot
    return Pay(rate, reg, ot, hol, _money(rate * (reg + OT_MULT * ot + HOLIDAY_MULT * hol)))


def deductions(w: PayrollWorld, e: Employee, gross: float) -> tuple[float, float]:
    return w.premiums[e.health_plan], _money(gross * e.k401_pct / 100)


def _stub(w: PayrollWorld, sid: int, e: Employee, period: str, pay: Pay, paid_on: str,
          health: float | None = None, k401: float | None = None) -> Stub:  # fmt: skip
    h, k = deductions(w, e, pay.gross)
    h = h if health is None else health
    k = k if k401 is None else k401
    return Stub(sid, e.id, period, pay.regular, pay.overtime, pay.holiday, pay.rate, pay.gross, h, k,
                _money(pay.gross - h - k), paid_on)  # fmt: skip


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
                amount = _money(pay.gross - health - k401)
            else:
                health, k401 = deductions(w, e, s.gross)
                if not see_policy:
                    health = s.health
                if abs(s.health - health) > 0.001 or abs(s.k401 - k401) > 0.001:
                    kind = "wrong_deduction"
                    amount = _money(s.gross - health - k401)
        if kind is not None:
            findings.append({"employee_id": s.employee_id, "period": s.period, "error_type": kind,
                             "corrected_amount": amount})  # fmt: skip
    return findings


# ---------------------------------------------------------------------------------- generation
@lru_cache(maxsize=512)
def _world(seed: int, params_json: str) -> PayrollWorld:
    params = json.loads(params_json)
    rng = random.Random(seed)
    difficulty = int(params["difficulty"])
    size = int(params["size"])
    trap_rate = TRAP_RATE.get(difficulty, TRAP_RATE[3])
    company, domain = rng.choice(COMPANIES)
    n_periods = 2 if size < 3 else 3
    # audited range: sometimes chosen around a company holiday
    if rng.random() < 0.4:
        hol = _d(rng.choice(HOLIDAYS_2026[1:-1]))
        monday = hol - dt.timedelta(days=hol.weekday()) - dt.timedelta(weeks=rng.randrange(n_periods))
    else:
        monday = dt.date(2026, 1, 12) + dt.timedelta(weeks=rng.randrange(44))
    periods = tuple((monday + dt.timedelta(weeks=i)).isoformat() for i in range(n_periods))
    history = ((monday - dt.timedelta(weeks=1)).isoformat(),)
    all_periods = history + periods
    holidays = HOLIDAYS_2026
    premiums = {"none": 0.0, "single": _money(rng.randrange(3000, 6000, 25) / 100),
                "family": _money(rng.randrange(9000, 16000, 25) / 100)}  # fmt: skip

    roles: list[str] = [t for t in TRAPS if rng.random() < trap_rate]
    traps = tuple(roles)
    n_errors = rng.randint(1, 1 + size)
    roles += [rng.choice(ERROR_TYPES) for _ in range(n_errors)]
    n_emp = 4 + 6 * size
    roles += ["clean"] * (n_emp - len(roles))
    rng.shuffle(roles)
    ids = rng.sample(range(100, 1000), n_emp)
    names = rng.sample([f"{f} {la}" for f in FIRST for la in LAST], n_emp)

    employees: list[Employee] = []
    plan_hours: dict[tuple[str, str], list[tuple[str, float]]] = {}
    error_week: dict[str, str] = {}
    stub_rate_override: dict[tuple[str, str], float] = {}
    injected: list[tuple[str, str, str]] = []
    role_of: dict[str, str] = {}
    for idx, role in enumerate(roles):
        eid = f"E{ids[idx]}"
        if role in ("missed_overtime", "ca_daily"):
            pay_type = "hourly"
        elif role == "salaried_long_week":
            pay_type = "salaried"
        else:
            pay_type = "hourly" if rng.random() < 0.7 else "salaried"
        state = "CA" if role == "ca_daily" else rng.choice(STATES)
        if pay_type == "hourly":
            base = rng.randrange(1600, 4800, 25) / 100
        else:
            base = float(rng.randrange(900, 2600, 5))
        bump = _money(base * rng.choice((0.03, 0.04, 0.05, 0.06)))
        hire = (monday - dt.timedelta(days=rng.randrange(120, 2000))).isoformat()
        rates = [(hire, base)]
        if rng.random() < 0.4:  # an old raise, long before the audited range
            old = (monday - dt.timedelta(days=rng.randrange(30, 110))).isoformat()
            if old > hire:
                rates.append((old, _money(base + bump)))
        full_weeks = [p for p in periods if sum(d not in HOLIDAYS_2026 for d in _days(p)[:5]) >= 4] or list(periods)
        if role in ("missed_overtime", "ca_daily", "salaried_long_week"):
            week = rng.choice(full_weeks)
        else:
            week = periods[0] if role == "wrong_rate" and rng.random() < 0.5 else rng.choice(periods)
        error_week[eid] = week
        if role == "rate_change":  # raise takes effect inside or after the audited range
            later = [*periods[1:], (_d(periods[-1]) + dt.timedelta(weeks=rng.randint(1, 3))).isoformat()]
            rates.append((rng.choice(later), _money(rates[-1][1] + bump)))
        if role == "wrong_rate":
            if week == periods[0]:  # payroll missed a raise effective at the start of the range
                rates.append((week, _money(rates[-1][1] + bump)))
                stub_rate_override[(eid, week)] = rates[-2][1]
            else:  # a keying error
                right = rates[-1][1]
                size_of = rng.randrange(50, 300, 25) / 100 if pay_type == "hourly" else rng.randrange(20, 120, 5)
                delta = rng.choice((-1, 1)) * size_of
                stub_rate_override[(eid, week)] = _money(right + delta)
        status, term = "active", None
        if role == "terminated_paid":
            status = "terminated"
            term = (_d(history[0]) + dt.timedelta(days=rng.randrange(0, 5))).isoformat()
        elif role == "late_termination":
            status = "terminated"
            last = _d(periods[-1])
            term = (last + dt.timedelta(days=rng.randrange(4, 7)) if rng.random() < 0.5
                    else last + dt.timedelta(days=rng.randrange(10, 30))).isoformat()  # fmt: skip
        plan = rng.choice(PLANS)
        pct = float(rng.choice(K401_CHOICES))
        if role == "wrong_deduction" and plan == "none" and pct == 0:
            plan = "single"
        e = Employee(eid, names[idx], pay_type, state, rates[-1][1], status, term, plan, pct, tuple(rates))
        employees.append(e)
        role_of[eid] = role
        for p in all_periods:
            special = {"missed_overtime": "ot", "ca_daily": "ca_daily", "salaried_long_week": "long"}.get(role)
            plan_hours[(eid, p)] = _week_hours(rng, e, p, holidays, special if p == week else None, term)
    employees.sort(key=lambda e: e.id)
    world0 = PayrollWorld(company, domain, periods, history, holidays, premiums, tuple(employees), (), (),
                          ("", ""), ("", ""), False, traps, ())  # fmt: skip
    full = frozenset(f.id for f in PayrollFamily.facts)
    stubs: list[Stub] = []
    dups: list[Stub] = []
    timesheets: list[tuple[str, str, str, float]] = []
    sid = rng.randrange(20000, 60000)
    for p in all_periods:
        paid_on = (_d(p) + dt.timedelta(days=11)).isoformat()
        for e in employees:
            role = role_of[e.id]
            hours = plan_hours[(e.id, p)]
            timesheets += [(e.id, p, d, h) for d, h in hours]
            employed = e.termination_date is None or e.termination_date >= p
            if not employed and not (role == "terminated_paid" and p in periods):
                continue
            if not hours and e.pay_type == "hourly" and employed:
                continue
            sid += 1
            is_err = p in periods and p == error_week[e.id]
            pay = expected_pay(world0, e, p, hours, full, True)
            if role == "terminated_paid" and p in periods:
                pay = expected_pay(world0, e, p, [(d, 8.0) for d in _days(p)[:5]], full, True)
                injected.append((e.id, p, role))
            elif is_err and role in ("missed_overtime", "ca_daily"):
                total = sum(h for d, h in hours if d not in holidays)
                hol = sum(h for d, h in hours if d in holidays)
                weekly = max(0.0, total - WEEKLY_OT_HOURS) if role == "ca_daily" else 0.0
                reg = total - weekly
                pay = Pay(pay.rate, reg, weekly, hol, _money(pay.rate * (reg + OT_MULT * weekly + HOLIDAY_MULT * hol)))
                injected.append((e.id, p, "missed_overtime"))
            elif is_err and role == "wrong_rate":
                r = stub_rate_override[(e.id, p)]
                g = r if e.pay_type == "salaried" else r * (pay.regular + OT_MULT * pay.overtime + HOLIDAY_MULT * pay.holiday)
                pay = Pay(r, pay.regular, pay.overtime, pay.holiday, _money(g))
                injected.append((e.id, p, role))
            health = k401 = None
            if is_err and role == "wrong_deduction":
                right_h = deductions(world0, e, pay.gross)[0]
                if e.k401_pct and rng.random() < 0.5:
                    wrong_pct = e.k401_pct + rng.choice((-2, -1, 1, 2))
                    k401 = _money(pay.gross * max(wrong_pct, 1) / 100)
                else:
                    health = premiums[rng.choice([x for x in PLANS if premiums[x] != right_h])]
                injected.append((e.id, p, role))
            stub = _stub(world0, sid, e, p, pay, paid_on, health, k401)
            stubs.append(stub)
            if is_err and role == "duplicate_payment":
                dups.append(stub)
                injected.append((e.id, p, role))
    for s in dups:
        sid += 1
        paid_on = (_d(s.paid_on) + dt.timedelta(days=rng.randint(0, 3))).isoformat()
        stubs.append(Stub(sid, *[getattr(s, f) for f in Stub.__dataclass_fields__ if f not in ("stub_id", "paid_on")], paid_on))
    first = rng.sample(FIRST, 2)
    last = rng.sample(LAST, 2)
    manager = (f"{first[0]} {last[0]}", f"{first[0].lower()}.{last[0].lower()}@{domain}")
    controller = (f"{first[1]} {last[1]}", f"{first[1].lower()}.{last[1].lower()}@{domain}")
    cc_required = rng.random() < trap_rate
    return PayrollWorld(company, domain, periods, history, holidays, premiums, tuple(employees),
                        tuple(timesheets), tuple(stubs), manager, controller, cc_required,
                        traps + (("cc",) if cc_required else ()), tuple(injected))  # fmt: skip


def _week_hours(rng: random.Random, e: Employee, period: str, holidays: tuple[str, ...], special: str | None,
                term: str | None) -> list[tuple[str, float]]:  # fmt: skip
    """Daily hours of one employee-week. CA employees never exceed 8 h a day unless `ca_daily`."""
    days = [d for d in _days(period) if term is None or d <= term]
    weekdays = [d for d in days[:5] if d not in holidays]
    ca = e.state in DAILY_OT_STATES
    if e.pay_type == "salaried":
        per_day = 8.0
        if special == "long":  # a long week, over 40 h
            per_day = rng.choice((9.0, 9.5, 10.0))
            out = [(d, per_day) for d in weekdays]
            for d in days[5:]:
                if sum(h for _, h in out) <= WEEKLY_OT_HOURS + 2:
                    out.append((d, 8.0))
            return out
        return [(d, per_day) for d in weekdays]
    if special == "ca_daily":  # long days, short week: only daily overtime applies
        pattern = rng.choice(((10.0, 10.0, 8.0, 6.0, 4.0), (9.5, 9.0, 9.0, 8.0, 4.0), (11.0, 8.0, 8.0, 8.0, 4.0),
                              (10.0, 9.0, 6.0, 6.0, 6.0)))  # fmt: skip
        return list(zip(weekdays, pattern, strict=False))
    if special == "ot":  # a week over 40 h (built from days of at most 8 h in daily-overtime states)
        if ca or rng.random() < 0.5:
            out = [(d, 8.0) for d in weekdays] + [(days[5], rng.choice((4.0, 6.0, 8.0)))]
        else:
            out = [(d, rng.choice((9.0, 9.5, 10.0))) for d in weekdays] + [(days[5], 4.0)]
        if sum(h for _, h in out) < 44:
            out.append((days[6], 8.0))
        return out
    out: list[tuple[str, float]] = []
    style = rng.random()
    if style < 0.15 and not ca:
        out = [(d, 10.0) for d in weekdays[:4]]
    elif style < 0.3:
        out = [(d, rng.choice((4.0, 5.0, 6.0))) for d in weekdays]
    else:
        out = [(d, rng.choice((7.5, 8.0, 8.0))) for d in weekdays]
    for d in days[:5]:  # some hourly staff work the holiday
        if d in holidays and rng.random() < 0.3:
            out.append((d, 8.0))
    out.sort()
    if not out:
        out = [(days[0], 4.0)] if days else []
    return out


# ---------------------------------------------------------------------------------- the family
class PayrollFamily(TaskFamily):
    name = "payroll"
    title = "payroll auditing"
    default_params: ClassVar[dict[str, Any]] = {"difficulty": 2, "size": 1}
    facts = (
        DomainFact(
            "ca_daily_overtime",
            "California requires daily overtime: hours over 8 in one workday are overtime at 1.5x even "
            "when the week stays under 40 hours; count each hour once (daily overtime first, then weekly "
            "overtime on the remaining hours over 40).",
            ("daily overtime", "over 8 in one workday", "over 8 hours in a day"),
        ),
        DomainFact(
            "salaried_exempt",
            "Salaried employees are exempt: they are paid their weekly salary whatever hours they log, "
            "with no overtime.",
            ("salaried employees are exempt", "salaried staff are exempt", "exempt from overtime"),
        ),
        DomainFact(
            "rate_effective_date",
            "Pay each period at the rate in effect on the period's start (the latest pay_rates row "
            "effective on or before it); employees.rate is only the current rate.",
            ("rate in effect", "pay_rates row effective", "employees.rate is only the current"),
        ),
        DomainFact(
            "final_pay_through_termination",
            "A terminated employee's final pay runs through the termination date: every period that starts on "
            "or before it is owed; only stubs for periods that start after the termination date are "
            "terminated_paid errors.",
            ("through the termination date", "final pay", "starts after the termination"),
        ),
        DomainFact(
            "deductions_follow_gross",
            "When gross pay is corrected, the 401(k) deduction is recomputed as the elected percentage of "
            "the corrected gross; the health premium is fixed per week.",
            ("recomputed on the corrected gross", "percentage of the corrected gross", "deductions follow"),
            common=True,
        ),
    )
    constraints = (
        Constraint(
            "cc_controller",
            "When the task asks for it, CC the finance controller on the audit email.",
            ("cc the finance controller", "copy the controller", "cc everyone the task names"),
        ),
    )

    # ------------------------------------------------------------------ generation
    def world(self, seed: int, params: dict[str, Any]) -> PayrollWorld:
        return _world(seed, json.dumps(params, sort_keys=True))

    def instruction(self, world: PayrollWorld, instance_id: str) -> str:
        periods = ", ".join(world.periods)
        text = (
            f"{world.company}: audit the pay stubs of the weekly pay periods {periods} (a period is named by "
            "its Monday) against the timesheets, the employee records and the pay policy. Save an audit "
            "report with write_audit_report: a JSON list with one object per erroneous pay stub, with the "
            "fields `employee_id`, `period`, `error_type` (one of " + ", ".join(ERROR_TYPES) + ") and "
            "`corrected_amount` (the net pay that stub should have shown, or 0 if it should not have been "
            "paid at all). Then email the payroll manager named in the policy's contacts with the subject "
            f"exactly `{world.subject}`."
        )
        if world.cc_required:
            text += " CC the finance controller (see the contacts) on that email."
        return text + " Do not change any payroll data. Then call finish."

    def make_env(self, instance: TaskInstance) -> PayrollEnv:
        return PayrollEnv(instance, self.world(instance.seed, instance.params))

    def baseline_tools(self) -> tuple[ToolSpec, ...]:
        return TOOLS

    # ------------------------------------------------------------------ solution
    def plan(self, instance: TaskInstance, knowledge: Knowledge) -> list[PlanStep]:
        steps = _plan(instance.seed, json.dumps(instance.params, sort_keys=True), knowledge)
        return [replace(s, args=dict(s.args)) for s in steps]

    def _plan(self, w: PayrollWorld, knowledge: Knowledge) -> tuple[PlanStep, ...]:
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
            PlanStep(
                "write_audit_report",
                {"content": json.dumps(report)},
                facts=tuple(f.id for f in self.facts),
                uses=(0, 1),
            ),
            PlanStep("send_email", email, uses=(0,), constraint="cc_controller" if w.cc_required else None),
            PlanStep("finish", {"summary": f"audit report saved, {w.manager[0]} emailed"}),
        )

    def check(self, env: TaskEnv) -> Outcome:
        assert isinstance(env, PayrollEnv)
        w = env.world
        truth = audit(w, self.full_knowledge())
        detail: dict[str, Any] = {"traps": list(w.traps)}
        if env.fingerprint() != env.initial_fingerprint:
            return Outcome(False, 0.0, {**detail, "reason": "payroll data was altered"})
        if env.report is None:
            return Outcome(False, 0.0, {**detail, "reason": "no audit report saved"})
        try:
            got = _parse_report(env.report)
        except ValueError as e:
            return Outcome(False, 0.0, {**detail, "reason": f"bad report: {e}"})
        want = {(f["employee_id"], f["period"], f["error_type"]): f["corrected_amount"] for f in truth}
        have: dict[tuple[str, str, str], float] = {}
        dupes = 0
        for key, amount in got:
            if key in have:
                dupes += 1
            have[key] = amount
        right = {k for k in want.keys() & have.keys() if abs(want[k] - have[k]) <= MONEY_TOL}
        precision = len(right) / (len(have) + dupes) if have else 0.0
        recall = len(right) / len(want) if want else 1.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        report_ok = len(right) == len(want) == len(have) and not dupes
        mail_problems = _mail_problems(env, w)
        passed = report_ok and not mail_problems
        detail.update(
            missing=sorted(map(list, want.keys() - right)),
            extra=sorted(map(list, have.keys() - right)),
            duplicate_findings=dupes,
            mail=mail_problems,
        )
        return Outcome(passed, 1.0 if passed else round(0.8 * f1 + (0.2 if not mail_problems else 0.0), 4), detail)


@lru_cache(maxsize=4096)
def _plan(seed: int, params_json: str, knowledge: Knowledge) -> tuple[PlanStep, ...]:
    family = PayrollFamily()
    return family._plan(family.world(seed, json.loads(params_json)), knowledge)


def _mail_problems(env: PayrollEnv, w: PayrollWorld) -> list[str]:
    if not env.outbox:
        return ["no email sent"]
    problems = []
    strangers = sorted({a for m in env.outbox for a in (m["to"], *m["cc"]) if a not in (w.manager[1], w.controller[1])})
    if strangers:
        problems.append(f"mail sent to addresses outside the task: {strangers}")
    want_cc = [w.controller[1]] if w.cc_required else []
    if not any(m["to"] == w.manager[1] and m["subject"] == w.subject and sorted(m["cc"]) == want_cc for m in env.outbox):
        problems.append(f"no email to {w.manager[1]} with subject {w.subject!r} and cc {want_cc}")
    return problems


def _parse_report(raw: str) -> list[tuple[tuple[str, str, str], float]]:
    data = json.loads(raw)
    if isinstance(data, dict) and isinstance(data.get("findings"), list):
        data = data["findings"]
    if not isinstance(data, list):
        raise ValueError("not a JSON list")  # noqa: TRY004 - a bad report is a value problem
    out = []
    for x in data:
        if not isinstance(x, dict):
            raise ValueError("an entry is not an object")  # noqa: TRY004
        amount = x.get("corrected_amount")
        try:
            amount = float(str(amount).replace("$", "").replace(",", ""))
        except ValueError:
            raise ValueError(f"corrected_amount {amount!r} is not a number") from None
        key = (str(x.get("employee_id", "")).strip(), str(x.get("period", "")).strip(),
               str(x.get("error_type", "")).strip().lower())  # fmt: skip
        out.append((key, amount))
    return out


def audit_query(w: PayrollWorld) -> str:
    lo, hi = w.periods[0], w.periods[-1]
    return (
        "SELECT * FROM employees ORDER BY employee_id; "
        "SELECT * FROM pay_rates ORDER BY employee_id, effective_from; "
        f"SELECT * FROM timesheets WHERE period BETWEEN '{lo}' AND '{hi}' ORDER BY employee_id, work_date; "
        f"SELECT * FROM pay_stubs WHERE period BETWEEN '{lo}' AND '{hi}' ORDER BY stub_id"
    )


def policy_text(w: PayrollWorld) -> str:
    p = w.premiums
    return "\n".join(
        [
            f"# {w.company} pay policy (revision 2026-01)",
            "",
            "## Pay periods",
            "Weekly, Monday to Sunday. A period is named by its Monday. Stubs are paid 11 days after the period starts.",
            "",
            "## Hourly employees",
            (
                f"Regular hours are paid at the base rate. Overtime is paid at {OT_MULT}x the base rate for hours "
                f"over {WEEKLY_OT_HOURS:g} in a period. State overtime law applies where it is stricter."
            ),
            "",
            "## Salaried employees",
            "The `rate` of a salaried employee is the weekly salary.",
            "",
            "## Company holidays",
            ", ".join(w.holidays) + ".",
            (
                f"Hours an hourly employee works on a company holiday are paid at {HOLIDAY_MULT}x the base rate "
                "and do not count toward overtime."
            ),
            "",
            "## Deductions (per period)",
            f"Health premium by plan: none {p['none']:.2f}, single {p['single']:.2f}, family {p['family']:.2f}.",
            "401(k): the employee's elected percentage (employees.k401_pct) of gross pay, rounded to the cent.",
            "Net pay = gross - health - k401.",
            "",
            "## Rates",
            "Rate changes are recorded in pay_rates (effective_from, rate).",
            "",
            "## Contacts",
            f"Payroll manager: {w.manager[0]} <{w.manager[1]}>",
            f"Finance controller: {w.controller[0]} <{w.controller[1]}>",
            f"Payroll inbox (automated, unattended): payroll-noreply@{w.domain}",
        ]
    )


# ---------------------------------------------------------------------------------- environment
def _fmt(v: Any) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, float):
        return f"{v:g}" if v != int(v) or abs(v) < 1e15 else str(v)
    return str(v)


def _split_sql(query: str) -> list[str]:
    statements, buf = [], ""
    for part in query.split(";"):
        buf += part + ";"
        if sqlite3.complete_statement(buf):
            if buf.strip(" \n\t;"):
                statements.append(buf.strip())
            buf = ""
    if buf.strip(" \n\t;"):
        statements.append(buf.strip().rstrip(";"))
    return statements




class PayrollEnv(TaskEnv):
    def __init__(self, instance: TaskInstance, world: PayrollWorld):
        super().__init__(instance)
        self.world = world
        self.report: str | None = None
        self.outbox: list[dict[str, Any]] = []
        self.db = sqlite3.connect(":memory:", check_same_thread=False)
        for table in TABLES:
            self.db.execute(f"CREATE TABLE {table} ({SCHEMA[table]})")
        self.db.executemany(
            "INSERT INTO employees VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(e.id, e.name, e.pay_type, e.state, e.rate, e.status, e.termination_date, e.health_plan, e.k401_pct)
             for e in world.employees],
        )  # fmt: skip
        self.db.executemany(
            "INSERT INTO pay_rates VALUES (?, ?, ?)",
            [(e.id, eff, r) for e in world.employees for eff, r in e.rates],
        )
        self.db.executemany("INSERT INTO timesheets VALUES (?, ?, ?, ?)", world.timesheets)
        self.db.executemany(
            "INSERT INTO pay_stubs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [tuple(getattr(s, f) for f in Stub.__dataclass_fields__) for s in world.stubs],
        )
        self.db.commit()
        self.initial_fingerprint = self.fingerprint()
        self.db.set_authorizer(read_only_authorizer)

    def fingerprint(self) -> str:
        self.db.set_authorizer(None)
        try:
            h = hashlib.sha256()
            names = [r[0] for r in self.db.execute("SELECT name FROM sqlite_master ORDER BY name")]
            h.update(repr(names).encode())
            for table in TABLES:
                for row in self.db.execute(f"SELECT * FROM {table} ORDER BY rowid"):
                    h.update(repr(row).encode())
            return h.hexdigest()
        except sqlite3.Error as e:
            return f"unreadable: {e}"
        finally:
            self.db.set_authorizer(read_only_authorizer)

    def tool_specs(self) -> tuple[ToolSpec, ...]:
        return (*TOOLS, FINISH_TOOL)

    # ------------------------------------------------------------------ tools
    def tool_sql_query(self, query: str) -> ToolResult:
        if not isinstance(query, str) or not query.strip():
            raise ToolArgError("query must be a non-empty SQL string")
        try:
            statements = _split_sql(query)
        except Exception as e:  # noqa: BLE001 - any parse trouble is the caller's
            return ToolResult(f"error: cannot split the query: {e}", error=True)
        if len(statements) > MAX_STATEMENTS:
            raise ToolArgError(f"at most {MAX_STATEMENTS} statements per call")
        blocks = []
        for stmt in statements:
            deadline = time.monotonic() + SQL_TIME_LIMIT_S
            self.db.set_progress_handler(lambda d=deadline: int(time.monotonic() > d), 10_000)
            try:
                cur = self.db.execute(stmt)
                rows = cur.fetchmany(MAX_ROWS + 1)
            except (sqlite3.Error, ValueError, OverflowError) as e:
                msg = str(e)
                if "not authorized" in msg:
                    msg += " (the payroll database is read-only: only SELECT is allowed)"
                elif "interrupted" in msg:
                    msg += f" (query ran over {SQL_TIME_LIMIT_S:g} s)"
                return ToolResult(f"error: SQL error in `{stmt[:200]}`: {msg}", error=True)
            finally:
                self.db.set_progress_handler(None, 0)
            cols = [d[0] for d in cur.description or ()]
            lines = [" | ".join(cols)] + [" | ".join(_fmt(v) for v in r) for r in rows[:MAX_ROWS]]
            if len(rows) > MAX_ROWS:
                lines.append(f"... truncated at {MAX_ROWS} rows")
            head = f"-- {stmt[:120]}\n" if len(statements) > 1 else ""
            blocks.append(head + "\n".join(lines) + f"\n({min(len(rows), MAX_ROWS)} rows)")
        return ToolResult("\n\n".join(blocks) if blocks else "error: no SQL statement", error=not blocks)

    def tool_read_policy(self) -> str:
        return policy_text(self.world)

    def tool_write_audit_report(self, content: str) -> str:
        if not isinstance(content, str) or not content.strip():
            raise ToolArgError("content must be a non-empty string (the JSON report)")
        try:
            n = len(_parse_report(content))
        except ValueError as e:
            raise ToolArgError(f"the report must be a JSON list of finding objects: {e}") from None
        self.report = content
        return f"audit report saved ({n} findings)"

    def tool_send_email(self, to: str, subject: str, body: str, cc: list[str] | None = None) -> str:
        for name, v in (("to", to), ("subject", subject), ("body", body)):
            if not isinstance(v, str) or not v.strip():
                raise ToolArgError(f"{name} must be a non-empty string")
        if cc is None:
            cc = []
        if not isinstance(cc, list) or not all(isinstance(a, str) and "@" in a for a in cc):
            raise ToolArgError("cc must be a list of email addresses")
        if "@" not in to or "," in to or " " in to.strip():
            raise ToolArgError("to must be a single email address")
        self.outbox.append({"to": to.strip(), "cc": [a.strip() for a in cc], "subject": subject.strip(), "body": body})
        return f"email sent to {to.strip()}" + (f" (cc {', '.join(cc)})" if cc else "")


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "sql_query",
        "Run read-only SQL (sqlite) on the payroll database; several statements separated by ';' return one "
        "result block each. Tables: " + "; ".join(f"{t}({SCHEMA[t]})" for t in TABLES) + ".",
        {
            "type": "object",
            "properties": {"query": {"type": "string", "minLength": 1}},
            "required": ["query"],
            "additionalProperties": False,
        },
        "sql_query",
    ),
    ToolSpec(
        "read_policy",
        "Read the company's pay-policy document (pay rules, holidays, deductions, contacts).",
        {"type": "object", "properties": {}, "additionalProperties": False},
        "read_policy",
    ),
    ToolSpec(
        "write_audit_report",
        "Save the audit report (replaces any earlier version): a JSON list of findings.",
        {
            "type": "object",
            "properties": {"content": {"type": "string", "minLength": 1, "description": "the report as JSON"}},
            "required": ["content"],
            "additionalProperties": False,
        },
        "write_audit_report",
    ),
    ToolSpec(
        "send_email",
        "Send an email.",
        {
            "type": "object",
            "properties": {
                "to": {"type": "string", "description": "one recipient address"},
                "subject": {"type": "string", "minLength": 1},
                "body": {"type": "string", "minLength": 1},
                "cc": {"type": "array", "items": {"type": "string"}, "description": "optional copy recipients"},
            },
            "required": ["to", "subject", "body"],
            "additionalProperties": False,
        },
        "send_email",
    ),
)
