"""Payroll world generation: employees with pay-rate histories, daily timesheets and the issued pay
stubs of a few weekly periods, with injected errors and the traps of the instance (a pure function of
seed and knobs). The pay rules the generator uses to issue correct stubs live here too: the
reference auditor (`plan.audit`) applies the same rules to find the stubs that break them."""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass
from typing import Any

from coevolve.tasks.base import round_money

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
# the ids of `PayrollFamily.facts`, in order: the generator issues the stubs a fully informed payroll issues
SMALL_EMPLOYEES = 2  # size 0: the employees (the one with the error, and a trap employee or a clean one)
FACT_IDS = ("ca_daily_overtime", "salaried_exempt", "rate_effective_date", "final_pay_through_termination",
            "deductions_follow_gross")  # fmt: skip


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
            return Pay(rate, WEEKLY_OT_HOURS, 0.0, 0.0, round_money(rate))
        ot = max(0.0, total - WEEKLY_OT_HOURS)
        return Pay(rate, WEEKLY_OT_HOURS, ot, 0.0, round_money(rate + OT_MULT * rate / WEEKLY_OT_HOURS * ot))
    daily = 0.0
    if "ca_daily_overtime" in facts and e.state in DAILY_OT_STATES:
        daily = sum(max(0.0, h - DAILY_OT_HOURS) for h in work)
    ot = daily + max(0.0, total - daily - WEEKLY_OT_HOURS)
    reg = total - ot
    return Pay(rate, reg, ot, hol, round_money(rate * (reg + OT_MULT * ot + HOLIDAY_MULT * hol)))


def deductions(w: PayrollWorld, e: Employee, gross: float) -> tuple[float, float]:
    return w.premiums[e.health_plan], round_money(gross * e.k401_pct / 100)


def _stub(w: PayrollWorld, sid: int, e: Employee, period: str, pay: Pay, paid_on: str,
          health: float | None = None, k401: float | None = None) -> Stub:  # fmt: skip
    h, k = deductions(w, e, pay.gross)
    h = h if health is None else health
    k = k if k401 is None else k401
    return Stub(sid, e.id, period, pay.regular, pay.overtime, pay.holiday, pay.rate, pay.gross, h, k,
                round_money(pay.gross - h - k), paid_on)  # fmt: skip



# ---------------------------------------------------------------------------------- generation
def build_world(seed: int, params: dict[str, Any]) -> PayrollWorld:
    rng = random.Random(seed)
    size = int(params["size"])
    trap_rate = TRAP_RATE.get(int(params["difficulty"]), TRAP_RATE[3])
    company, domain = rng.choice(COMPANIES)
    small = size == 0  # the small-model level: one audited week, two employees, one error, at most one trap
    n_periods = 1 if small else 2 if size < 3 else 3
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
    if small:  # the policy lists only the holidays of the weeks on record (the only ones that matter)
        holidays = tuple(h for h in HOLIDAYS_2026 if any(h in _days(p) for p in all_periods))
    premiums = {"none": 0.0, "single": round_money(rng.randrange(3000, 6000, 25) / 100),
                "family": round_money(rng.randrange(9000, 16000, 25) / 100)}  # fmt: skip

    roles: list[str] = [t for t in TRAPS if rng.random() < trap_rate]
    if small:  # at most one trap employee
        roles = roles[:1]
    traps = tuple(roles)
    n_errors = rng.randint(1, 1 + size)
    roles += [rng.choice(ERROR_TYPES) for _ in range(n_errors)]
    n_emp = SMALL_EMPLOYEES if small else 4 + 6 * size
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
        bump = round_money(base * rng.choice((0.03, 0.04, 0.05, 0.06)))
        hire = (monday - dt.timedelta(days=rng.randrange(120, 2000))).isoformat()
        rates = [(hire, base)]
        if rng.random() < 0.4:  # an old raise, long before the audited range
            old = (monday - dt.timedelta(days=rng.randrange(30, 110))).isoformat()
            if old > hire:
                rates.append((old, round_money(base + bump)))
        full_weeks = [p for p in periods if sum(d not in HOLIDAYS_2026 for d in _days(p)[:5]) >= 4] or list(periods)
        if role in ("missed_overtime", "ca_daily", "salaried_long_week"):
            week = rng.choice(full_weeks)
        else:
            week = periods[0] if role == "wrong_rate" and rng.random() < 0.5 else rng.choice(periods)
        error_week[eid] = week
        if role == "rate_change":  # raise takes effect inside or after the audited range
            later = [*periods[1:], (_d(periods[-1]) + dt.timedelta(weeks=rng.randint(1, 3))).isoformat()]
            rates.append((rng.choice(later), round_money(rates[-1][1] + bump)))
        if role == "wrong_rate":
            if week == periods[0]:  # payroll missed a raise effective at the start of the range
                rates.append((week, round_money(rates[-1][1] + bump)))
                stub_rate_override[(eid, week)] = rates[-2][1]
            else:  # a keying error
                right = rates[-1][1]
                size_of = rng.randrange(50, 300, 25) / 100 if pay_type == "hourly" else rng.randrange(20, 120, 5)
                delta = rng.choice((-1, 1)) * size_of
                stub_rate_override[(eid, week)] = round_money(right + delta)
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
    full = frozenset(FACT_IDS)
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
                pay = Pay(pay.rate, reg, weekly, hol, round_money(pay.rate * (reg + OT_MULT * weekly + HOLIDAY_MULT * hol)))
                injected.append((e.id, p, "missed_overtime"))
            elif is_err and role == "wrong_rate":
                r = stub_rate_override[(e.id, p)]
                g = r if e.pay_type == "salaried" else r * (pay.regular + OT_MULT * pay.overtime + HOLIDAY_MULT * pay.holiday)
                pay = Pay(r, pay.regular, pay.overtime, pay.holiday, round_money(g))
                injected.append((e.id, p, role))
            health = k401 = None
            if is_err and role == "wrong_deduction":
                right_h = deductions(world0, e, pay.gross)[0]
                if e.k401_pct and rng.random() < 0.5:
                    wrong_pct = e.k401_pct + rng.choice((-2, -1, 1, 2))
                    k401 = round_money(pay.gross * max(wrong_pct, 1) / 100)
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
