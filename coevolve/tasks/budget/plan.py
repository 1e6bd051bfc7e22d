"""The budget solution as a plan of steps, and the decisions an agent with some knowledge records."""

from __future__ import annotations

from typing import Any

from coevolve.tasks.base import Knowledge, PlanStep, round_money
from coevolve.tasks.budget.world import MONEY_TOL, REASONS, BudgetWorld, Request, usd

FACTS = ("posted_balance", "split_purchases", "blocked_by_tax_id", "currency_conversion")
REASON_TEXT = {
    "blocked_vendor": "the vendor is on the blocked list",
    "over_category_cap": "the amount is over the category cap",
    "split_purchase": "a purchase split across requests still needs the quotes",
    "missing_quotes": "not enough quotes are attached",
    "insufficient_budget": "the department's remaining budget does not cover it",
}


def plan(w: BudgetWorld, knowledge: Knowledge) -> list[PlanStep]:
    decisions = decide(w, knowledge)
    return [
        PlanStep("read_policy", {}),
        PlanStep("list_requests", {}),
        PlanStep("get_department_budget", {}),
        PlanStep(
            "decide_requests",
            {"decisions": decisions},
            facts=FACTS,
            uses=(0, 1, 2),
            constraint="comment_rejections" if w.comment_required else None,
        ),
        PlanStep("finish", {"summary": f"decided {len(decisions)} requests"}),
    ]


def decide(w: BudgetWorld, k: Knowledge) -> list[dict[str, Any]]:
    """The decisions an agent with knowledge `k` records, in submission order. Full knowledge gives the
    ground truth. Cut observations: without the requests (step 1) nothing is decided; without the
    policy (step 0) everything that fits the budget is approved; without the balances (step 2) the
    budget goes unchecked."""
    if 1 in k.cut:
        return []
    facts = k.facts
    see_policy = 0 not in k.cut
    remaining = dict(w.balances) if 2 not in k.cut else None
    convert = "currency_conversion" in facts and see_policy
    by_tax = "blocked_by_tax_id" in facts
    blocked_ids = {t for _, t in w.blocked}
    blocked_names = {n for n, _ in w.blocked}

    def vendor_key(r: Request) -> str:
        return r.vendor_tax_id if by_tax else r.vendor

    split: set[str] = set()
    if "split_purchases" in facts:
        groups: dict[tuple[str, str], list[Request]] = {}
        for r in w.requests:
            groups.setdefault((r.department, vendor_key(r)), []).append(r)
        for members in groups.values():
            total = sum(usd(w, r, convert) for r in members)
            if (len(members) > 1 and total > w.quote_threshold
                    and any(r.quotes_attached < w.quotes_required for r in members)):  # fmt: skip
                split |= {r.id for r in members}
    out = []
    for r in w.requests:
        amount = usd(w, r, convert)
        if not see_policy:
            reason = "within_policy"
        elif (r.vendor_tax_id in blocked_ids) if by_tax else (r.vendor in blocked_names):
            reason = "blocked_vendor"
        elif amount > w.caps[r.category]:
            reason = "over_category_cap"
        elif r.id in split:
            reason = "split_purchase"
        elif amount > w.quote_threshold and r.quotes_attached < w.quotes_required:
            reason = "missing_quotes"
        elif remaining is not None and amount > remaining[r.department] + MONEY_TOL:
            reason = "insufficient_budget"
        elif amount > w.limits[r.level]:
            reason = "above_approval_limit"
        else:
            reason = "within_policy"
        if reason == "within_policy" and not see_policy and remaining is not None and amount > remaining[r.department]:
            reason = "insufficient_budget"
        if reason == "within_policy" and remaining is not None and "posted_balance" in facts:
            remaining[r.department] = round_money(remaining[r.department] - amount)
        item: dict[str, Any] = {"request_id": r.id, "decision": REASONS[reason], "reason_code": reason}
        if REASONS[reason] == "reject" and w.comment_required and "comment_rejections" in k.constraints:
            item["comment"] = f"Rejected: {REASON_TEXT[reason]}."
        out.append(item)
    return out

