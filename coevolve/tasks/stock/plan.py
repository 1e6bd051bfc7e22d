"""The stock solution as a plan of steps, and the rows and emails an agent with some knowledge writes."""

from __future__ import annotations

import math
import re
from typing import Any

from coevolve.tasks.base import Knowledge, PlanStep
from coevolve.tasks.stock.world import COLUMNS, SHEET, StockWorld

FACTS = ("strictly_below", "available_stock", "skip_discontinued", "open_alert_dedup", "case_pack")


def plan(w: StockWorld, knowledge: Knowledge) -> list[PlanStep]:
    """Read the contact and template, the sheet and the products; append the rows; send the emails."""
    rows, emails = solve(w, knowledge)
    return [
        PlanStep("read_files", {"paths": [w.manager_path, w.template_path]}),
        PlanStep("read_sheet", {"sheet": SHEET}),
        PlanStep("list_products", {}),
        PlanStep("append_rows", {"sheet": SHEET, "rows": rows}, facts=FACTS, uses=(1, 2)),
        PlanStep(
            "send_emails",
            {"emails": emails},
            facts=FACTS,
            uses=(0, 1, 2),
            constraint="high_priority" if w.urgent else None,
        ),
        PlanStep("finish", {"summary": f"{len(rows)} stock alerts recorded and emailed"}),
    ]


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
    """(subject, body) of the template with its `{{placeholders}}` filled in."""
    text = re.sub(r"\{\{(\w+)\}\}", lambda m: fill.get(m.group(1), m.group(0)), template)
    first, _, rest = text.partition("\n")
    return first.removeprefix("Subject:").strip(), rest.strip()
