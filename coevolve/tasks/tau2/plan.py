"""The reference solution: tau2's gold actions as plan steps, with the messages the gold run needs.

A first message to the customer (tau2's agent always answers the customer), the gold tool calls in
tau2's order, a message carrying every piece of information the task requires the customer to be told
(`communicate_info`), then, for a task whose gold ends in `transfer_to_human_agents`, the transfer and
the message the policy prescribes after it, and `finish`. tau2 tasks declare no domain facts, so the plan
does not depend on knowledge.
"""

from __future__ import annotations

import copy
from typing import Any

from coevolve.tasks.base import PlanStep
from coevolve.tasks.tau2.env import TRANSFER_TOOL

FIRST_MESSAGE = "I can help you with that. Could you please confirm your identity details first?"
TRANSFER_MESSAGE = "YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON."  # the policy's wording


def gold_actions(raw: dict[str, Any]) -> list[dict[str, Any]]:
    crit = raw.get("evaluation_criteria") or {}
    out = []
    for a in crit.get("actions") or []:
        if (a.get("requestor") or "assistant") != "assistant":
            raise ValueError(f"tau2 task {raw['id']}: gold action {a['name']} is the user's; not supported")
        out.append({"name": a["name"], "arguments": copy.deepcopy(a.get("arguments") or {})})
    return out


def plan(raw: dict[str, Any]) -> list[PlanStep]:
    actions = gold_actions(raw)
    info = [str(i) for i in (raw.get("evaluation_criteria") or {}).get("communicate_info") or []]
    cut = next((i for i, a in enumerate(actions) if a["name"] == TRANSFER_TOOL), len(actions))
    steps = [PlanStep("message_user", {"message": FIRST_MESSAGE})]
    steps += [PlanStep(a["name"], a["arguments"]) for a in actions[:cut]]
    if info:
        said = "; ".join(info)
        steps.append(PlanStep("message_user", {"message": f"Here is what you asked for: {said}. Did I get everything?"}))
    if cut < len(actions):
        steps += [PlanStep(a["name"], a["arguments"]) for a in actions[cut:]]
        steps.append(PlanStep("message_user", {"message": TRANSFER_MESSAGE}))
    steps.append(PlanStep("finish", {"summary": "resolved the customer's request"}))
    return steps
