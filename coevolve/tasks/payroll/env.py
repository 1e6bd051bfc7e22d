"""The payroll services: a read-only payroll database in sqlite, the pay-policy document, a report store
and a mailbox, exposed as the family's tools."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import sqlite3
import time
from typing import Annotated, Any

from coevolve.tasks.base import (
    FINISH_TOOL,
    TaskEnv,
    ToolArgError,
    ToolResult,
    read_only_authorizer,
    read_only_db,
    world_memo,
)
from coevolve.tasks.payroll.world import (
    HOLIDAY_MULT,
    OT_MULT,
    WEEKLY_OT_HOURS,
    Employee,
    PayrollWorld,
    Stub,
    round_money,
)
from coevolve.tasks.tools import Param, fill_doc, tool_specs
from coevolve.values import TaskInstance, ToolSpec

MAX_ROWS = 5000
MAX_STATEMENTS = 10
SQL_TIME_LIMIT_S = 2.0
TABLES = ("employees", "pay_rates", "timesheets", "pay_stubs")
SCHEMA = {
    "employees": "employee_id TEXT, name TEXT, pay_type TEXT, state TEXT, rate REAL, status TEXT, "
    "termination_date TEXT, health_plan TEXT, k401_pct REAL",
    "pay_rates": "employee_id TEXT, effective_from TEXT, rate REAL",
    "timesheets": "employee_id TEXT, period TEXT, work_date TEXT, hours REAL",
    "pay_stubs": "stub_id INTEGER, employee_id TEXT, period TEXT, regular_hours REAL, overtime_hours REAL, "
    "holiday_hours REAL, rate REAL, gross REAL, health REAL, k401 REAL, net REAL, paid_on TEXT",
}
NonEmpty = Annotated[str, Param(minLength=1)]
EmployeeId = Annotated[str, Param(description="an employee id such as E123")]
NonNegative = Annotated[float, Param(minimum=0)]


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
            (", ".join(w.holidays) + ".") if w.holidays else "None in the weeks on record.",
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


def parse_report(raw: str) -> list[tuple[tuple[str, str, str], float]]:
    """The findings of a report as ((employee_id, period, error_type), corrected_amount); ValueError if malformed."""
    try:
        data = json.loads(raw)
    except RecursionError:
        raise ValueError("the JSON is nested too deeply") from None
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


def create_tables(db: sqlite3.Connection, world: PayrollWorld) -> None:
    for table in TABLES:
        db.execute(f"CREATE TABLE {table} ({SCHEMA[table]})")
    db.executemany(
        "INSERT INTO employees VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(e.id, e.name, e.pay_type, e.state, e.rate, e.status, e.termination_date, e.health_plan, e.k401_pct)
         for e in world.employees],
    )  # fmt: skip
    db.executemany("INSERT INTO pay_rates VALUES (?, ?, ?)", [(e.id, eff, r) for e in world.employees for eff, r in e.rates])
    db.executemany("INSERT INTO timesheets VALUES (?, ?, ?, ?)", world.timesheets)
    db.executemany(
        "INSERT INTO pay_stubs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [tuple(getattr(s, f) for f in Stub.__dataclass_fields__) for s in world.stubs],
    )


class PayrollEnv(TaskEnv):
    def __init__(self, instance: TaskInstance, world: PayrollWorld):
        super().__init__(instance)
        self.world = world
        self.report: str | None = None
        self.outbox: list[dict[str, Any]] = []
        self.db = read_only_db(world, create_tables)
        self.initial_fingerprint = world_memo(world, "fingerprint", self.fingerprint)

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
        return (*TOOLS, FINISH_TOOL, *HELPER_TOOLS)

    # ------------------------------------------------------------------ tools
    @fill_doc(tables="; ".join(f"{t}({SCHEMA[t]})" for t in TABLES))
    def tool_sql_query(self, query: NonEmpty) -> ToolResult:
        """Run read-only SQL (sqlite) on the payroll database; several statements separated by ';' return
        one result block each. Tables: {tables}."""
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
        """Read the company's pay-policy document (pay rules, holidays, deductions, contacts)."""
        return policy_text(self.world)

    def tool_write_audit_report(
        self, content: Annotated[NonEmpty, Param(description="the report as JSON")]
    ) -> str:
        """Save the audit report (replaces any earlier version): a JSON list of findings."""
        if not isinstance(content, str) or not content.strip():
            raise ToolArgError("content must be a non-empty string (the JSON report)")
        try:
            n = len(parse_report(content))
        except ValueError as e:
            raise ToolArgError(f"the report must be a JSON list of finding objects: {e}") from None
        self.report = content
        return f"audit report saved ({n} findings)"

    def tool_send_email(
        self,
        to: Annotated[str, Param(description="one recipient address")],
        subject: NonEmpty,
        body: NonEmpty,
        cc: Annotated[list[str] | None, Param(description="optional copy recipients")] = None,
    ) -> str:
        """Send an email."""
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

    # ------------------------------------------------------------------ helper tools (not in the baseline)
    def _employee(self, employee_id: Any) -> Employee:
        e = next((x for x in self.world.employees if x.id == employee_id), None) if isinstance(employee_id, str) else None
        if e is None:
            raise ToolArgError(f"unknown employee {str(employee_id)[:40]!r} (ids look like E123)")
        return e

    @fill_doc(WEEKLY_OT_HOURS=WEEKLY_OT_HOURS)
    def tool_week_hours(
        self,
        employee_id: EmployeeId,
        period: Annotated[str, Param(description="the period's Monday, e.g. 2026-03-02")],
        daily_limit: Annotated[
            float | None, Param(exclusiveMinimum=0, description="hours a day before overtime (omit for none)")
        ] = None,
    ) -> str:
        """One employee's hours for one weekly period, from the timesheets: hours worked, hours on company
        holidays, and the overtime of the non-holiday hours: hours over {WEEKLY_OT_HOURS:g} in the week,
        plus hours over daily_limit in a day when daily_limit is given (those do not count again toward the
        weekly limit); the rest are regular hours."""
        e = self._employee(employee_id)
        w = self.world
        if not isinstance(period, str) or period not in (*w.history, *w.periods):
            raise ToolArgError(f"unknown period {str(period)[:40]!r} (periods on record: {', '.join((*w.history, *w.periods))})")
        if daily_limit is not None and (not _number(daily_limit) or daily_limit <= 0):
            raise ToolArgError("daily_limit must be a positive number of hours, or left out")
        h = week_hours(w, e.id, period, daily_limit)
        weekly = f"{h['overtime'] - h['daily']:g} h over {WEEKLY_OT_HOURS:g} in the week"
        why = f"{h['daily']:g} h over {daily_limit:g} h in a day + {weekly}" if daily_limit is not None else weekly
        return (
            f"{e.id} week {period}: {h['days']} days in the timesheet, {h['worked']:g} hours worked, "
            f"{h['holiday']:g} of them on company holidays. Regular {h['regular']:g} h, overtime {h['overtime']:g} h "
            f"({why}), holiday {h['holiday']:g} h."
        )

    @fill_doc(OT_MULT=OT_MULT, HOLIDAY_MULT=HOLIDAY_MULT)
    def tool_gross_pay(
        self,
        rate: NonNegative,
        regular_hours: NonNegative,
        overtime_hours: NonNegative,
        holiday_hours: NonNegative = 0.0,
    ) -> str:
        """Gross pay for hours at an hourly rate under the pay policy: rate x (regular + {OT_MULT:g} x
        overtime + {HOLIDAY_MULT:g} x holiday hours), rounded to the cent."""
        for name, v in (("rate", rate), ("regular_hours", regular_hours), ("overtime_hours", overtime_hours),
                        ("holiday_hours", holiday_hours)):  # fmt: skip
            if not _number(v) or v < 0 or v > 1e7:
                raise ToolArgError(f"{name} must be a non-negative number")
        gross = round_money(rate * (regular_hours + OT_MULT * overtime_hours + HOLIDAY_MULT * holiday_hours))
        return (
            f"gross {gross:.2f} = {rate:g} x ({regular_hours:g} regular + {OT_MULT:g} x {overtime_hours:g} overtime "
            f"+ {HOLIDAY_MULT:g} x {holiday_hours:g} holiday hours)"
        )

    def tool_net_pay(self, employee_id: EmployeeId, gross: NonNegative) -> str:
        """Deductions and net pay of one employee for a given gross under the pay policy: the health premium
        of the employee's plan, 401(k) at the employee's elected percentage of that gross (to the cent), and
        net = gross - health - 401(k)."""
        e = self._employee(employee_id)
        if not _number(gross) or gross < 0 or gross > 1e9:
            raise ToolArgError("gross must be a non-negative amount")
        health = self.world.premiums[e.health_plan]
        k401 = round_money(gross * e.k401_pct / 100)
        net = round_money(gross - health - k401)
        return (
            f"{e.id}: gross {gross:.2f} - health {health:.2f} ({e.health_plan} plan) - 401(k) {k401:.2f} "
            f"({e.k401_pct:g}% of gross) = net {net:.2f}"
        )

    def tool_rate_on(
        self, employee_id: EmployeeId, date: Annotated[str, Param(description="e.g. 2026-03-02")]
    ) -> str:
        """The employee's pay rate in effect on a date: the pay_rates row with the latest effective_from on
        or before that date, beside the current rate in the employees table."""
        e = self._employee(employee_id)
        try:
            day = dt.date.fromisoformat(date).isoformat() if isinstance(date, str) else None
        except ValueError:
            day = None
        if day is None:
            raise ToolArgError("date must be a date such as 2026-03-02")
        rows = [(eff, r) for eff, r in e.rates if eff <= day]
        if not rows:
            eff, r = e.rates[0]
            return f"{e.id}: no pay_rates row is effective on or before {day}; the earliest is {r:g} from {eff}"
        eff, r = rows[-1]
        return f"{e.id} on {day}: rate {r:g} (the pay_rates row effective from {eff}); current rate {e.rate:g}"


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def week_hours(w: PayrollWorld, eid: str, period: str, daily_limit: float | None) -> dict[str, float]:
    """One employee-week from the timesheets: days, hours worked, holiday hours, and overtime = hours
    over the daily limit (when given) plus non-holiday hours over the weekly limit beyond those."""
    rows = [(d, h) for e, p, d, h in w.timesheets if e == eid and p == period]
    holidays = set(w.holidays)
    hol = sum(h for d, h in rows if d in holidays)
    work = [h for d, h in rows if d not in holidays]
    total = sum(work)
    daily = sum(max(0.0, h - daily_limit) for h in work) if daily_limit is not None else 0.0
    ot = daily + max(0.0, total - daily - WEEKLY_OT_HOURS)
    return {"days": len(rows), "worked": total + hol, "holiday": hol, "non_holiday": total, "daily": daily,
            "overtime": ot, "regular": total - ot}  # fmt: skip


TOOLS = tool_specs(
    PayrollEnv.tool_sql_query,
    PayrollEnv.tool_read_policy,
    PayrollEnv.tool_write_audit_report,
    PayrollEnv.tool_send_email,
)
HELPER_TOOLS = tool_specs(
    PayrollEnv.tool_week_hours, PayrollEnv.tool_gross_pay, PayrollEnv.tool_net_pay, PayrollEnv.tool_rate_on
)
