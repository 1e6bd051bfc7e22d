"""Budget world generation: a day's purchase requests, the purchasing policy (category caps, approval
limits by level, quote rule, blocked vendors, exchange rates), each department's posted balance, and
the traps of the instance (a pure function of seed and knobs)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from coevolve.tasks.base import round_money

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
SMALL_DEPARTMENTS = 2  # size 0 (docs/results/real-weights-design.md)
SMALL_REQUESTS = 3  # requests drawn from the base outcomes at size 0 (traps add their own)


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


def usd(w: BudgetWorld, r: Request, convert: bool = True) -> float:
    return round_money(r.amount * w.fx[r.currency]) if convert else r.amount


def build_world(seed: int, params: dict[str, Any]) -> BudgetWorld:
    rng = random.Random(seed)
    size = int(params["size"])
    small = size == 0  # the small-model level: two departments, three requests before the traps' own
    trap_rate = TRAP_RATE.get(int(params["difficulty"]), TRAP_RATE[3])
    company = rng.choice(COMPANIES)
    day = f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    caps = {c: float(round(v * rng.uniform(0.9, 1.1) / 500) * 500) for c, v in CATEGORIES.items()}
    limits = {lv: float(round(v * rng.uniform(0.8, 1.2) / 500) * 500) for lv, v in LEVELS.items()}
    quote_threshold = float(rng.choice((5000, 7500, 10000, 12500)))
    quotes_required = rng.choice((2, 3))
    fx = {"USD": 1.0, "EUR": round(rng.uniform(1.04, 1.14), 3), "GBP": round(rng.uniform(1.2, 1.34), 3)}
    departments = rng.sample(DEPARTMENTS, SMALL_DEPARTMENTS if small else 3 + size)
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
        amount_usd = round_money(rng.uniform(lo, hi))
        if "level" not in d:
            ok = [lv for lv, lim in limits.items() if lim >= amount_usd * 1.02]
            d["level"] = ok[0] if ok and rng.random() < 0.6 else (rng.choice(ok) if ok else "vp")
        cur = d.setdefault("currency", rng.choice(("USD",) * 6 + ("EUR", "GBP")))
        d["amount"] = round_money(amount_usd / fx[cur])
        d["amount_usd"] = round_money(d["amount"] * fx[cur])
        d["quotes"] = quotes_required + rng.randint(0, 1) if amount_usd > quote_threshold * 0.95 else rng.randint(0, 2)

    n_base = SMALL_REQUESTS if small else 8 * size - 2
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
            d["amount_usd"] = round_money(cap * rng.uniform(1.1, 1.6))
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
            d["amount"] = d["amount_usd"] = round_money(rng.uniform(0.55, 0.95) * quote_threshold)
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
        slack = round_money(max([rng.uniform(300, 4000)] + [a + rng.uniform(100, 2000) for a in escalated]))
        if late is not None and late["department"] == dept:
            slack = round_money(rng.uniform(0.2, 0.8) * late["amount_usd"])
            if approved + slack < late["amount_usd"]:  # the late request alone must fit the posted balance
                filler = {"outcome": "within_policy", "department": dept}
                fit(filler, late["amount_usd"] - approved - slack + 100, late["amount_usd"] + 2000)
                filler["vendor"], filler["tax"] = fresh_vendor()
                drafts.insert(0, filler)
                approved += filler["amount_usd"]
        balances[dept] = round_money(approved + slack)
    for d in drafts:
        if d["outcome"] == "insufficient_budget" and "amount" not in d:
            need = balances[d["department"]] + rng.uniform(200, 3000)
            cats = [c for c, cap in caps.items() if cap > need * 1.05]
            if not cats:  # the department is too rich for any category: make it a cap breach instead
                d["outcome"], d["category"], d["level"] = "over_category_cap", rng.choice(list(caps)), "vp"
                d["currency"] = "USD"
                d["amount"] = d["amount_usd"] = round_money(caps[d["category"]] * rng.uniform(1.1, 1.5))
                d["quotes"] = quotes_required
                continue
            d["category"] = rng.choice(cats)
            d["level"], d["currency"] = "vp", "USD"
            d["amount"] = d["amount_usd"] = round_money(rng.uniform(need, min(caps[d["category"]], need * 1.3)))
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

