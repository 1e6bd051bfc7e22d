"""The budget services: the request queue, the purchasing policy, the budget service (posted balances)
and the decision register."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from coevolve.tasks.base import FINISH_TOOL, TaskEnv, ToolArgError, round_money
from coevolve.tasks.budget.world import DECISIONS, REASONS, BudgetWorld, Request, usd
from coevolve.tasks.tools import Param, json_schema, tool_specs
from coevolve.values import TaskInstance, ToolSpec

RequestId = Annotated[str, Param(pattern="^PR-[0-9]+$")]
ReasonCode = Annotated[str, Param(enum=list(REASONS))]
_DECISION = {
    "type": "object",
    "properties": {
        "request_id": json_schema(RequestId),
        "decision": {"type": "string", "enum": list(DECISIONS)},
        "reason_code": json_schema(ReasonCode),
        "comment": {"type": "string"},
    },
    "required": ["request_id", "decision", "reason_code"],
    "additionalProperties": False,
}


def policy_text(w: BudgetWorld) -> str:
    lines = [
        f"# {w.company} purchasing policy",
        "",
        "Check every request against these rules in this order; the first rule that fails decides it.",
        "1. Blocked vendors: reject with `blocked_vendor`.",
        "2. Category caps (per request): reject an amount over the cap with `over_category_cap`.",
        (
            f"3. Quotes: a purchase over {w.quote_threshold:,.2f} needs at least {w.quotes_required} quotes "
            "attached; otherwise reject with `missing_quotes` (`split_purchase` when the purchase was split "
            "across requests)."
        ),
        "4. Budget: reject with `insufficient_budget` when the department's remaining budget does not cover it.",
        "5. Approval limits (by requester level): escalate an amount over the limit with `above_approval_limit`.",
        "   An escalated request does not draw on the budget unless it is approved later.",
        "6. Otherwise approve with `within_policy`.",
        "",
        "## Category caps (USD)",
        *[f"- {c}: {v:,.2f}" for c, v in w.caps.items()],
        "",
        "## Approval limits by requester level (USD)",
        *[f"- {lv}: {v:,.2f}" for lv, v in w.limits.items()],
        "",
        "## Blocked vendors",
        *[f"- {n} (tax ID {t})" for n, t in w.blocked],
        "",
        "## Exchange rates to USD",
        *[f"- 1 {c} = {r} USD" for c, r in w.fx.items() if c != "USD"],
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- environment
class BudgetEnv(TaskEnv):
    def __init__(self, instance: TaskInstance, world: BudgetWorld):
        super().__init__(instance)
        self.world = world
        self.register: dict[str, dict[str, Any]] = {}  # request id -> latest decision

    def tool_specs(self) -> tuple[ToolSpec, ...]:
        return (*TOOLS, FINISH_TOOL, *HELPER_TOOLS)

    def tool_read_policy(self) -> str:
        """Read the purchasing policy (rule order, category caps, approval limits, blocked vendors, exchange
        rates)."""
        return policy_text(self.world)

    def tool_list_requests(self) -> str:
        """List the pending purchase requests with all their fields, in submission order."""
        w = self.world
        cols = ("id", "submitted_at", "department", "requester", "level", "category", "vendor", "vendor_tax_id",
                "amount", "currency", "quotes_attached", "description")  # fmt: skip
        lines = [" | ".join(cols)]
        for r in w.requests:
            row = r.row()
            row["amount"] = f"{r.amount:.2f}"
            lines.append(" | ".join(str(row[c]) for c in cols))
        return "\n".join(lines) + f"\n({len(w.requests)} pending requests, in submission order)"

    def tool_read_request(self, request_id: RequestId) -> str:
        """Read one request and its current status."""
        r = self._request(request_id)
        status = self.register.get(r.id)
        return json.dumps({**r.row(), "status": status["decision"] if status else "pending"}, sort_keys=True)

    def tool_get_department_budget(self, department: str | None = None) -> str:
        """Department budgets from the budget service; omit department for all of them."""
        w = self.world
        if department is not None and (not isinstance(department, str) or department not in w.balances):
            raise ToolArgError(f"unknown department {department!r}; departments: {', '.join(w.balances)}")
        depts = [department] if department else list(w.balances)
        lines = ["department | posted_balance_usd | posted_at"]
        lines += [f"{d} | {w.balances[d]:.2f} | {w.day}T00:00 (nightly posting)" for d in depts]
        return "\n".join(lines)

    def tool_decide_requests(
        self, decisions: Annotated[list[dict[str, Any]], Param(minItems=1, items=_DECISION)]
    ) -> str:
        """Record decisions for one or more requests (a later decision on the same request replaces it)."""
        if not isinstance(decisions, list) or not decisions:
            raise ToolArgError("decisions must be a non-empty list of {request_id, decision, reason_code}")
        clean = [self._validate(d) for d in decisions]
        ids = [d["request_id"] for d in clean]
        if len(set(ids)) != len(ids):
            raise ToolArgError("a request appears twice in one call")
        for d in clean:
            self.register[d["request_id"]] = d
        return f"recorded {len(clean)} decisions; {len(self.world.requests) - len(self.register)} requests still pending"

    def tool_approve_request(
        self, request_id: RequestId, reason_code: Literal["within_policy"] = "within_policy"
    ) -> str:
        """Approve one request."""
        return self._single(request_id, "approve", reason_code, None)

    def tool_reject_request(
        self, request_id: RequestId, reason_code: ReasonCode, comment: str | None = None
    ) -> str:
        """Reject one request with a reason code and an optional comment for the requester."""
        return self._single(request_id, "reject", reason_code, comment)

    def tool_escalate_request(
        self, request_id: RequestId, reason_code: Literal["above_approval_limit"] = "above_approval_limit"
    ) -> str:
        """Escalate one request to the next approval level."""
        return self._single(request_id, "escalate", reason_code, None)

    # ------------------------------------------------------------------ helper tools (not in the baseline)
    def tool_usd_amount(self, request_id: RequestId) -> str:
        """A request's amount converted to USD at the purchasing policy's exchange rate."""
        r = self._request(request_id)
        amount = usd(self.world, r)
        if r.currency == "USD":
            return f"{r.id}: {r.amount:,.2f} USD"
        return f"{r.id}: {r.amount:,.2f} {r.currency} = {amount:,.2f} USD (1 {r.currency} = {self.world.fx[r.currency]} USD)"

    def tool_remaining_budget(self, department: str, request_ids: list[RequestId]) -> str:
        """A department's posted balance minus the USD total of the given requests of that department (for
        example the ones approved so far)."""
        w = self.world
        if not isinstance(department, str) or department not in w.balances:
            raise ToolArgError(f"unknown department {str(department)[:40]!r}; departments: {', '.join(w.balances)}")
        if not isinstance(request_ids, list) or len(request_ids) > len(w.requests):
            raise ToolArgError("request_ids must be a list of request ids (empty for none)")
        rs = [self._request(x) for x in request_ids]
        if len({r.id for r in rs}) != len(rs):
            raise ToolArgError("a request appears twice in request_ids")
        if other := [r.id for r in rs if r.department != department]:
            raise ToolArgError(f"not requests of {department}: {', '.join(other)}")
        total = round_money(sum(usd(w, r) for r in rs))
        left = round_money(w.balances[department] - total)
        return (
            f"{department}: posted balance {w.balances[department]:,.2f} USD - {len(rs)} request"
            f"{'s' if len(rs) != 1 else ''} totalling {total:,.2f} USD = {left:,.2f} USD left"
        )

    def tool_vendor_requests(self, department: str, vendor_tax_id: str) -> str:
        """A department's requests from vendors with one tax ID: each one's USD amount and quotes attached,
        and their USD total."""
        w = self.world
        if not isinstance(department, str) or department not in w.balances:
            raise ToolArgError(f"unknown department {str(department)[:40]!r}; departments: {', '.join(w.balances)}")
        if not isinstance(vendor_tax_id, str) or not vendor_tax_id.strip():
            raise ToolArgError("vendor_tax_id must be a tax ID such as 12-3456789")
        rs = [r for r in w.requests if r.department == department and r.vendor_tax_id == vendor_tax_id.strip()]
        if not rs:
            return f"{department} has no requests from a vendor with tax ID {vendor_tax_id.strip()[:40]}"
        total = round_money(sum(usd(w, r) for r in rs))
        plural = "s" if len(rs) != 1 else ""
        lines = [f"{department}, vendor tax ID {rs[0].vendor_tax_id}: {len(rs)} request{plural}, {total:,.2f} USD in total"]
        lines += [f"- {r.id} ({r.vendor}): {usd(w, r):,.2f} USD, {r.quotes_attached} quotes attached" for r in rs]
        return "\n".join(lines)

    # ------------------------------------------------------------------ helpers
    def _single(self, request_id: Any, decision: str, reason_code: Any, comment: Any) -> str:
        d = self._validate({"request_id": request_id, "decision": decision, "reason_code": reason_code, "comment": comment})
        self.register[d["request_id"]] = d
        return f"{d['request_id']}: {decision} ({d['reason_code']}) recorded"

    def _request(self, request_id: Any) -> Request:
        if not isinstance(request_id, str):
            raise ToolArgError("request_id must be a string like PR-1234")
        r = self.world.request(request_id.strip())
        if r is None:
            raise ToolArgError(f"unknown request {request_id[:40]!r}")
        return r

    def _validate(self, d: Any) -> dict[str, Any]:
        if not isinstance(d, dict):
            raise ToolArgError("each decision must be an object {request_id, decision, reason_code}")
        extra = set(d) - {"request_id", "decision", "reason_code", "comment"}
        if extra:
            raise ToolArgError(f"unknown decision fields {sorted(map(str, extra))}")
        r = self._request(d.get("request_id"))
        decision, reason = d.get("decision"), d.get("reason_code")
        if decision not in DECISIONS:
            raise ToolArgError(f"decision must be one of {', '.join(DECISIONS)}")
        if reason not in REASONS:
            raise ToolArgError(f"reason_code must be one of {', '.join(REASONS)}")
        if REASONS[reason] != decision:
            raise ToolArgError(f"reason_code {reason} does not go with decision {decision}")
        comment = d.get("comment")
        if comment is not None and not isinstance(comment, str):
            raise ToolArgError("comment must be a string")
        out = {"request_id": r.id, "decision": decision, "reason_code": reason}
        if comment and comment.strip():
            out["comment"] = comment.strip()
        return out


TOOLS = tool_specs(
    BudgetEnv.tool_read_policy,
    BudgetEnv.tool_list_requests,
    BudgetEnv.tool_read_request,
    BudgetEnv.tool_get_department_budget,
    BudgetEnv.tool_decide_requests,
    BudgetEnv.tool_approve_request,
    BudgetEnv.tool_reject_request,
    BudgetEnv.tool_escalate_request,
)
HELPER_TOOLS = tool_specs(
    BudgetEnv.tool_usd_amount, BudgetEnv.tool_remaining_budget, BudgetEnv.tool_vendor_requests
)
