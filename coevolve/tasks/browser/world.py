"""The browser family's hidden world: a shop admin (customers, orders) and a forum, plus one task.

`build_world(seed, params)` is a pure function of its arguments (the family base class caches it).
Money is in cents.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

TRAP_RATE = {1: 0.15, 2: 0.3, 3: 0.5}
KIND_WEIGHTS = {"status": 4, "answer": 3, "forum": 3}
# size 0, the small-model level (docs/results/real-weights-design.md): four customers, six one-item
# orders, three forums of one post each; order numbers run at most three ahead of entity ids
SMALL_CUSTOMERS = 4
SMALL_ORDERS = 6
SMALL_FORUMS = 3

STATUSES: dict[str, str] = {
    "pending": "Pending",
    "processing": "Processing",
    "holded": "On Hold",
    "complete": "Complete",
    "canceled": "Canceled",
    "closed": "Closed",
}

FIRST = (
    "Alice", "Bruno", "Chen", "Dana", "Emeka", "Fatima", "Gustav", "Hana", "Ivan", "Julia", "Kofi", "Lena",
    "Mateo", "Nora", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tara", "Umar", "Vera", "Wei", "Yara",
)
LAST = (
    "Adams", "Becker", "Costa", "Dubois", "Eriksen", "Fischer", "Garcia", "Haddad", "Ito", "Jensen",
    "Kowalski", "Larsen", "Moreau", "Nakamura", "Okafor", "Petrov", "Quintero", "Rossi", "Silva", "Tanaka",
    "Ueda", "Varga", "Weber", "Young",
)
MAIL_DOMAINS = ("example.com", "mail.test", "inbox.test", "post.example")
PRODUCTS = (
    ("WB-750", "Water bottle 750 ml", 1899), ("TS-CTN", "Cotton t-shirt", 2450), ("YM-PRO", "Yoga mat pro", 5900),
    ("HB-STL", "Steel hiking bottle", 3299), ("BP-24L", "Backpack 24 l", 8900), ("RS-TRL", "Trail running shoes", 12950),
    ("SK-WOL", "Wool socks (3 pairs)", 1999), ("HL-200", "Head lamp 200 lm", 3450), ("TN-2P", "Tent for two", 21900),
    ("SB-DWN", "Down sleeping bag", 18900), ("CP-TIT", "Titanium camping pot", 4599), ("GL-WRM", "Winter gloves", 2799),
    ("JK-RN", "Rain jacket", 9900), ("CB-FLD", "Folding chair", 4250), ("MG-ENM", "Enamel mug", 1299),
    ("PL-INF", "Inflatable pillow", 2199), ("KN-MLT", "Multi-tool knife", 5499), ("SN-GLS", "Sunglasses", 7900),
)
FORUMS = (
    ("Home Improvement", "DIY projects, repairs and renovations."),
    ("Gardening", "Vegetables, flowers and everything in between."),
    ("Trail Running", "Routes, shoes and race reports."),
    ("Camping Gear", "Tents, stoves, sleeping bags and reviews."),
    ("Board Games", "Strategy, party games and house rules."),
    ("Home Cooking", "Recipes and kitchen techniques."),
    ("Bike Repair", "Fixing, tuning and upgrading bicycles."),
    ("Photography", "Cameras, lenses and critique."),
    ("Personal Finance", "Budgets, savings and taxes."),
    ("Language Learning", "Study methods and practice partners."),
    ("Birdwatching", "Sightings, binoculars and field guides."),
    ("Woodworking", "Joinery, tools and finishes."),
    ("Rock Climbing", "Gyms, crags and technique."),
    ("Coffee Brewing", "Beans, grinders and brew methods."),
    ("Aquariums", "Fish, plants and water chemistry."),
    ("Urban Sketching", "Drawing on location."),
)
POST_TOPICS = (
    ("Looking for advice on {x}", ("Has anyone here dealt with {x}? I tried two approaches and neither held up. "
     "Budget is about ${n}.")),
    ("My experience with {x} after {n} weeks", ("Short version: it works, but plan for more time than you think. "
     "Happy to answer questions about {x}.")),
    ("Beginner question about {x}", ("I am new to this and keep reading conflicting advice about {x}. "
     "What would you do with {n} hours and basic tools?")),
    ("Weekly thread: {x}", "Post your progress on {x} here. This week's goal: {n} minutes a day."),
)
TOPIC_WORDS = (
    "a squeaky staircase", "tomato blight", "a first 50k", "condensation in the tent", "teaching a new game",
    "sourdough starters", "a slipping chain", "low-light portraits", "an emergency fund", "keeping a streak",
    "spotting warblers", "hand-cut dovetails", "finger injuries", "a cheap burr grinder", "cloudy water",
    "quick perspective",
)


@dataclass(frozen=True)
class Customer:
    id: int
    name: str
    email: str


@dataclass(frozen=True)
class Order:
    eid: int  # entity id: what admin URLs use
    number: str  # the order number customers and tasks quote
    customer_id: int
    placed: str  # "YYYY-MM-DD HH:MM"
    items: tuple[tuple[str, str, int, int], ...]  # sku, product, qty, unit price (cents)
    shipping: int
    status: str
    history: tuple[tuple[str, str, str, bool], ...]  # (when, status, comment, customer notified)

    @property
    def total(self) -> int:
        return sum(q * p for _, _, q, p in self.items) + self.shipping


@dataclass(frozen=True)
class Forum:
    slug: str
    name: str
    description: str


@dataclass(frozen=True)
class Post:
    id: int
    forum: str
    title: str
    body: str
    author: str
    published: bool


@dataclass(frozen=True)
class BrowserWorld:
    kind: str  # status | answer | forum
    customers: tuple[Customer, ...]
    orders: tuple[Order, ...]
    forums: tuple[Forum, ...]
    posts: tuple[Post, ...]
    drafts: bool  # the forum editor has Save (draft) before Publish
    traps: tuple[str, ...]
    # status task
    target_eid: int = 0
    target_number: str = ""
    new_status: str = ""
    refund: bool = False
    comment: str = ""
    notify: bool = False
    # answer task
    customer_id: int = 0
    impostor_id: int = 0
    # forum task
    forum_slug: str = ""
    title: str = ""
    body: str = ""

    def order(self, eid: int) -> Order | None:
        return next((o for o in self.orders if o.eid == eid), None)

    def customer(self, cid: int) -> Customer | None:
        return next((c for c in self.customers if c.id == cid), None)

    def forum(self, slug: str) -> Forum | None:
        return next((f for f in self.forums if f.slug == slug), None)

    def last_order(self, cid: int) -> Order:
        return max((o for o in self.orders if o.customer_id == cid), key=lambda o: o.placed)


def money(cents: int) -> str:
    return f"${cents / 100:,.2f}"


def slugify(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _pick_names(rng: random.Random, n: int) -> list[str]:
    pool = [f"{f} {la}" for f in FIRST for la in LAST]
    rng.shuffle(pool)
    out = pool[:n]
    k = 2
    while len(out) < n:  # very large sizes: distinct names with an initial
        out += [f"{p.split()[0]} {chr(64 + k)}. {p.split()[1]}" for p in pool[: n - len(out)]]
        k += 1
    return out


def _items(rng: random.Random, size: int) -> tuple[tuple[str, str, int, int], ...]:
    chosen = rng.sample(PRODUCTS, min(len(PRODUCTS), rng.randint(1, 1 + size)))
    return tuple((sku, name, rng.randint(1, 3), price) for sku, name, price in chosen)


def build_world(seed: int, params: dict[str, Any]) -> BrowserWorld:
    rng = random.Random(seed)
    small = int(params["size"]) == 0
    size = max(1, int(params["size"]))
    rate = TRAP_RATE.get(int(params["difficulty"]), 0.5)
    kind = rng.choices(list(KIND_WEIGHTS), weights=list(KIND_WEIGHTS.values()))[0]
    traps: list[str] = []

    # ---------------------------------------------------------------- customers
    n_customers = SMALL_CUSTOMERS if small else 6 + 6 * size
    names = _pick_names(rng, n_customers)
    dup = kind == "answer" and rng.random() < rate
    if dup:  # two customers share a name; the other one comes first in the grid
        traps.append("dup_name")
    customers: list[Customer] = []
    for i, name in enumerate(names):
        local = name.lower().replace(" ", ".").replace("..", ".")
        customers.append(Customer(i + 1, name, f"{local}@{rng.choice(MAIL_DOMAINS)}"))
    target_c = rng.randrange(2 if dup else 1, n_customers) + 1
    impostor = 0
    if dup:
        impostor = rng.randrange(1, target_c)
        tc = customers[target_c - 1]
        other_local = tc.name.lower().replace(" ", "_") + str(rng.randint(70, 99))
        customers[impostor - 1] = Customer(impostor, tc.name, f"{other_local}@{rng.choice(MAIL_DOMAINS)}")

    # ---------------------------------------------------------------- orders
    n_orders = SMALL_ORDERS if small else 10 + 14 * size
    base = rng.randint(100, 400)
    offset = rng.randint(2, 3 if small else 6) if rng.random() < rate else 0  # order numbers run ahead of entity ids
    owners = [rng.randint(1, n_customers) for _ in range(n_orders)]
    # the answer task's customer (and the impostor) have at least two orders
    slots = rng.sample(range(n_orders), 4)
    for s, cid in zip(slots, (target_c, target_c, impostor or target_c, impostor or target_c), strict=True):
        owners[s] = cid
    when = datetime(2026, 1, 5, 9, 0) + timedelta(minutes=rng.randint(0, 3000))
    orders: list[Order] = []
    for i in range(n_orders):
        when += timedelta(minutes=rng.randint(40, 2600))
        eid = base + i
        status = rng.choices(list(STATUSES), weights=(2, 3, 1, 5, 1, 1))[0]
        placed = when.strftime("%Y-%m-%d %H:%M")
        orders.append(
            Order(
                eid=eid,
                number=f"{eid + offset:09d}",
                customer_id=owners[i],
                placed=placed,
                items=_items(rng, 0 if small else size),
                shipping=rng.choice((0, 499, 999)),
                status=status,
                history=((placed, status if status in ("pending", "processing") else "pending", "Order placed.", False),),
            )
        )

    def last_of(cid: int) -> int:
        return max((j for j, o in enumerate(orders) if o.customer_id == cid), key=lambda j: orders[j].placed)

    if dup:  # the impostor's last order must not have the same total
        j = last_of(impostor)
        while orders[j].total == orders[last_of(target_c)].total:
            orders[j] = replace(orders[j], shipping=orders[j].shipping + 100)

    fields: dict[str, Any] = {}
    if kind == "status":
        if offset:
            traps.append("id_offset")
        last_eid = base + n_orders - 1
        candidates = [o for o in orders if o.eid + offset <= last_eid and o.status not in ("canceled", "closed")]
        candidates = candidates or [o for o in orders if o.eid + offset <= last_eid]  # its status is reset below
        target = rng.choice(candidates)
        j = orders.index(target)
        orders[j] = target = replace(target, status=rng.choice(("pending", "processing")))
        refund = rng.random() < rate
        notify = rng.random() < rate
        if refund:
            traps.append("refund")
            new_status = "closed"
            comment = f"Refund RMA-{rng.randint(1000, 9999)} issued to the original payment method."
        else:
            new_status = rng.choice(("holded", "complete", "canceled"))
            comment = {
                "holded": f"Customer asked us to hold shipment until {rng.randint(2, 28)} March.",
                "complete": f"Delivered, tracking 1Z{rng.randint(10**9, 10**10 - 1)} confirmed.",
                "canceled": f"No payment received after reminder #{rng.randint(2, 4)}.",
            }[new_status]
        if notify:
            traps.append("notify")
        fields = {
            "target_eid": target.eid, "target_number": target.number, "new_status": new_status, "refund": refund,
            "comment": comment, "notify": notify,
        }
    elif kind == "answer":
        fields = {"customer_id": target_c, "impostor_id": impostor}

    # ---------------------------------------------------------------- forum
    n_forums = SMALL_FORUMS if small else 4 + 4 * size
    pool = list(FORUMS)
    rng.shuffle(pool)
    forum_defs = [pool[i % len(pool)] for i in range(n_forums)]
    forums = []
    for i, (name, desc) in enumerate(forum_defs):
        if i >= len(pool):
            name = f"{name} {i // len(pool) + 1}"
        forums.append(Forum(slugify(name), name, desc))
    posts: list[Post] = []
    for f in forums:
        for _ in range(1 if small else 2 + size):
            t, b = rng.choice(POST_TOPICS)
            x, n = rng.choice(TOPIC_WORDS), rng.randint(2, 40)
            author = rng.choice(names).split()[0].lower() + str(rng.randint(1, 99))
            posts.append(Post(len(posts) + 1, f.slug, t.format(x=x, n=n), b.format(x=x, n=n), author, True))
    drafts = rng.random() < rate
    if kind == "forum":
        if drafts:
            traps.append("drafts")
        f = rng.choice(forums)
        t, b = rng.choice(POST_TOPICS)
        x, n = rng.choice(TOPIC_WORDS), rng.randint(2, 40)
        fields = {"forum_slug": f.slug, "title": t.format(x=x, n=n), "body": b.format(x=x, n=n)}

    return BrowserWorld(
        kind=kind,
        customers=tuple(customers),
        orders=tuple(orders),
        forums=tuple(forums),
        posts=tuple(posts),
        drafts=drafts,
        traps=tuple(traps),
        **fields,
    )
