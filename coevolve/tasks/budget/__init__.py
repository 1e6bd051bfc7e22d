"""Budget approval: decide a day's purchase requests against the purchasing policy.

Services: a request queue (department, requester level, category, vendor and its tax ID, amount and
currency, quotes attached), a budget service with each department's posted balance, the purchasing
policy (category caps, approval limits by level, quote rule, blocked vendors, exchange rates) and a
decision register. The agent approves, rejects or escalates every request with a reason code. The
checker reads the register and the departments' spend, never the agent's words.
"""

from __future__ import annotations

from coevolve.tasks.base import TaskFamily
from coevolve.tasks.budget.checker import check
from coevolve.tasks.budget.env import HELPER_TOOLS, TOOLS, BudgetEnv, policy_text
from coevolve.tasks.budget.plan import decide, plan
from coevolve.tasks.budget.world import REASONS, BudgetWorld, build_world

__all__ = ["REASONS", "BudgetFamily", "decide", "policy_text"]


class BudgetFamily(TaskFamily):
    name = "budget"
    title = "budget approval"
    build_world = staticmethod(build_world)
    env_type = BudgetEnv
    base_tools = TOOLS
    helper_tools = HELPER_TOOLS
    planner = staticmethod(plan)
    checker = staticmethod(check)

    def instruction(self, world: BudgetWorld, instance_id: str) -> str:
        text = (
            f"{world.company}: decide the {len(world.requests)} pending purchase requests submitted on "
            f"{world.day}, in order of submission, under the purchasing policy. Approve, reject or escalate "
            "each one with the policy's reason code (decide_requests, or approve_request / reject_request / "
            "escalate_request). No department may spend more than its budget."
        )
        if world.comment_required:
            text += " Give every rejection a comment for the requester that names the rule."
        return text + " Then call finish."
