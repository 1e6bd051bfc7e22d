"""Stock alerting: alert the purchasing manager about every product that needs reordering.

Services: a web shop (products with on-hand and reserved quantities, threshold, par level, case pack,
status), a spreadsheet with the "Stock Alert" sheet (earlier alerts) and a "Suppliers" sheet, a shared
drive with the email template and the purchasing manager's address, and a mailbox. The agent appends
one row per product to alert and sends exactly one templated email per product. The checker reads
the final sheet and the sent mail, never the agent's words.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections import Counter
from dataclasses import dataclass
from datetime import date, timedelta
from functools import lru_cache
from typing import Any

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

SHEET = "Stock Alert"
SUPPLIER_SHEET = "Suppliers"
COLUMNS = ("Date", "SKU", "Product", "Supplier", "Available", "Threshold", "Reorder Qty", "Status")
TRAP_RATE = {1: 0.05, 2: 0.1, 3: 0.25}
MAX_CELL = 500
MAX_BODY = 5000
MAX_BATCH = 500
EMAIL = re.compile(r"^[^@\s<>]+@[^@\s<>]+\.[A-Za-z]{2,}$")

SUPPLIERS = (
    "Northwind Traders",
    "Baltic Supply Co",
    "Kestrel Wholesale",
    "Harbor & Finch",
    "Alder Distribution",
    "Meridian Goods",
    "Pinecrest Imports",
    "Solent Packaging",
)
ADJECTIVES = (
    "Ceramic",
    "Bamboo",
    "Steel",
    "Linen",
    "Cotton",
    "Glass",
    "Oak",
    "Copper",
    "Wool",
    "Recycled",
    "Enamel",
    "Cork",
    "Marble",
    "Canvas",
    "Walnut",
    "Silicone",
)
ITEMS = (
    "Mug",
    "Cutting Board",
    "Water Bottle",
    "Tea Towel",
    "Tote Bag",
    "Jar",
    "Serving Tray",
    "Kettle",
    "Throw",
    "Notebook",
    "Lunch Box",
    "Coaster Set",
    "Planter",
    "Desk Lamp",
    "Candle",
    "Apron",
    "Bowl",
    "Spatula",
)
VARIANTS = (
    "S",
    "M",
    "L",
    "350ml",
    "500ml",
    "1L",
    "Blue",
    "Green",
    "Sand",
    "Charcoal",
    "Set of 2",
    "Set of 4",
)
FIRST = ("Dana", "Priya", "Marek", "Ines", "Tomasz", "Aiko", "Lena", "Samuel", "Noor", "Felix")
LAST = ("Whitfield", "Okafor", "Lindqvist", "Moreau", "Castellano", "Brandt", "Haddad", "Novak", "Sato")
SHOPS = ("Hearth & Home", "Loft Living", "Kitchen Corner", "Greenleaf Goods", "Nordic Nest", "Urban Pantry")

TEMPLATES = (
    (
        "Subject: Low stock: {{product}} ({{sku}})\n\n"
        "Hi {{manager_name}},\n\n"
        "{{product}} (SKU {{sku}}) is down to {{available}} available units, under its threshold of {{threshold}}.\n"
        "Please order {{reorder_qty}} units from {{supplier}}.\n\n"
        "Thanks,\n{{shop}} stock bot\n"
    ),
    (
        "Subject: Reorder {{sku}} - {{product}}\n\n"
        "Dear {{manager_name}},\n"
        "Stock alert for {{product}} [{{sku}}]: available {{available}}, threshold {{threshold}}.\n"
        "Suggested order: {{reorder_qty}} units (supplier: {{supplier}}).\n"
        "Regards,\n{{shop}} inventory\n"
    ),
    (
        "Subject: [{{shop}}] {{sku}} needs reordering\n\n"
        "Hello {{manager_name}},\n\n"
        "Supplier: {{supplier}}\nProduct: {{product}} ({{sku}})\nAvailable: {{available}} (threshold {{threshold}})\n"
        "Order quantity: {{reorder_qty}}\n\n"
        "-- automated stock alert\n"
    ),
)


@dataclass(frozen=True)
class Product:
    sku: str
    name: str
    supplier: str
    status: str  # active | discontinued
    on_hand: int
    reserved: int
    threshold: int
    par: int
    case_pack: int


@dataclass(frozen=True)
class StockWorld:
    shop: str
    domain: str
    today: str
    manager_name: str
    manager_email: str
    manager_path: str
    template_path: str
    template: str
    header: tuple[str, ...]
    existing: tuple[tuple[str, ...], ...]
    suppliers: tuple[tuple[str, str, str], ...]
    products: tuple[Product, ...]
    urgent: bool
    traps: tuple[str, ...]


class StockFamily(TaskFamily):
    name = "stock"
    title = "inventory stock alerting"
    facts = (
        DomainFact(
            "strictly_below",
            "A product needs reordering only when its stock is strictly below the threshold; stock exactly "
            "at the threshold is fine.",
            ("strictly below", "exactly at the threshold", "equal to the threshold"),
            common=True,
        ),
        DomainFact(
            "available_stock",
            "The stock to compare with the threshold (and to report as Available) is on_hand minus "
            "reserved: reserved units are already promised to open orders.",
            ("on_hand minus reserved", "minus reserved", "reserved units"),
        ),
        DomainFact(
            "skip_discontinued",
            "Discontinued products are never reordered: no alert row and no email, however low their stock.",
            ("discontinued products", "never reorder discontinued", "discontinued items"),
        ),
        DomainFact(
            "open_alert_dedup",
            "A product that already has a row with Status 'open' in the Stock Alert sheet has been alerted "
            "and is still being handled: do not add another row or send another email for it.",
            ("status 'open'", "open alert row", "already has an open"),
        ),
        DomainFact(
            "case_pack",
            "Suppliers ship whole cases: the reorder quantity (par level minus available) is rounded up to a "
            "multiple of the product's case_pack.",
            ("case pack", "case_pack", "whole cases"),
        ),
    )
    constraints = (
        Constraint(
            "high_priority",
            "When the task says the restock is urgent, every alert email is sent with priority 'high'.",
            ("priority 'high'", "high priority", "priority flag"),
        ),
    )

    # ------------------------------------------------------------------ generation
    def world(self, seed: int, params: dict[str, Any]) -> StockWorld:
        return _world(seed, json.dumps(params, sort_keys=True))

    def instruction(self, world: StockWorld, instance_id: str) -> str:
        urgent = (
            ' This restock is urgent: send the alert emails with priority "high".' if world.urgent else ""
        )
        return (
            f"{world.shop} web shop, {world.today}: check every product's stock against its threshold. For each "
            f'product that needs reordering, append one row to the "{SHEET}" sheet, filling every column of '
            f"the sheet (Date = {world.today}, Status = open, Reorder Qty = the quantity that brings the "
            "product back to its par level), and send the purchasing manager exactly one email written from "
            f"the template `{world.template_path}` (its first line is the subject; fill every placeholder). "
            f"The purchasing manager's name and address are in `{world.manager_path}`.{urgent} "
            "Then call finish."
        )

    def make_env(self, instance: TaskInstance) -> StockEnv:
        return StockEnv(instance, self.world(instance.seed, instance.params))

    def baseline_tools(self) -> tuple[ToolSpec, ...]:
        return TOOLS

    # ------------------------------------------------------------------ solution
    def plan(self, instance: TaskInstance, knowledge: Knowledge) -> list[PlanStep]:
        w = self.world(instance.seed, instance.params)
        rows, emails = solve(w, knowledge)
        all_facts = tuple(f.id for f in self.facts)
        return [
            PlanStep("read_files", {"paths": [w.manager_path, w.template_path]}),
            PlanStep("read_sheet", {"sheet": SHEET}),
            PlanStep("list_products", {}),
            PlanStep("append_rows", {"sheet": SHEET, "rows": rows}, facts=all_facts, uses=(1, 2)),
            PlanStep(
                "send_emails",
                {"emails": emails},
                facts=all_facts,
                uses=(0, 1, 2),
                constraint="high_priority" if w.urgent else None,
            ),
            PlanStep("finish", {"summary": f"{len(rows)} stock alerts recorded and emailed"}),
        ]

    def check(self, env: TaskEnv) -> Outcome:
        assert isinstance(env, StockEnv)
        w = env.world
        rows, emails = solve(w, self.full_knowledge())
        sheet = env.sheets[SHEET]
        detail: dict[str, Any] = {"traps": list(w.traps)}
        if tuple(sheet[0]) != w.header:
            return Outcome(False, 0.0, {**detail, "reason": "the Stock Alert header was changed"})
        n = len(w.existing)
        if len(sheet) - 1 < n or [tuple(r) for r in sheet[1 : n + 1]] != [tuple(r) for r in w.existing]:
            return Outcome(
                False, 0.0, {**detail, "reason": "existing Stock Alert rows were changed or removed"}
            )
        if env.sheets[SUPPLIER_SHEET] != _supplier_sheet(w):
            return Outcome(False, 0.0, {**detail, "reason": "the Suppliers sheet was changed"})
        want_rows = Counter(tuple(_cell(c) for c in r) for r in rows)
        have_rows = Counter(tuple(_cell(c) for c in r) for r in sheet[n + 1 :])
        want_mail = Counter(_mail_key(e) for e in emails)
        have_mail = Counter(_mail_key(e) for e in env.sent)
        row_f1 = _f1(want_rows, have_rows)
        mail_f1 = _f1(want_mail, have_mail)
        exact = want_rows == have_rows and want_mail == have_mail
        return Outcome(
            exact,
            1.0 if exact else round((row_f1 + mail_f1) / 2, 4),
            {
                **detail,
                "missing_rows": [list(r) for r in (want_rows - have_rows)],
                "extra_rows": [list(r) for r in (have_rows - want_rows)],
                "missing_emails": [list(m[:2]) for m in (want_mail - have_mail)],
                "extra_emails": [list(m[:2]) for m in (have_mail - want_mail)],
            },
        )


# ---------------------------------------------------------------------------------- ground truth
def solve(w: StockWorld, k: Knowledge) -> tuple[list[list[Any]], list[dict[str, Any]]]:
    """The rows and emails an agent with knowledge `k` writes. Full knowledge gives the ground truth."""
    facts = k.facts
    products = w.products
    if 2 in k.cut:  # the product list was not fully visible: only its first half was read
        products = products[: max(1, len(products) // 2)]
    header = w.header if 1 not in k.cut else COLUMNS
    open_skus = set()
    if "open_alert_dedup" in facts and 1 not in k.cut:
        sku_col, status_col = w.header.index("SKU"), w.header.index("Status")
        open_skus = {r[sku_col] for r in w.existing if r[status_col] == "open"}
    rows: list[list[Any]] = []
    emails: list[dict[str, Any]] = []
    for p in products:
        avail = p.on_hand - p.reserved if "available_stock" in facts else p.on_hand
        below = avail < p.threshold if "strictly_below" in facts else avail <= p.threshold
        if not below:
            continue
        if p.status == "discontinued" and "skip_discontinued" in facts:
            continue
        if p.sku in open_skus:
            continue
        qty = max(0, p.par - avail)
        if "case_pack" in facts:
            qty = math.ceil(qty / p.case_pack) * p.case_pack
        values = {
            "Date": w.today,
            "SKU": p.sku,
            "Product": p.name,
            "Supplier": p.supplier,
            "Available": avail,
            "Threshold": p.threshold,
            "Reorder Qty": qty,
            "Status": "open",
        }
        rows.append([values[c] for c in header])
        if 0 in k.cut:  # neither template nor address seen: a generic guess
            email = {
                "to": f"purchasing@{w.domain}",
                "subject": f"Low stock alert: {p.sku}",
                "body": f"{p.name} ({p.sku}) is below its threshold. Please reorder {qty} units.",
            }
        else:
            fill = {
                "manager_name": w.manager_name,
                "product": p.name,
                "sku": p.sku,
                "available": str(avail),
                "threshold": str(p.threshold),
                "reorder_qty": str(qty),
                "supplier": p.supplier,
                "shop": w.shop,
            }
            subject, body = render_template(w.template, fill)
            email = {"to": w.manager_email, "subject": subject, "body": body}
        if w.urgent and "high_priority" in k.constraints:
            email["priority"] = "high"
        emails.append(email)
    return rows, emails


def render_template(template: str, fill: dict[str, str]) -> tuple[str, str]:
    text = re.sub(r"\{\{(\w+)\}\}", lambda m: fill.get(m.group(1), m.group(0)), template)
    first, _, rest = text.partition("\n")
    return first.removeprefix("Subject:").strip(), rest.strip()


def _cell(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    s = str(v).strip()
    if re.fullmatch(r"-?\d+\.0+", s):
        return s.split(".")[0]
    return s


def _norm_ws(s: Any) -> str:
    return " ".join(str(s).split())


def _mail_key(e: dict[str, Any]) -> tuple[str, str, str, str]:
    return (
        str(e.get("to", "")).strip().lower(),
        _norm_ws(e.get("subject", "")),
        _norm_ws(e.get("body", "")),
        str(e.get("priority") or "normal"),
    )


def _f1(want: Counter, have: Counter) -> float:
    tp = sum((want & have).values())
    nw, nh = sum(want.values()), sum(have.values())
    if not nw and not nh:
        return 1.0
    if not tp:
        return 0.0
    p, r = tp / nh, tp / nw
    return 2 * p * r / (p + r)


def _supplier_sheet(w: StockWorld) -> list[list[str]]:
    return [["Supplier", "Contact", "Email"], *[list(s) for s in w.suppliers]]


@lru_cache(maxsize=512)
def _world(seed: int, params_json: str) -> StockWorld:
    params = json.loads(params_json)
    rng = random.Random(seed)
    difficulty = int(params["difficulty"])
    size = int(params["size"])
    trap_rate = TRAP_RATE.get(difficulty, 0.3)
    shop = rng.choice(SHOPS)
    domain = re.sub(r"[^a-z]", "", shop.lower()) + ".example"
    today = f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    first, last = rng.choice(FIRST), rng.choice(LAST)
    manager_name = f"{first} {last}"
    manager_email = f"{first.lower()}.{last.lower()}@{domain}"
    manager_path = rng.choice(("config/purchasing_manager.txt", "contacts/purchasing.txt", "admin/buyer.txt"))
    template_path = rng.choice(
        ("templates/low_stock.txt", "templates/stock_alert.eml", "mail/reorder_template.txt")
    )
    template = rng.choice(TEMPLATES)
    header = list(COLUMNS)
    while tuple(header) == COLUMNS:
        rng.shuffle(header)

    n_products = 24 * size * size
    skus = rng.sample(range(1000, 10000), n_products)
    names: set[str] = set()
    specs: list[dict[str, Any]] = []
    for i in range(n_products):
        while True:
            name = f"{rng.choice(ADJECTIVES)} {rng.choice(ITEMS)} {rng.choice(VARIANTS)}"
            if name not in names:
                names.add(name)
                break
        threshold = rng.randint(5, 40)
        specs.append(
            {
                "sku": f"{rng.choice('ABCDEFGHKLMNPRST')}{rng.choice('ABCDEFGHKLMNPRST')}-{skus[i]}",
                "name": name,
                "supplier": rng.choice(SUPPLIERS),
                "status": "discontinued" if rng.random() < 0.1 else "active",
                "threshold": threshold,
                "case_pack": rng.choice((1, 1, 4, 6, 12)),
                "role": "normal",
            }
        )
    for s in specs:  # normal products: comfortably above threshold, whichever stock one reads
        s["reserved"] = rng.choice((0, 0, 0, rng.randint(1, 6)))
        s["on_hand"] = s["threshold"] + s["reserved"] + rng.randint(2, 60)

    order = list(range(n_products))
    rng.shuffle(order)
    picks = iter(order)
    traps: list[str] = []

    def take(role: str) -> dict[str, Any]:
        s = specs[next(picks)]
        s["role"] = role
        return s

    def set_par(s: dict[str, Any], avail: int, divisible: bool) -> None:
        cp = s["case_pack"]
        if not divisible and cp == 1:
            s["case_pack"] = cp = rng.choice((6, 12, 24))
        low = max(1, s["threshold"] - avail)
        k = rng.randint(math.ceil(low / cp), math.ceil(low / cp) + 2)
        raw = k * cp if divisible else max(1, k * cp - rng.randint(1, cp - 1))
        s["par"] = avail + raw

    alerts = [take("alert") for _ in range(rng.randint(2, 3) * size)]
    for s in alerts:
        s["status"], s["reserved"] = "active", 0
        s["on_hand"] = rng.randint(0, s["threshold"] - 1)
    if rng.random() < trap_rate:  # one alert's order must be rounded up to whole cases
        traps.append("case_pack")
    for i, s in enumerate(alerts):
        set_par(s, s["on_hand"], divisible=not (i == 0 and "case_pack" in traps))
    if rng.random() < trap_rate:  # on hand looks fine, but reserved units push availability below
        traps.append("reserved")
        s = take("alert")
        s["status"] = "active"
        s["on_hand"] = s["threshold"] + rng.randint(1, 8)
        s["reserved"] = s["on_hand"] - rng.randint(0, s["threshold"] - 1)
        set_par(s, s["on_hand"] - s["reserved"], divisible=True)
    if rng.random() < trap_rate:  # exactly at the threshold: no alert
        traps.append("at_threshold")
        s = take("at_threshold")
        s["status"], s["reserved"], s["on_hand"] = "active", 0, s["threshold"]
        s["par"] = s["threshold"] * 2
    if rng.random() < trap_rate:  # discontinued and low: no alert
        traps.append("discontinued")
        s = take("discontinued")
        s["status"], s["reserved"] = "discontinued", 0
        s["on_hand"] = rng.randint(0, s["threshold"] - 1)
        s["par"] = s["threshold"] * 2
    open_rows: list[dict[str, Any]] = []
    if rng.random() < trap_rate:  # low, but already alerted and still open: no new alert
        traps.append("open_alert")
        s = take("open_alert")
        s["status"], s["reserved"] = "active", 0
        s["on_hand"] = rng.randint(0, s["threshold"] - 1)
        set_par(s, s["on_hand"], divisible=True)
        open_rows.append(s)
    for s in specs:
        s.setdefault("par", s["threshold"] * 2 + rng.randint(0, 20))
    urgent = rng.random() < trap_rate
    if urgent:
        traps.append("urgent")

    products = tuple(
        Product(
            sku=s["sku"],
            name=s["name"],
            supplier=s["supplier"],
            status=s["status"],
            on_hand=s["on_hand"],
            reserved=s["reserved"],
            threshold=s["threshold"],
            par=s["par"],
            case_pack=s["case_pack"],
        )
        for s in sorted(specs, key=lambda s: s["sku"])
    )

    # earlier alerts: received (closed) ones for any product, open ones only for products still being
    # handled (above threshold now, or the open_alert trap)
    existing: list[dict[str, Any]] = []
    n_old = 3 + 4 * size * size
    normal = [s for s in specs if s["role"] == "normal"]
    for _ in range(n_old):
        s = rng.choice(specs)
        status = rng.choice(("received", "received", "cancelled"))
        if s["role"] == "normal" and rng.random() < 0.3:
            status = "open"
        existing.append({"spec": s, "status": status})
    for s in open_rows:
        existing.insert(rng.randrange(len(existing) + 1), {"spec": s, "status": "open"})
    if not any(e["status"] == "open" for e in existing) and normal:
        existing.append({"spec": rng.choice(normal), "status": "open"})
    old_rows = []
    for i, e in enumerate(existing):
        s = e["spec"]
        back = (len(existing) - i) * 2 + rng.randint(0, 1)
        avail = rng.randint(0, s["threshold"] - 1)
        qty = math.ceil((s["par"] - avail) / s["case_pack"]) * s["case_pack"]
        values = {
            "Date": (date.fromisoformat(today) - timedelta(days=back)).isoformat(),
            "SKU": s["sku"],
            "Product": s["name"],
            "Supplier": s["supplier"],
            "Available": str(avail),
            "Threshold": str(s["threshold"]),
            "Reorder Qty": str(qty),
            "Status": e["status"],
        }
        old_rows.append(tuple(values[c] for c in header))
    suppliers = tuple(
        (
            sup,
            f"{rng.choice(FIRST)} {rng.choice(LAST)}",
            f"orders@{re.sub(r'[^a-z]', '', sup.lower())}.example",
        )
        for sup in SUPPLIERS
    )
    return StockWorld(
        shop=shop,
        domain=domain,
        today=today,
        manager_name=manager_name,
        manager_email=manager_email,
        manager_path=manager_path,
        template_path=template_path,
        template=template,
        header=tuple(header),
        existing=tuple(old_rows),
        suppliers=suppliers,
        products=products,
        urgent=urgent,
        traps=tuple(traps),
    )


# ---------------------------------------------------------------------------------- environment
class StockEnv(TaskEnv):
    def __init__(self, instance: TaskInstance, world: StockWorld):
        super().__init__(instance)
        self.world = world
        self.sheets: dict[str, list[list[str]]] = {
            SHEET: [list(world.header), *[list(r) for r in world.existing]],
            SUPPLIER_SHEET: _supplier_sheet(world),
        }
        self.files: dict[str, str] = {
            world.manager_path: (
                "# Purchasing contact for stock alerts\n"
                f"Purchasing manager: {world.manager_name} <{world.manager_email}>\n"
            ),
            world.template_path: world.template,
            "README.txt": f"Shared drive of {world.shop}. Templates and contact files live here.\n",
        }
        self.sent: list[dict[str, Any]] = []

    def tool_specs(self) -> tuple[ToolSpec, ...]:
        return (*TOOLS, FINISH_TOOL)

    # files
    def tool_list_files(self) -> str:
        return "\n".join(sorted(self.files))

    def tool_read_files(self, paths: list[str]) -> str:
        if not isinstance(paths, list) or not paths or len(paths) > 20:
            raise ToolArgError("paths must be a list of 1 to 20 file paths")
        out = []
        for p in paths:
            if not isinstance(p, str) or p not in self.files:
                raise ToolArgError(f"no such file: {str(p)[:200]!r} (files: {', '.join(sorted(self.files))})")
            out.append(f"=== {p} ===\n{self.files[p]}")
        return "\n".join(out)

    # spreadsheet
    def _sheet(self, sheet: Any) -> list[list[str]]:
        if not isinstance(sheet, str) or sheet not in self.sheets:
            raise ToolArgError(f"no such sheet: {str(sheet)[:200]!r} (sheets: {', '.join(self.sheets)})")
        return self.sheets[sheet]

    def tool_list_sheets(self) -> str:
        return "\n".join(f"{name} ({len(rows) - 1} rows)" for name, rows in self.sheets.items())

    def tool_read_sheet(self, sheet: str) -> str:
        rows = self._sheet(sheet)
        lines = [f"row | {' | '.join(rows[0])}"]
        lines += [f"{i} | {' | '.join(r)}" for i, r in enumerate(rows[1:], start=2)]
        return "\n".join(lines) + f"\n({len(rows) - 1} data rows; row 1 is the header)"

    def tool_append_rows(self, sheet: str, rows: list[list[Any]]) -> str:
        target = self._sheet(sheet)
        width = len(target[0])
        if not isinstance(rows, list) or len(rows) > MAX_BATCH:
            raise ToolArgError(f"rows must be a list of at most {MAX_BATCH} rows")
        clean = []
        for i, r in enumerate(rows):
            if not isinstance(r, list) or len(r) != width:
                raise ToolArgError(f"row {i} must be a list of {width} cells (the sheet's columns)")
            if not all(isinstance(c, (str, int, float)) and not isinstance(c, bool) for c in r):
                raise ToolArgError(f"row {i}: cells must be strings or numbers")
            if any(len(str(c)) > MAX_CELL for c in r):
                raise ToolArgError(f"row {i}: a cell is longer than {MAX_CELL} characters")
            clean.append([_cell(c) for c in r])
        target.extend(clean)
        return f"appended {len(clean)} rows to {sheet} (now {len(target) - 1} data rows)"

    def tool_update_cell(self, sheet: str, row: int, column: str, value: Any) -> str:
        target = self._sheet(sheet)
        if not isinstance(row, int) or isinstance(row, bool) or not 2 <= row <= len(target):
            raise ToolArgError(f"row must be a data row number 2..{len(target)}")
        if not isinstance(column, str) or column not in target[0]:
            raise ToolArgError(f"unknown column {str(column)[:100]!r} (columns: {', '.join(target[0])})")
        if not isinstance(value, (str, int, float)) or isinstance(value, bool) or len(str(value)) > MAX_CELL:
            raise ToolArgError("value must be a string or a number")
        target[row - 1][target[0].index(column)] = _cell(value)
        return f"{sheet} row {row} {column} = {_cell(value)}"

    # web shop
    def tool_list_products(self) -> str:
        cols = (
            "sku",
            "name",
            "supplier",
            "status",
            "on_hand",
            "reserved",
            "threshold",
            "par_level",
            "case_pack",
        )
        lines = [" | ".join(cols)]
        for p in self.world.products:
            lines.append(
                " | ".join(
                    map(
                        str,
                        (
                            p.sku,
                            p.name,
                            p.supplier,
                            p.status,
                            p.on_hand,
                            p.reserved,
                            p.threshold,
                            p.par,
                            p.case_pack,
                        ),
                    )
                )
            )
        return "\n".join(lines) + f"\n({len(self.world.products)} products)"

    # mailbox
    def tool_send_emails(self, emails: list[dict[str, Any]]) -> str:
        if not isinstance(emails, list) or len(emails) > MAX_BATCH:
            raise ToolArgError(f"emails must be a list of at most {MAX_BATCH} messages")
        clean = []
        for i, e in enumerate(emails):
            if not isinstance(e, dict):
                raise ToolArgError(f"email {i} must be an object with to, subject, body")
            unknown = set(e) - {"to", "subject", "body", "priority"}
            if unknown:
                raise ToolArgError(f"email {i}: unknown fields {sorted(unknown)}")
            to, subject, body = e.get("to"), e.get("subject"), e.get("body")
            if not isinstance(to, str) or not EMAIL.match(to.strip()):
                raise ToolArgError(f"email {i}: 'to' must be one email address")
            if not isinstance(subject, str) or not subject.strip() or len(subject) > MAX_CELL:
                raise ToolArgError(f"email {i}: 'subject' must be a non-empty string")
            if not isinstance(body, str) or not body.strip() or len(body) > MAX_BODY:
                raise ToolArgError(
                    f"email {i}: 'body' must be a non-empty string of at most {MAX_BODY} chars"
                )
            priority = e.get("priority", "normal")
            if priority not in ("normal", "high"):
                raise ToolArgError(f"email {i}: priority must be 'normal' or 'high'")
            clean.append({"to": to.strip(), "subject": subject, "body": body, "priority": priority})
        self.sent.extend(clean)
        return f"sent {len(clean)} emails"

    def tool_list_sent(self) -> str:
        if not self.sent:
            return "(no sent emails)"
        return "\n".join(
            f"{i + 1}. to {e['to']} [{e['priority']}] {e['subject']}" for i, e in enumerate(self.sent)
        )


_EMAIL_ITEM = {
    "type": "object",
    "properties": {
        "to": {"type": "string"},
        "subject": {"type": "string", "minLength": 1},
        "body": {"type": "string", "minLength": 1},
        "priority": {"type": "string", "enum": ["normal", "high"]},
    },
    "required": ["to", "subject", "body"],
    "additionalProperties": False,
}
_NO_ARGS = {"type": "object", "properties": {}, "additionalProperties": False}

TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec("list_files", "List the files on the shop's shared drive.", _NO_ARGS, "list_files"),
    ToolSpec(
        "read_files",
        "Read one or more text files from the shared drive.",
        {
            "type": "object",
            "properties": {
                "paths": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 20}
            },
            "required": ["paths"],
            "additionalProperties": False,
        },
        "read_files",
    ),
    ToolSpec("list_sheets", "List the sheets of the operations spreadsheet.", _NO_ARGS, "list_sheets"),
    ToolSpec(
        "read_sheet",
        "Read a sheet: the header row and every data row with its row number.",
        {
            "type": "object",
            "properties": {"sheet": {"type": "string"}},
            "required": ["sheet"],
            "additionalProperties": False,
        },
        "read_sheet",
    ),
    ToolSpec(
        "append_rows",
        "Append rows at the end of a sheet. Each row is a list of cells in the sheet's column order.",
        {
            "type": "object",
            "properties": {
                "sheet": {"type": "string"},
                "rows": {
                    "type": "array",
                    "items": {"type": "array", "items": {"type": ["string", "number"]}},
                    "maxItems": MAX_BATCH,
                },
            },
            "required": ["sheet", "rows"],
            "additionalProperties": False,
        },
        "append_rows",
    ),
    ToolSpec(
        "update_cell",
        "Overwrite one cell of a sheet (row number as shown by read_sheet, column by header name).",
        {
            "type": "object",
            "properties": {
                "sheet": {"type": "string"},
                "row": {"type": "integer", "minimum": 2},
                "column": {"type": "string"},
                "value": {"type": ["string", "number"]},
            },
            "required": ["sheet", "row", "column", "value"],
            "additionalProperties": False,
        },
        "update_cell",
    ),
    ToolSpec(
        "list_products",
        "List every product of the web shop with its stock fields.",
        _NO_ARGS,
        "list_products",
    ),
    ToolSpec(
        "send_emails",
        "Send one or more emails from the shop mailbox. Each email has to, subject, body and an optional "
        "priority ('normal' by default, or 'high').",
        {
            "type": "object",
            "properties": {"emails": {"type": "array", "items": _EMAIL_ITEM, "maxItems": MAX_BATCH}},
            "required": ["emails"],
            "additionalProperties": False,
        },
        "send_emails",
    ),
    ToolSpec("list_sent", "List the emails sent from the shop mailbox so far.", _NO_ARGS, "list_sent"),
)
