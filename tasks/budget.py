"""Budget approval: decide a day's purchase requests against the purchasing policy.

Services: a request queue (department, requester level, category, vendor and its tax ID, amount and
currency, quotes attached), a budget service with each department's posted balance, the purchasing
policy (category caps, approval limits by level, quote rule, blocked vendors, exchange rates) and a
decision register. The agent approves, rejects or escalates every request with a reason code. The
checker reads the register and the departments' spend, never the agent's words.

Traps (difficulty-dependent) need implicit knowledge: the budget service shows the *posted* balance
(today's approvals are not in it), purchases split across requests are one purchase for the quote
rule, and blocked vendors are matched by tax ID, not by trading name.
"""

from __future__ import annotations

import json
import random
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
)

TRAPS = ("running_balance", "split_purchase", "renamed_vendor")
TRAP_RATE = {1: 0.08, 2: 0.25, 3: 0.4}
DECISIONS = ("approve", "reject", "escalate")
REASONS = {
    "within_policy": "approve",
    "blocked_vendor": "reject",
    "over_category_cap": "reject",
    "split_purchase": "reject",
    "missing_quotes": "reject",
    "insufficient_budget": "reject",
    "above_approval_limit": "escalate",
}
REASON_TEXT = {
    "blocked_vendor": "the vendor is on the blocked list",
    "over_category_cap": "the amount is over the category cap",
    "split_purchase": "a purchase split across requests still needs the quotes",
    "missing_quotes": "not enough quotes are attached",
    "insufficient_budget": "the department's remaining budget does not cover it",
}
BASE_OUTCOMES = (
    ("within_policy", 0.5),
    ("above_approval_limit", 0.14),
    ("blocked_vendor", 0.08),
    ("over_category_cap", 0.08),
    ("missing_quotes", 0.1),
    ("insufficient_budget", 0.1),
)
CATEGORIES = {
    "software": 20000, "hardware": 30000, "travel": 6000, "training": 4000,
    "marketing": 25000, "office_supplies": 2500, "consulting": 50000,
}  # fmt: skip
LEVELS = {"staff": 1000, "manager": 10000, "director": 50000, "vp": 200000}
DEPARTMENTS = ("Engineering", "Marketing", "Sales", "Operations", "Facilities", "People", "Finance", "Legal",
               "Support", "Research")  # fmt: skip
VENDOR_A = ("Apex", "Blue", "Cedar", "Delta", "Ember", "Falcon", "Granite", "Harbor", "Iris", "Juniper",
            "Keystone", "Lumen", "Maple", "Nimbus", "Orion", "Pioneer", "Quartz", "Ridge", "Summit", "Tidal")  # fmt: skip
VENDOR_B = ("Supply", "Systems", "Labs", "Partners", "Logistics", "Software", "Consulting", "Goods", "Works",
            "Media", "Travel", "Office")  # fmt: skip
PEOPLE = ("A. Novak", "B. Osei", "C. Park", "D. Reyes", "E. Sato", "F. Tanaka", "G. Umar", "H. Varga",
          "I. Wong", "J. Yilmaz", "K. Zhou", "L. Adams", "M. Brandt", "N. Costa")  # fmt: skip
COMPANIES = ("Northwind", "Contoso", "Fabrikam", "Tailspin", "Wingtip")
MONEY_TOL = 0.005


