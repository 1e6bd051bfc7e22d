"""The budget grader: reads the decision register and the departments' approved spend, never the
agent's words, and reports per requirement.

Reasons name what is wrong with the agent's own register (its decisions, their count, the spend its
approvals add up to) the way a failing test would; they never name the decision a request should have
had or why an instance was built the way it was."""

from __future__ import annotations

from typing import Any

from coevolve.tasks.base import Knowledge, Requirement, graded, listing, plural, round_money
from coevolve.tasks.budget.env import BudgetEnv
from coevolve.tasks.budget.plan import decide
from coevolve.tasks.budget.world import MONEY_TOL, usd
from coevolve.values import Outcome

VERB = {"approve": "approved", "reject": "rejected", "escalate": "escalated"}
NOUN = {"approve": "approvals", "reject": "rejections", "escalate": "escalations"}


def _wrong_kind(decision: str, wrong: list[dict[str, Any]], made: int) -> Requirement:
    """One requirement per kind of decision the agent recorded: every one of that kind is right."""
    if not wrong:
        return Requirement(f"{NOUN[decision]}_correct", True)
    shown = listing([f"{g['request_id']} ({VERB[decision]} as {g['reason_code']})" for g in wrong])
    if made == 1:
        which = f"the one {VERB[decision]} request does"
    else:
        which = f"{len(wrong)} of the {made} {VERB[decision]} requests {'does' if len(wrong) == 1 else 'do'}"
    return Requirement(f"{NOUN[decision]}_correct", False, f"{which} not follow the purchasing policy: {shown}")


def check(env: BudgetEnv, full: Knowledge) -> Outcome:
    w = env.world
    truth = {d["request_id"]: d for d in decide(w, full)}
    got = env.register
    undecided = [rid for rid in truth if rid not in got]
    wrong = {
        rid: g
        for rid, g in got.items()
        if rid in truth and (g["decision"], g["reason_code"]) != (truth[rid]["decision"], truth[rid]["reason_code"])
    }
    reqs = [
        Requirement(
            "every_request_decided",
            not undecided,
            (
                f"{len(undecided)} of the {len(truth)} pending requests "
                f"{'has' if len(undecided) == 1 else 'have'} no recorded decision"
                if got
                else f"no decision was recorded for any of the {len(truth)} pending requests"
            )
            if undecided
            else "",
        )
    ]
    for decision in VERB:
        made = [g for g in got.values() if g["decision"] == decision]
        reqs.append(_wrong_kind(decision, [g for g in made if g["request_id"] in wrong], len(made)))
    spent: dict[str, float] = {}
    for rid, g in got.items():
        r = w.request(rid)
        if r is not None and g["decision"] == "approve":
            spent[r.department] = round_money(spent.get(r.department, 0.0) + usd(w, r))
    overspent = sorted(d for d, s in spent.items() if s > w.balances[d] + MONEY_TOL)
    reqs.append(
        Requirement(
            "no_department_overspent",
            not overspent,
            "; ".join(
                f"{d}'s approved requests add up to {spent[d]:,.2f} USD, "
                f"more than its budget of {w.balances[d]:,.2f} USD"
                for d in overspent
            ),
        )
    )
    if w.comment_required:
        bare = sorted(rid for rid, g in got.items() if g["decision"] == "reject" and not g.get("comment"))
        reqs.append(
            Requirement(
                "rejections_commented",
                not bare,
                "the task asks for a comment on every rejection; "
                f"{plural(len(bare), 'rejection has', 'rejections have')} none: {listing(bare)}"
                if bare
                else "",
            )
        )
    right = len(truth) - len(undecided) - len(wrong)
    score = round(0.9 * right / len(truth), 4) if got and truth else 0.0
    return graded(reqs, score)
