"""Stock world generation: a web shop's products (on hand, reserved, threshold, par level, case pack,
status), the Stock Alert sheet's earlier alerts, the Suppliers sheet, the email template and the
purchasing contact, and the traps of the instance (a pure function of seed and knobs)."""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

SHEET = "Stock Alert"
SUPPLIER_SHEET = "Suppliers"
COLUMNS = ("Date", "SKU", "Product", "Supplier", "Available", "Threshold", "Reorder Qty", "Status")
TRAP_RATE = {1: 0.05, 2: 0.1, 3: 0.25}
# size 0, the small-model level (docs/results/real-weights-design.md): room for the one alert, every
# trap's product and at least one ordinary product; two earlier alerts on the sheet
SMALL_PRODUCTS = 6
SMALL_OLD_ALERTS = 2

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


def supplier_sheet(w: StockWorld) -> list[list[str]]:
    """The Suppliers sheet as the spreadsheet holds it (header row first)."""
    return [["Supplier", "Contact", "Email"], *[list(s) for s in w.suppliers]]


def build_world(seed: int, params: dict[str, Any]) -> StockWorld:
    """The instance's products, sheets, files and traps (unchanged since the single-module family)."""
    rng = random.Random(seed)
    size = int(params["size"])
    small = size == 0  # the small-model level: six products, one alert before the traps' own
    trap_rate = TRAP_RATE.get(int(params["difficulty"]), 0.3)
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

    n_products = SMALL_PRODUCTS if small else 24 * size * size
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

    alerts = [take("alert") for _ in range(1 if small else rng.randint(2, 3) * size)]
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
    n_old = SMALL_OLD_ALERTS if small else 3 + 4 * size * size
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