@dataclass(frozen=True)
class Request:
    id: str
    submitted_at: str
    department: str
    requester: str
    level: str
    category: str
    vendor: str
    vendor_tax_id: str
    amount: float
    currency: str
    quotes_attached: int
    description: str

    def row(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


@dataclass(frozen=True)
class BudgetWorld:
    company: str
    day: str
    caps: dict[str, float]
    limits: dict[str, float]
    quote_threshold: float
    quotes_required: int
    fx: dict[str, float]
    blocked: tuple[tuple[str, str], ...]  # (name, tax id)
    balances: dict[str, float]  # posted balance per department
    requests: tuple[Request, ...]  # in submission order
    comment_required: bool
    traps: tuple[str, ...]

    def request(self, rid: str) -> Request | None:
        return next((r for r in self.requests if r.id == rid), None)


def _money(x: float) -> float:
    return round(x + 1e-9, 2)


def usd(w: BudgetWorld, r: Request, convert: bool = True) -> float:
    return _money(r.amount * w.fx[r.currency]) if convert else r.amount


# ---------------------------------------------------------------------------------- decisions
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
            remaining[r.department] = _money(remaining[r.department] - amount)
        item: dict[str, Any] = {"request_id": r.id, "decision": REASONS[reason], "reason_code": reason}
        if REASONS[reason] == "reject" and w.comment_required and "comment_rejections" in k.constraints:
            item["comment"] = f"Rejected: {REASON_TEXT[reason]}."
        out.append(item)
    return out


# ---------------------------------------------------------------------------------- generation
@lru_cache(maxsize=512)
def _world(seed: int, params_json: str) -> BudgetWorld:
    params = json.loads(params_json)
    rng = random.Random(seed)
    difficulty = int(params["difficulty"])
    size = int(params["size"])
    trap_rate = TRAP_RATE.get(difficulty, TRAP_RATE[3])
    company = rng.choice(COMPANIES)
    day = f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    caps = {c: float(round(v * rng.uniform(0.9, 1.1) / 500) * 500) for c, v in CATEGORIES.items()}
    limits = {lv: float(round(v * rng.uniform(0.8, 1.2) / 500) * 500) for lv, v in LEVELS.items()}
    quote_threshold = float(rng.choice((5000, 7500, 10000, 12500)))
    quotes_required = rng.choice((2, 3))
    fx = {"USD": 1.0, "EUR": round(rng.uniform(1.04, 1.14), 3), "GBP": round(rng.uniform(1.2, 1.34), 3)}
    departments = rng.sample(DEPARTMENTS, 3 + size)
    names = [f"{a} {b}" for a in VENDOR_A for b in VENDOR_B]
    rng.shuffle(names)
    used_tax: set[str] = set()

    def tax_id() -> str:
        while True:
            t = f"{rng.randint(10, 99)}-{rng.randint(1000000, 9999999)}"
            if t not in used_tax:
                used_tax.add(t)
                return t

    blocked = tuple((names.pop(), tax_id()) for _ in range(2 * size + 1))
    traps = tuple(t for t in TRAPS if rng.random() < trap_rate)
    comment_required = rng.random() < trap_rate

    def fresh_vendor() -> tuple[str, str]:
        return names.pop(), tax_id()

    # each draft: dict of request fields plus its intended outcome (the checker recomputes the truth)
    drafts: list[dict[str, Any]] = []

    def draft(outcome: str, dept: str | None = None, **fixed: Any) -> dict[str, Any]:
        d = {"outcome": outcome, "department": dept or rng.choice(departments)}
        d.update(fixed)
        drafts.append(d)
        return d

    def fit(d: dict[str, Any], lo: float, hi: float) -> None:
        """Pick a category, level and amount with lo < usd amount <= hi (approvable unless told)."""
        cats = [c for c, cap in caps.items() if cap > lo * 1.05]
        d.setdefault("category", rng.choice(cats))
        hi = min(hi, caps[d["category"]] * 0.98)
        amount_usd = _money(rng.uniform(lo, hi))
        if "level" not in d:
            ok = [lv for lv, lim in limits.items() if lim >= amount_usd * 1.02]
            d["level"] = ok[0] if ok and rng.random() < 0.6 else (rng.choice(ok) if ok else "vp")
        cur = d.setdefault("currency", rng.choice(("USD",) * 6 + ("EUR", "GBP")))
        d["amount"] = _money(amount_usd / fx[cur])
        d["amount_usd"] = _money(d["amount"] * fx[cur])
        d["quotes"] = quotes_required + rng.randint(0, 1) if amount_usd > quote_threshold * 0.95 else rng.randint(0, 2)

    n_base = 8 * size - 2
    outcomes = [o for o, _ in BASE_OUTCOMES]
    weights = [p for _, p in BASE_OUTCOMES]
    picks = rng.choices(outcomes, weights, k=n_base)
    if all(o == "within_policy" for o in picks):
        picks[0] = rng.choice(outcomes[1:])
    for outcome in picks:
        if outcome == "within_policy":
            d = draft(outcome)
            fit(d, 150, 15000)
        elif outcome == "above_approval_limit":
            lv = rng.choice(("staff", "manager"))
            d = draft(outcome, level=lv)
            cats = [c for c, cap in caps.items() if cap > limits[lv] * 1.2]
            d["category"] = rng.choice(cats)
            fit(d, limits[lv] * 1.05, min(caps[d["category"]], limits[lv] * 3))
            d["level"] = lv
        elif outcome == "blocked_vendor":
            d = draft(outcome)
            d["vendor"], d["tax"] = rng.choice(blocked)
            fit(d, 200, 9000)
        elif outcome == "over_category_cap":
            d = draft(outcome)
            d["category"] = rng.choice(list(caps))
            cap = caps[d["category"]]
            d["level"] = "vp"
            d["amount_usd"] = _money(cap * rng.uniform(1.1, 1.6))
        elif outcome == "missing_quotes":
            d = draft(outcome)
            cats = [c for c, cap in caps.items() if cap > quote_threshold * 1.3]
            d["category"] = rng.choice(cats)
            fit(d, quote_threshold * 1.05, caps[d["category"]])
            d["quotes"] = rng.randint(0, quotes_required - 1)
        else:  # insufficient_budget: sized once the balances are known
            draft(outcome)
    if "split_purchase" in traps:
        dept = rng.choice(departments)
        vendor = fresh_vendor()
        for _ in range(2):
            d = draft("split_purchase", dept, vendor=vendor[0], tax=vendor[1], level="director", currency="USD")
            cats = [c for c, cap in caps.items() if cap > quote_threshold]
            d["category"] = d.get("category") or rng.choice(cats)
            d["amount"] = d["amount_usd"] = _money(rng.uniform(0.55, 0.95) * quote_threshold)
            d["quotes"] = rng.randint(0, min(1, quotes_required - 1))
        drafts[-1]["category"] = drafts[-2]["category"]
    if "renamed_vendor" in traps:  # a blocked company under a new trading name
        d = draft("blocked_vendor", vendor=names.pop(), tax=rng.choice(blocked)[1], currency="USD")
        fit(d, 300, min(4000, quote_threshold * 0.9))
    for d in drafts:
        if "vendor" not in d:
            d["vendor"], d["tax"] = fresh_vendor()
        d.setdefault("currency", "USD")
        if "amount" not in d and "amount_usd" in d:
            d["amount"] = d["amount_usd"]
            d.setdefault("quotes", quotes_required)
    # posted balances: every approval fits; the running-balance trap adds one approval that fits the
    # posted balance but not what is left after the department's earlier approvals
    rng.shuffle(drafts)
    balances: dict[str, float] = {}
    late: dict[str, Any] | None = None
    if "running_balance" in traps:
        dept = rng.choice(departments)
        for d in drafts:  # escalations elsewhere: what is left after the approvals is kept small
            if d["department"] == dept and d["outcome"] == "above_approval_limit":
                d["department"] = rng.choice([x for x in departments if x != dept])
        late = {"outcome": "insufficient_budget", "department": dept}
        fit(late, 1500, min(9000, quote_threshold * 0.95))
        late["vendor"], late["tax"] = fresh_vendor()
    for dept in departments:
        approved = sum(d["amount_usd"] for d in drafts if d["department"] == dept and d["outcome"] == "within_policy")
        escalated = [d["amount_usd"] for d in drafts if d["department"] == dept and d["outcome"] == "above_approval_limit"]
        slack = _money(max([rng.uniform(300, 4000)] + [a + rng.uniform(100, 2000) for a in escalated]))
        if late is not None and late["department"] == dept:
            slack = _money(rng.uniform(0.2, 0.8) * late["amount_usd"])
            if approved + slack < late["amount_usd"]:  # the late request alone must fit the posted balance
                filler = {"outcome": "within_policy", "department": dept}
                fit(filler, late["amount_usd"] - approved - slack + 100, late["amount_usd"] + 2000)
                filler["vendor"], filler["tax"] = fresh_vendor()
                drafts.insert(0, filler)
                approved += filler["amount_usd"]
        balances[dept] = _money(approved + slack)
    for d in drafts:
        if d["outcome"] == "insufficient_budget" and "amount" not in d:
            need = balances[d["department"]] + rng.uniform(200, 3000)
            cats = [c for c, cap in caps.items() if cap > need * 1.05]
            if not cats:  # the department is too rich for any category: make it a cap breach instead
                d["outcome"], d["category"], d["level"] = "over_category_cap", rng.choice(list(caps)), "vp"
                d["currency"] = "USD"
                d["amount"] = d["amount_usd"] = _money(caps[d["category"]] * rng.uniform(1.1, 1.5))
                d["quotes"] = quotes_required
                continue
            d["category"] = rng.choice(cats)
            d["level"], d["currency"] = "vp", "USD"
            d["amount"] = d["amount_usd"] = _money(rng.uniform(need, min(caps[d["category"]], need * 1.3)))
            d["quotes"] = quotes_required + (1 if rng.random() < 0.3 else 0)
    if late is not None:
        drafts.append(late)  # submitted last of the day
    requests = []
    start = rng.randint(7, 9) * 60
    minute = start
    ids = rng.sample(range(1000, 9999), len(drafts))
    for i, d in enumerate(drafts):
        minute += rng.randint(3, 40)
        requests.append(
            Request(
                id=f"PR-{ids[i]}",
                submitted_at=f"{day}T{minute // 60:02d}:{minute % 60:02d}",
                department=d["department"],
                requester=rng.choice(PEOPLE),
                level=d.get("level", "manager"),
                category=d["category"],
                vendor=d["vendor"],
                vendor_tax_id=d["tax"],
                amount=d["amount"],
                currency=d["currency"],
                quotes_attached=int(d.get("quotes", 0)),
                description=f"{d['category'].replace('_', ' ')} from {d['vendor']}",
            )
        )
    return BudgetWorld(company, day, caps, limits, quote_threshold, quotes_required, fx, blocked, balances,
                       tuple(requests), comment_required, traps + (("comment",) if comment_required else ()))  # fmt: skip


# ---------------------------------------------------------------------------------- the family
class BudgetFamily(TaskFamily):
    name = "budget"
    title = "budget approval"
    default_params: ClassVar[dict[str, Any]] = {"difficulty": 2, "size": 1}
    facts = (
        DomainFact(
            "posted_balance",
            "The budget service shows the posted balance: approvals made today are not in it until the "
            "nightly posting. Subtract each request you approve, in submission order, before checking the next.",
            ("posted balance", "subtract each request you approve", "running balance"),
        ),
        DomainFact(
            "split_purchases",
            "Requests from one department to one vendor in the same batch are a single purchase for the quote "
            "rule: if together they exceed the quote threshold and any lacks the quotes, reject all of them "
            "with split_purchase.",
            ("split purchase", "single purchase for the quote rule", "together they exceed"),
        ),
        DomainFact(
            "blocked_by_tax_id",
            "Blocked vendors are identified by tax ID: a blocked company may reappear under a new trading "
            "name, so match vendor_tax_id, not the vendor name.",
            ("identified by tax id", "match vendor_tax_id", "new trading name"),
        ),
        DomainFact(
            "currency_conversion",
            "Policy limits and budgets are in USD: convert other currencies at the policy's exchange rates "
            "before any comparison or subtraction.",
            ("convert other currencies", "exchange rates before", "amounts in usd"),
            common=True,
        ),
    )
    constraints = (
        Constraint(
            "comment_rejections",
            "When the task asks for it, every rejection carries a comment for the requester.",
            ("comment for the requester", "every rejection carries a comment", "every field the task asks"),
        ),
    )

    def world(self, seed: int, params: dict[str, Any]) -> BudgetWorld:
        return _world(seed, json.dumps(params, sort_keys=True))

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

    def make_env(self, instance: TaskInstance) -> BudgetEnv:
        return BudgetEnv(instance, self.world(instance.seed, instance.params))

    def baseline_tools(self) -> tuple[ToolSpec, ...]:
        return TOOLS

    def plan(self, instance: TaskInstance, knowledge: Knowledge) -> list[PlanStep]:
        steps = _plan(instance.seed, json.dumps(instance.params, sort_keys=True), knowledge)
        return [replace(s, args=json.loads(json.dumps(s.args))) for s in steps]

    def _plan(self, w: BudgetWorld, knowledge: Knowledge) -> tuple[PlanStep, ...]:
        decisions = decide(w, knowledge)
        return (
            PlanStep("read_policy", {}),
            PlanStep("list_requests", {}),
            PlanStep("get_department_budget", {}),
            PlanStep(
                "decide_requests",
                {"decisions": decisions},
                facts=tuple(f.id for f in self.facts),
                uses=(0, 1, 2),
                constraint="comment_rejections" if w.comment_required else None,
            ),
            PlanStep("finish", {"summary": f"decided {len(decisions)} requests"}),
        )

    def check(self, env: TaskEnv) -> Outcome:
        assert isinstance(env, BudgetEnv)
        w = env.world
        truth = {d["request_id"]: d for d in decide(w, self.full_knowledge())}
        got = env.register
        wrong = sorted(
            [rid, f"{got[rid]['decision']}/{got[rid]['reason_code']}" if rid in got else "undecided",
             f"{t['decision']}/{t['reason_code']}"]
            for rid, t in truth.items()
            if rid not in got or (got[rid]["decision"], got[rid]["reason_code"]) != (t["decision"], t["reason_code"])
        )  # fmt: skip
        spent: dict[str, float] = {}
        for rid, g in got.items():
            r = w.request(rid)
            if r is not None and g["decision"] == "approve":
                spent[r.department] = _money(spent.get(r.department, 0.0) + usd(w, r))
        overspent = {d: [s, w.balances[d]] for d, s in spent.items() if s > w.balances[d] + MONEY_TOL}
        uncommented = []
        if w.comment_required:
            uncommented = sorted(rid for rid, g in got.items() if g["decision"] == "reject" and not g.get("comment"))
        passed = not wrong and not overspent and not uncommented and bool(truth)
        right = len(truth) - len(wrong)
        score = 1.0 if passed else round(0.9 * right / len(truth), 4) if got else 0.0
        return Outcome(
            passed,
            score,
            {"wrong": wrong, "overspent": overspent, "uncommented": uncommented, "traps": list(w.traps)},
        )


@lru_cache(maxsize=4096)
def _plan(seed: int, params_json: str, knowledge: Knowledge) -> tuple[PlanStep, ...]:
    family = BudgetFamily()
    return family._plan(family.world(seed, json.loads(params_json)), knowledge)


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
        return (*TOOLS, FINISH_TOOL)

    def tool_read_policy(self) -> str:
        return policy_text(self.world)

    def tool_list_requests(self) -> str:
        w = self.world
        cols = ("id", "submitted_at", "department", "requester", "level", "category", "vendor", "vendor_tax_id",
                "amount", "currency", "quotes_attached", "description")  # fmt: skip
        lines = [" | ".join(cols)]
        for r in w.requests:
            row = r.row()
            row["amount"] = f"{r.amount:.2f}"
            lines.append(" | ".join(str(row[c]) for c in cols))
        return "\n".join(lines) + f"\n({len(w.requests)} pending requests, in submission order)"

    def tool_read_request(self, request_id: str) -> str:
        r = self._request(request_id)
        status = self.register.get(r.id)
        return json.dumps({**r.row(), "status": status["decision"] if status else "pending"}, sort_keys=True)

    def tool_get_department_budget(self, department: str | None = None) -> str:
        w = self.world
        if department is not None and (not isinstance(department, str) or department not in w.balances):
            raise ToolArgError(f"unknown department {department!r}; departments: {', '.join(w.balances)}")
        depts = [department] if department else list(w.balances)
        lines = ["department | posted_balance_usd | posted_at"]
        lines += [f"{d} | {w.balances[d]:.2f} | {w.day}T00:00 (nightly posting)" for d in depts]
        return "\n".join(lines)

    def tool_decide_requests(self, decisions: list[dict[str, Any]]) -> str:
        if not isinstance(decisions, list) or not decisions:
            raise ToolArgError("decisions must be a non-empty list of {request_id, decision, reason_code}")
        clean = [self._validate(d) for d in decisions]
        ids = [d["request_id"] for d in clean]
        if len(set(ids)) != len(ids):
            raise ToolArgError("a request appears twice in one call")
        for d in clean:
            self.register[d["request_id"]] = d
        return f"recorded {len(clean)} decisions; {len(self.world.requests) - len(self.register)} requests still pending"

    def tool_approve_request(self, request_id: str, reason_code: str = "within_policy") -> str:
        return self._single(request_id, "approve", reason_code, None)

    def tool_reject_request(self, request_id: str, reason_code: str, comment: str | None = None) -> str:
        return self._single(request_id, "reject", reason_code, comment)

    def tool_escalate_request(self, request_id: str, reason_code: str = "above_approval_limit") -> str:
        return self._single(request_id, "escalate", reason_code, None)

    # ------------------------------------------------------------------ helpers
    def _single(self, request_id: Any, decision: str, reason_code: Any, comment: Any) -> str:
        item = {"request_id": request_id, "decision": decision, "reason_code": reason_code}
        if comment is not None:
            item["comment"] = comment
        d = self._validate(item)
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


_REASON_SCHEMA = {"type": "string", "enum": list(REASONS)}
_REQUEST_ID = {"type": "string", "pattern": "^PR-[0-9]+$"}
TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "read_policy",
        "Read the purchasing policy (rule order, category caps, approval limits, blocked vendors, exchange rates).",
        {"type": "object", "properties": {}, "additionalProperties": False},
        "read_policy",
    ),
    ToolSpec(
        "list_requests",
        "List the pending purchase requests with all their fields, in submission order.",
        {"type": "object", "properties": {}, "additionalProperties": False},
        "list_requests",
    ),
    ToolSpec(
        "read_request",
        "Read one request and its current status.",
        {
            "type": "object",
            "properties": {"request_id": _REQUEST_ID},
            "required": ["request_id"],
            "additionalProperties": False,
        },
        "read_request",
    ),
    ToolSpec(
        "get_department_budget",
        "Department budgets from the budget service; omit department for all of them.",
        {
            "type": "object",
            "properties": {"department": {"type": "string"}},
            "additionalProperties": False,
        },
        "get_department_budget",
    ),
    ToolSpec(
        "decide_requests",
        "Record decisions for one or more requests (a later decision on the same request replaces it).",
        {
            "type": "object",
            "properties": {
                "decisions": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "properties": {
                            "request_id": _REQUEST_ID,
                            "decision": {"type": "string", "enum": list(DECISIONS)},
                            "reason_code": _REASON_SCHEMA,
                            "comment": {"type": "string"},
                        },
                        "required": ["request_id", "decision", "reason_code"],
                        "additionalProperties": False,
                    },
                }
            },
            "required": ["decisions"],
            "additionalProperties": False,
        },
        "decide_requests",
    ),
    ToolSpec(
        "approve_request",
        "Approve one request.",
        {
            "type": "object",
            "properties": {"request_id": _REQUEST_ID, "reason_code": {"type": "string", "enum": ["within_policy"]}},
            "required": ["request_id"],
            "additionalProperties": False,
        },
        "approve_request",
    ),
    ToolSpec(
        "reject_request",
        "Reject one request with a reason code and an optional comment for the requester.",
        {
            "type": "object",
            "properties": {"request_id": _REQUEST_ID, "reason_code": _REASON_SCHEMA, "comment": {"type": "string"}},
            "required": ["request_id", "reason_code"],
            "additionalProperties": False,
        },
        "reject_request",
    ),
    ToolSpec(
        "escalate_request",
        "Escalate one request to the next approval level.",
        {
            "type": "object",
            "properties": {
                "request_id": _REQUEST_ID,
                "reason_code": {"type": "string", "enum": ["above_approval_limit"]},
            },
            "required": ["request_id"],
            "additionalProperties": False,
        },
        "escalate_request",
    ),
)
