"""Payroll auditing: find the erroneous pay stubs of some weekly pay periods and report them.

Services: a payroll database in sqlite (employees, pay-rate history, daily timesheets, issued pay
stubs) behind a read-only SQL tool, a pay-policy document, a report store and a mailbox. The agent
writes a JSON audit report (one finding per erroneous stub: employee, period, error type, corrected
net pay) and emails the payroll manager. The checker reads the stored report, the sent mail and a
fingerprint of the database, never the agent's words.

Injected errors: missed overtime, wrong rate, duplicate payment, terminated employee paid, wrong
deduction. Traps (difficulty-dependent) need implicit knowledge: California daily overtime,
salaried exemption, the rate in effect for the period, and final pay through the termination date.

Beside the modules every family has (`coevolve.tasks`), `world` holds the pay rules.
"""

from __future__ import annotations

from coevolve.tasks.base import TaskFamily
from coevolve.tasks.payroll.checker import check
from coevolve.tasks.payroll.env import HELPER_TOOLS, TOOLS, PayrollEnv
from coevolve.tasks.payroll.plan import audit, plan
from coevolve.tasks.payroll.world import ERROR_TYPES, FACT_IDS, TRAPS, PayrollWorld, build_world

__all__ = ["ERROR_TYPES", "TRAPS", "PayrollFamily", "audit"]


class PayrollFamily(TaskFamily):
    name = "payroll"
    title = "payroll auditing"
    build_world = staticmethod(build_world)
    env_type = PayrollEnv
    base_tools = TOOLS
    helper_tools = HELPER_TOOLS
    planner = staticmethod(plan)
    checker = staticmethod(check)
    cached_plans = True

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


if tuple(f.id for f in PayrollFamily.facts) != FACT_IDS:
    raise RuntimeError("world.FACT_IDS must list the family's facts in order")

