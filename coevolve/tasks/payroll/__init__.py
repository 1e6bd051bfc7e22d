"""Payroll auditing: find the erroneous pay stubs of some weekly pay periods and report them.

Services: a payroll database in sqlite (employees, pay-rate history, daily timesheets, issued pay
stubs) behind a read-only SQL tool, a pay-policy document, a report store and a mailbox. The agent
writes a JSON audit report (one finding per erroneous stub: employee, period, error type, corrected
net pay) and emails the payroll manager. The checker reads the stored report, the sent mail and a
fingerprint of the database, never the agent's words.

Injected errors: missed overtime, wrong rate, duplicate payment, terminated employee paid, wrong
deduction. Traps (difficulty-dependent) need implicit knowledge: California daily overtime,
salaried exemption, the rate in effect for the period, and final pay through the termination date.

The package: `world` (generation and the pay rules), `env` (services and tools), `plan` (the reference
solution as steps), `checker` (the grader), `handbook.md` (the domain documentation).
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import lru_cache
from typing import Any, ClassVar

from coevolve.tasks.base import Concept, Constraint, DomainFact, Knowledge, PlanStep, TaskEnv, TaskFamily
from coevolve.tasks.payroll.checker import check
from coevolve.tasks.payroll.env import HELPER_TOOLS, TOOLS, PayrollEnv, policy_text
from coevolve.tasks.payroll.plan import audit, audit_query, plan
from coevolve.tasks.payroll.world import (
    ERROR_TYPES,
    FACT_IDS,
    TRAPS,
    Employee,
    Pay,
    PayrollWorld,
    Stub,
    build_world,
    deductions,
    expected_pay,
    rate_in_effect,
)
from coevolve.values import Outcome, TaskInstance, ToolSpec

__all__ = [
    "ERROR_TYPES",
    "TRAPS",
    "Employee",
    "Pay",
    "PayrollEnv",
    "PayrollFamily",
    "PayrollWorld",
    "Stub",
    "audit",
    "audit_query",
    "deductions",
    "expected_pay",
    "policy_text",
    "rate_in_effect",
]

_CALIFORNIA = ("california", "ca ", "ca,", "ca.", "ca)", "ca-", "ca'", "ca's", "ca:", "ca;", "ca/")
_OVERTIME = ("overtime", "over-time", "over time", "ot ", "ot,", "ot.", "ot)", "time and a half", "time-and-a-half",
             "1.5", "one and a half", "premium rate")  # fmt: skip
_SALARIED = ("salaried", "salary", "salaries")


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
            Concept((
                _CALIFORNIA,
                ("daily", "per day", "a day", "each day", "any day", "one day", "single day", "in a day", "workday",
                 "work day", "working day", "work-day", "per shift", "a shift", "one shift", "each shift",
                 "single shift", "day's", "daily hours", "day ", "day,", "day.", "day;", "day:", "day)", "day-",
                 "a given day", "per-day"),
                ("8", "eight", "ninth", "9th"),
                _OVERTIME,
            )),
            reversals=(
                # overtime is only weekly
                Concept((
                    _OVERTIME,
                    ("only weekly", "only by the week", "only per week", "weekly only", "only over 40",
                     "only above 40", "only beyond 40", "only after 40", "only past 40",
                     "only hours over 40", "only hours above 40", "only hours beyond 40",
                     "only hours past 40", "only the hours over 40", "only the hours above 40",
                     "only the hours beyond 40", "only when the week", "only if the week",
                     "only once the week", "only by the week", "by the week only", "just weekly",
                     "purely weekly", "solely weekly"),
                )),
                # a long day is not overtime by itself
                Concept((
                    _OVERTIME,
                    ("no daily", "not daily", "never daily", "isn't daily", "no per-day", "not per day",
                     "however long a", "however long the day", "no matter how long the day",
                     "regardless of daily", "regardless of how long", "long day does not", "long days do not",
                     "long day doesn't", "long days don't", "day does not matter", "day doesn't matter",
                     "days do not matter", "days don't matter", "daily hours are not", "daily hours aren't",
                     "daily hours do not", "daily hours don't", "daily hours never", "ignore daily",
                     "ignoring daily"),
                )),
            ),
        ),
        DomainFact(
            "salaried_exempt",
            "Salaried employees are exempt: they are paid their weekly salary whatever hours they log, "
            "with no overtime.",
            Concept((
                _SALARIED,
                ("overtime", "over-time", "long week", "longer week", "over 40", "more than 40", "beyond 40",
                 "above 40", "> 40", ">40", "ot ", "ot,", "ot.", "ot)", "how many hours", "how long", "hours they", "hours logged", "hours worked",
                 "hours recorded", "hours booked", "logged hours", "worked hours", "recorded hours", "extra hours",
                 "long hours", "longer hours", "more hours", "whatever hours", "hours on the timesheet",
                 "hours in the timesheet", "-hour week", " hour week",
                 "exempt from overtime", "exempt from ot", "exempt from the overtime", "exempt from any overtime",
                 "overtime-exempt", "overtime exempt", "exempt:", "exempt.", "exempt,", "exempt;", "exempt (",
                 "exempt -", "exempt employee", "exempt staff", "exempt worker", "exempt status", "exempt and",
                 "exempt under", "flsa"),
                ("exempt from overtime", "exempt from ot", "exempt from the overtime", "exempt from any overtime",
                 "overtime-exempt", "overtime exempt", "exempt:", "exempt.", "exempt,", "exempt;", "exempt (",
                 "exempt -", "exempt employee", "exempt staff", "exempt worker", "exempt status", "exempt and",
                 "exempt under", "flsa",
                 "no overtime", "not overtime", "not pay overtime", "don't pay overtime", "never pay overtime", "never overtime", "without overtime", "no ot",
                 "not eligible", "ineligible", "not entitled", "no entitlement", "not earn", "never earn",
                 "doesn't earn", "don't earn", "do not get", "does not get", "don't get", "doesn't get", "never get",
                 "not receive", "never receive", "doesn't receive", "don't receive", "not paid overtime",
                 "never paid overtime", "overtime does not appl", "overtime doesn't appl", "overtime never appl",
                 "overtime rules do not appl", "overtime rules don't appl", "overtime rule does not appl",
                 "overtime rule doesn't appl", "regardless", "irrespective", "whatever hours", "however many",
                 "however long", "no matter", "no extra pay", "no extra money", "nothing extra", "no additional pay",
                 "flat weekly", "same weekly", "same salary", "same amount", "just the weekly", "only the weekly",
                 "only their weekly", "only its weekly", "simply the weekly", "exactly the weekly",
                 "exactly their weekly", "always the weekly", "always their weekly"),
            )),
            reversals=(
                # salaried employees earn overtime
                Concept(
                    (
                        _SALARIED,
                        ("overtime", "over-time", "time and a half", "time-and-a-half", "1.5x", "ot "),
                        ("earn", "get", "receive", "are paid", "is paid", "be paid", "owed", "eligible",
                         "entitled", "calculat", "compute", "apply", "applies", "like hourly",
                         "same as hourly", "just like"),
                    ),
                    unless=("exempt",),
                ),
                # salaried employees are paid by the hour
                Concept((
                    _SALARIED,
                    ("paid for the hours", "paid for each hour", "paid for every hour", "paid by the hour",
                     "paid hourly", "pay them hourly", "pay them by the hour", "hours times",
                     "hours multiplied"),
                )),
            ),
        ),
        DomainFact(
            "rate_effective_date",
            "Pay each period at the rate in effect on the period's start (the latest pay_rates row "
            "effective on or before it); employees.rate is only the current rate.",
            Concept((
                ("rate", "wage", "raise", "pay_rates", "pay rise", "pay increase", "salary"),
                ("in effect", "effective", "in force", "take effect", "takes effect", "took effect", "taking effect",
                 "applicable", "applies from", "apply from", "applied from", "valid from", "valid on", "valid at",
                 "valid when", "as of the period", "as of the start", "as of each", "as of that", "as of its",
                 "prevailing", "current rate", "present rate", "latest rate", "newest rate"),
                ("period's start", "start of the period", "start of each period", "start of that period",
                 "start of the pay", "start of each pay", "start of that pay", "start of a pay", "start of a period", "start of the week", "start of each week", "start of that week",
                 "period start", "periods start", "period begins", "period began", "period starts", "period started",
                 "week starts", "week begins", "week began", "week started", "weeks that start", "weeks starting",
                 "periods that start", "periods starting", "periods before", "weeks before", "on or before",
                 "no later than", "not later than", "effective by", "in effect by", "opening day", "opening date",
                 "first day of the period", "first day of each period", "first day of that period",
                 "period's first day", "period's opening", "historical period", "past period", "earlier period",
                 "only the present", "present-day", "today's rate",
                 "at the time", "old rate", "previous rate", "prior rate", "earlier rate", "former rate",
                 "not the current", "not their current", "not the employee's current", "not the employees",
                 "not employees.rate", "rather than the current", "instead of the current", "rather than employees.rate",
                 "instead of employees.rate", "only the current", "only the latest", "only the newest"),
            )),
            rare=True,
            reversals=(
                # every period at the current rate
                Concept((
                    ("at the current rate", "at their current rate", "at the employee's current rate",
                     "at employees.rate", "use employees.rate", "using employees.rate",
                     "use the current rate", "using the current rate", "from employees.rate",
                     "at today's rate", "at the latest rate", "at the newest rate", "at the present rate",
                     "current rate for", "employees.rate for", "at the rate in the employees",
                     "at the rate from the employees", "rate from the employees table", "in employees.rate",
                     "shown in employees.rate", "rate currently", "currently shown"),
                    ("every period", "all periods", "each period", "every pay period", "all pay periods",
                     "always", "for all", "throughout", "past periods", "earlier periods", "old periods",
                     "historical periods", "regardless", "ignore the rate history",
                     "ignoring the rate history", "ignore pay_rates", "ignoring pay_rates",
                     "no need to look up", "retroactive"),
                )),
                # a raise applies to earlier periods too
                Concept((
                    ("raise", "rate change", "new rate", "pay rise", "pay increase"),
                    ("retroactive", "backdated", "back-dated", "applies to all", "applies to every",
                     "applies to earlier", "applies to past", "covers earlier", "covers past"),
                )),
            ),
        ),
        DomainFact(
            "final_pay_through_termination",
            "A terminated employee's final pay runs through the termination date: every period that starts on "
            "or before it is owed; only stubs for periods that start after the termination date are "
            "terminated_paid errors.",
            Concept((
                ("terminated", "termination", "leaver", "separated", "separation", "dismissed", "resigned",
                 "resignation", "departed", "offboarded", "last day", "last working day", "leaving date", "exit date",
                 "end date", "left the company"),
                ("owed", "still due", "due to them", "still paid", "still be paid", "still gets paid", "must be paid",
                 "is paid", "are paid", "be paid", "get paid", "gets paid", "entitled", "final pay", "final wage",
                 "final stub", "final paycheck", "final paycheque", "final week", "last pay",
                 "last stub", "legitimate", "not an error", "not errors", "not a terminated_paid", "not flag",
                 "correctly paid", "correct to pay", "valid", "error", "flag", "terminated_paid", "wrongly paid", "improper", "overpay"),
                ("through the", "through their", "through his", "through her", "up to", "until the", "until their",
                 "up until", "on or before", "starts after", "start after", "starting after", "started after",
                 "begins after", "begin after", "beginning after", "began after", "entirely after", "wholly after",
                 "after the termination", "after termination", "after their termination", "after the last day",
                 "after their last day", "started before", "starts before", "start before", "starting before",
                 "began before", "begins before", "begin before", "after the leaving", "after the exit", "after the end date", "containing",
                 "that includes", "which includes", "including the", "inclusive", "still employed",
                 "while employed", "before or on"),
            )),
            reversals=(
                # nothing is owed to a terminated employee: any stub is an error
                Concept(
                    (
                        ("terminated", "termination", "leaver", "left the company", "departed"),
                        ("any stub", "every stub", "all stubs", "any pay", "any period", "every period",
                         "all periods", "any paycheck", "anything paid"),
                        ("error", "terminated_paid", "wrong", "flag", "not owed", "isn't owed", "overpa",
                         "improper"),
                    ),
                    unless=("on or before", "starts after", "start after", "started after", "begin after",
                            "begins after", "began after", "beginning after", "starting after",
                            "after the termination", "after termination", "after their termination",
                            "after the last day", "after they left", "before the termination",
                            "before termination", "up to the termination", "through the termination",
                            "until the termination", "still owed", "still due", "still paid"),
                ),
                # the period that holds the termination date is not owed
                Concept((
                    ("terminat", "leaver"),
                    ("period containing", "period that contains", "period that includes", "final period",
                     "last period", "partial period", "mid-period"),
                    ("not owed", "isn't owed", "is not owed", "nothing is owed", "no pay", "unpaid",
                     "not paid", "error", "terminated_paid"),
                )),
            ),
        ),
        DomainFact(
            "deductions_follow_gross",
            "When gross pay is corrected, the 401(k) deduction is recomputed as the elected percentage of "
            "the corrected gross; the health premium is fixed per week.",
            Concept((
                ("401", "k401", "retirement", "pension", "percentage deduction", "percent deduction",
                 "deductions", "deduction"),
                ("recomput", "re-comput", "recalculat", "re-calculat", "redo", "redone", "rework", "re-derive",
                 "rederive", "follows the corrected", "follow the corrected", "follows the gross", "follow the gross",
                 "follows gross", "follow gross", "tracks the gross", "track the gross", "tracks gross",
                 "with the gross", "with gross", "with the corrected", "with the new gross", "based on the corrected", "of the corrected", "from the corrected",
                 "on the corrected", "to the corrected", "corrected gross", "new gross", "right gross",
                 "correct gross", "true gross", "fixed gross", "recomputed gross", "recalculated gross"),
                ("gross",),
            )),
            common=True,
            reversals=(
                # the 401(k) deduction stays as it was
                Concept((
                    ("401", "k401", "retirement", "pension", "percentage deduction", "percent deduction",
                     "elected percentage", "all deductions", "every deduction", "the deductions",
                     "all the deductions"),
                    ("as they were", "keep all", "unchanged", "as is", "as it is", "as-is", "original",
                     "keep the", "leave the", "stays the same", "stay the same", "remains the same",
                     "remain the same", "don't change", "do not change", "not change", "never changes",
                     "doesn't change", "does not change", "untouched", "as recorded", "as on the stub",
                     "not recomput", "no need to recomput", "don't recomput", "do not recomput"),
                    ("gross", "correct"),
                ), unless=("health", "premium", "insurance")),
            ),
        ),
    )
    constraints = (
        Constraint(
            "cc_controller",
            "When the task asks for it, CC the finance controller on the audit email.",
            Concept((
                ("cc", "carbon copy", "carbon-copy", "copy the", "copy in", "copy to", "copies the", "copied",
                 "copying the", "in copy", "on copy", "loop in", "also go to", "also goes to", "also send", "also be sent",
                 "also sent to", "also receive", "also get"),
                ("controller",),
            )),
            reversals=(
                # the controller stays off the email
                Concept((
                    ("controller",),
                    ("leave the controller off", "leave off", "off the copy", "off the cc", "no cc",
                     "not be copied", "not copied", "exclude", "without the controller", "without copying",
                     "only to the payroll", "only the payroll", "only to payroll"),
                )),
            ),
        ),
    )

    # ------------------------------------------------------------------ generation
    def build_world(self, seed: int, params: dict[str, Any]) -> PayrollWorld:
        return build_world(seed, params)

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

    def optional_tools(self) -> tuple[ToolSpec, ...]:
        """Helper tools the environment offers beside the baseline's (domain computation over data the base
        tools expose); an `add_tool` edit naming one adds it to a harness (`coevolve.tasks.helpers`)."""
        return HELPER_TOOLS

    # ------------------------------------------------------------------ solution
    def plan(self, instance: TaskInstance, knowledge: Knowledge) -> list[PlanStep]:
        steps = _plan(instance.seed, json.dumps(instance.params, sort_keys=True), knowledge)
        return [replace(s, args=dict(s.args)) for s in steps]

    def check(self, env: TaskEnv) -> Outcome:
        assert isinstance(env, PayrollEnv)
        return check(env, self.full_knowledge())


if tuple(f.id for f in PayrollFamily.facts) != FACT_IDS:
    raise RuntimeError("world.FACT_IDS must list the family's facts in order")


@lru_cache(maxsize=4096)
def _plan(seed: int, params_json: str, knowledge: Knowledge) -> tuple[PlanStep, ...]:
    """The plan is a pure function of the instance and the knowledge; synthetic agents ask for it every turn."""
    from coevolve.tasks import get_family

    return plan(get_family("payroll").world(seed, json.loads(params_json)), knowledge)
