"""Website world generation: a small CMS (hierarchical pages, redirects, menus, media) and one change
request per instance (rename a page, fix the crawl's broken links, or reorganise the main menu), with
the traps of the instance. A pure function of seed and knobs."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

TRAP_RATE = {1: 0.15, 2: 0.3, 3: 0.5}
# size 0, the small-model level (docs/results/real-weights-design.md): seven sections with one child
# page each where they have children, no blog posts, a main menu of five items, two old redirects
SMALL_SECTIONS = ("About us", "Services", "Support", "Careers", "Contact", "Partners", "Blog")
SMALL_MENU = 5
SMALL_REDIRECTS = 2
KINDS = (("rename", 0.4), ("links", 0.3), ("menu", 0.3))
SLUG = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
PATH = re.compile(r"^/(?:[a-z0-9]+(?:-[a-z0-9]+)*(?:/[a-z0-9]+(?:-[a-z0-9]+)*)*)?$")
LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")

SECTIONS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    # (title, menu label, children)
    ("About us", "About", ("Our team", "History", "Sustainability", "Press kit")),
    (
        "Services",
        "Services",
        ("Office cleaning", "Window cleaning", "Deep cleaning", "Carpet care", "Facility management"),
    ),
    ("Products", "Products", ("Starter kit", "Pro kit", "Refill packs", "Accessories")),
    ("Pricing", "Pricing", ()),
    ("Support", "Support", ("Frequently asked questions", "Shipping", "Returns", "Warranty")),
    ("Resources", "Resources", ("Guides", "Case studies", "Webinars")),
    ("Careers", "Careers", ("Open positions", "Internships")),
    (
        "Locations",
        "Locations",
        ("Berlin office", "Lisbon office", "Oslo office", "Vienna office", "Dublin office"),
    ),
    ("Partners", "Partners", ()),
    ("Events", "Events", ()),
    ("Contact", "Contact", ()),
    ("Blog", "Blog", ()),
)
POST_VERBS = (
    "How to choose",
    "Five myths about",
    "A guide to",
    "What we learned from",
    "Why we switched to",
    "Getting started with",
    "The cost of",
    "Ten tips for",
    "Behind the scenes of",
    "Rethinking",
    "A year of",
    "Checklist for",
)
POST_TOPICS = (
    "green cleaning",
    "office hygiene",
    "window care",
    "carpet stains",
    "refill packs",
    "facility budgets",
    "spring cleaning",
    "shared kitchens",
    "floor coatings",
    "allergy season",
    "remote offices",
    "air quality",
    "microfibre cloths",
    "waste sorting",
    "night shifts",
    "school buildings",
    "hotel rooms",
    "warehouses",
    "glass facades",
    "hard water",
    "meeting rooms",
    "stairwells",
    "lab cleaning",
    "gym equipment",
    "retail floors",
    "parking garages",
    "kitchen hoods",
    "solar panels",
    "graffiti removal",
    "event venues",
)
NEW_SLUGS = ("overview", "guide", "info", "hub", "details", "explained", "2027", "start")
RENAME_LABELS = {
    "Blog": "News",
    "Support": "Help",
    "Resources": "Learn",
    "Careers": "Jobs",
    "Events": "Meetups",
    "Partners": "Partner network",
    "Pricing": "Plans",
    "Locations": "Offices",
    "Contact": "Get in touch",
    "About": "Company",
    "Products": "Shop",
    "Services": "What we do",
}
SITES = (
    "Brightwork Cleaning",
    "Clearline Facility",
    "Nordlicht Services",
    "Harbour Clean Co",
    "Fresh Desk Ltd",
)
FILLER = (
    "We keep this page up to date with what our customers ask most.",
    "Our teams work across the region, six days a week.",
    "Every plan includes a named contact and a quarterly review.",
    "We use certified products and train every new colleague on site.",
    "Questions? Our support desk answers within one working day.",
)


def slugify(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


@dataclass(frozen=True)
class Page:
    id: int
    title: str
    slug: str
    parent: int | None
    status: str  # published | draft
    updated: str
    body: str
    seo_title: str
    meta_description: str
    canonical: str  # "" = the page's own URL


# (label, target, children)
MenuItem = tuple[str, str, tuple[Any, ...]]


@dataclass(frozen=True)
class SiteWorld:
    site: str
    today: str
    pages: tuple[Page, ...]
    redirects: tuple[tuple[str, str, int], ...]
    menus: tuple[tuple[str, tuple[MenuItem, ...]], ...]
    media: tuple[tuple[str, str], ...]
    kind: str  # rename | links | menu
    rename_id: int
    new_slug: str
    seo_title: str  # "" unless the request asks for a new SEO title
    report: tuple[tuple[str, str, str, str], ...]  # page path, href, link text, problem
    menu_ops: tuple[tuple[str, ...], ...]
    traps: tuple[str, ...]

    def page(self, pid: int) -> Page:
        return next(p for p in self.pages if p.id == pid)

    def path(self, pid: int) -> str:
        return _path({p.id: (p.slug, p.parent) for p in self.pages}, pid)

    def menu(self, name: str) -> tuple[MenuItem, ...]:
        return dict(self.menus)[name]


def _path(tree: dict[int, tuple[str, int | None]], pid: int) -> str:
    parts = []
    cur: int | None = pid
    seen = set()
    while cur is not None and cur in tree and cur not in seen:
        seen.add(cur)
        slug, cur = tree[cur]
        parts.append(slug)
    return "/" + "/".join(reversed(parts))


def _menu_json(items: tuple[MenuItem, ...]) -> list[dict[str, Any]]:
    return [{"label": label, "target": target, "children": _menu_json(kids)} for label, target, kids in items]


def _menu_tuple(items: list[dict[str, Any]]) -> tuple[MenuItem, ...]:
    return tuple((it["label"], it["target"], _menu_tuple(it["children"])) for it in items)


def build_world(seed: int, params: dict[str, Any]) -> SiteWorld:
    rng = random.Random(seed)
    size = int(params["size"])
    small = size == 0
    trap_rate = TRAP_RATE.get(int(params["difficulty"]), 0.4)
    site = rng.choice(SITES)
    today = date(2026, rng.randint(1, 12), rng.randint(1, 28))
    kind = rng.choices([k for k, _ in KINDS], weights=[p for _, p in KINDS])[0]

    # ---- pages
    pages: dict[int, dict[str, Any]] = {}
    labels: dict[int, str] = {}
    next_id = iter(range(1, 10_000))

    def add(title: str, parent: int | None, status: str = "published", slug: str | None = None) -> int:
        pid = next(next_id)
        pages[pid] = {
            "id": pid,
            "title": title,
            "slug": slug or slugify(title),
            "parent": parent,
            "status": status,
            "updated": (today - timedelta(days=rng.randint(20, 400))).isoformat(),
            "body": "",
            "seo_title": f"{title} | {site}",
            "meta_description": f"{title} at {site}. {rng.choice(FILLER)}",
            "canonical": "",
        }
        return pid

    n_children = 1 + size
    sections = [s for s in SECTIONS if s[0] in SMALL_SECTIONS] if small else list(SECTIONS)
    top: dict[str, int] = {}
    for title, label, kids in sections:
        pid = add(title, None)
        top[title] = pid
        labels[pid] = label
        for child in kids[: rng.randint(1, n_children) if kids else 0]:
            add(child, pid)
    posts = [f"{v} {t}" for v in POST_VERBS for t in POST_TOPICS]
    rng.shuffle(posts)
    for title in posts[: min(len(posts) - 60, 10 * size * size)]:
        add(title[0].upper() + title[1:], top["Blog"])
    for title in ("Winter campaign", "New pricing draft", "Team offsite notes")[: 1 + size // 2]:
        add(title, None, status="draft")

    def path(pid: int) -> str:
        return _path({p["id"]: (p["slug"], p["parent"]) for p in pages.values()}, pid)

    published = [pid for pid, p in pages.items() if p["status"] == "published"]

    # ---- menus
    main_sections = [s for s in sections if s[0] not in ("Partners", "Events")]
    rng.shuffle(main_sections)
    main_sections = main_sections[: SMALL_MENU if small else 6 + min(size, 3)]
    with_children = {s[0] for s in rng.sample(main_sections, 2)}
    main: list[dict[str, Any]] = []
    for title, label, _unused in main_sections:
        pid = top[title]
        kids = (
            [
                {"label": pages[c]["title"], "target": path(c), "children": []}
                for c in sorted(c for c, p in pages.items() if p["parent"] == pid)
            ]
            if title in with_children and title != "Blog"
            else []
        )
        main.append({"label": label, "target": path(pid), "children": kids})
    footer = [
        {"label": labels[top[t]], "target": path(top[t]), "children": []}
        for t in ("Contact", "Careers", "Partners")
    ]

    # ---- redirects (history): old paths straight to live pages
    redirects: dict[str, tuple[str, int]] = {}
    used_paths = {path(pid) for pid in pages}

    def fresh_old_path() -> str:
        for attempt in range(10_000):
            cand = (
                "/"
                + rng.choice(("old", "archive", "legacy", "2024", "v1", "en"))
                + "-"
                + slugify(rng.choice(posts[-40:])).split("-", 1)[-1]
            )
            if attempt > 50:
                cand += f"-{attempt}"
            if cand not in used_paths and cand not in redirects:
                used_paths.add(cand)
                return cand
        raise RuntimeError("no fresh path")

    media = {f"/media/{slugify(t)}.jpg": f"{t} photo" for t, _, _ in sections[: 4 + size]}
    traps: list[str] = []
    rename_id, new_slug, seo_title = 0, "", ""
    report: list[tuple[str, str, str, str]] = []
    menu_ops: list[tuple[str, ...]] = []
    reserved: set[int] = set()  # pages whose incoming links are arranged by the change request

    if kind == "rename":
        if rng.random() < trap_rate:
            traps.append("child_pages")
            cands = [
                pid
                for pid in published
                if any(p["parent"] == pid for p in pages.values()) and pid != top["Blog"]
            ]
        else:
            cands = [
                pid
                for pid in published
                if not any(p["parent"] == pid for p in pages.values()) and pages[pid]["parent"] != top["Blog"]
            ]
        rename_id = rng.choice(cands)
        page = pages[rename_id]
        while True:
            new_slug = page["slug"].split("-")[0] + "-" + rng.choice(NEW_SLUGS)
            new_path = path(rename_id).rsplit("/", 1)[0] + "/" + new_slug
            if new_path not in used_paths:
                used_paths.add(new_path)
                break
        if rng.random() < trap_rate:
            traps.append("stale_canonical")  # labels avoid CMS field names a report uses
            page["canonical"] = path(rename_id)
        if rng.random() < trap_rate:
            traps.append("redirect_chain")
            redirects[fresh_old_path()] = (path(rename_id), 301)
        if rng.random() < trap_rate:
            traps.append("new_seo_title")
            seo_title = f"{page['title']} - {rng.choice(('updated', 'our offer', 'all you need'))} | {site}"
        reserved = {rename_id, *[pid for pid in pages if pages[pid]["parent"] == rename_id]}

    # historic redirects to live pages (never to the renamed page or its children)
    targets = [pid for pid in published if pid not in reserved]
    for _ in range(SMALL_REDIRECTS if small else 3 + 12 * size * size):
        redirects[fresh_old_path()] = (path(rng.choice(targets)), 301)

    # ---- bodies: a few valid links each
    def body_for(pid: int, extra: list[str]) -> str:
        title = pages[pid]["title"]
        links = [
            f"[{pages[t]['title']}]({path(t)})" for t in rng.sample([t for t in published if t != pid], 2)
        ]
        lines = [f"# {title}", rng.choice(FILLER), f"See also {links[0]} and {links[1]}."]
        if media and rng.random() < 0.4:
            f = rng.choice(sorted(media))
            lines.append(f"![{media[f]}]({f})")
        lines += extra
        lines.append(rng.choice(FILLER))
        return "\n\n".join(lines)

    extra: dict[int, list[str]] = {pid: [] for pid in pages}
    if kind == "rename":
        linked = [rename_id, *_kids(pages, rename_id)]
        for target in linked:
            for src in rng.sample([p for p in published if p not in reserved], rng.randint(1, 2)):
                extra[src].append(f"Read more on [{pages[target]['title']}]({path(target)}).")
    if kind == "links":
        n = rng.randint(2, 3) + size - 1
        chain = rng.random() < trap_rate
        draft = rng.random() < trap_rate
        kinds = ["moved"] * (1 if chain else 0) + ["typo"] * (1 if draft else 0)
        kinds += [rng.choice(("moved", "typo")) for _ in range(max(0, n - len(kinds)))]
        rng.shuffle(kinds)
        used_targets: set[int] = set()
        chain_done = draft_done = False
        for k in kinds:
            target = rng.choice([p for p in published if p not in used_targets])
            used_targets.add(target)
            src = rng.choice([p for p in published if p != target])
            tp = path(target)
            title = pages[target]["title"]
            if k == "typo":
                while True:
                    i = rng.randrange(tp.rfind("/") + 1, len(tp) - 1)
                    bad = (
                        tp[:i] + tp[i + 1 :]
                        if rng.random() < 0.5
                        else tp[:i] + tp[i + 1] + tp[i] + tp[i + 2 :]
                    )
                    if bad not in used_paths and PATH.match(bad) and bad != tp:
                        used_paths.add(bad)
                        break
                if draft and not draft_done:
                    draft_done = True
                    traps.append("draft_duplicate")
                    did = add(
                        title, pages[target]["parent"], status="draft", slug=pages[target]["slug"] + "-new"
                    )
                    pages[did]["updated"] = (today - timedelta(days=rng.randint(1, 10))).isoformat()
                    extra[did] = []
                report.append((path(src), bad, title, "404 not found"))
                extra[src].append(f"Details: [{title}]({bad}).")
            else:
                x = fresh_old_path()
                if chain and not chain_done:
                    chain_done = True
                    traps.append("redirect_chain")
                    mid = fresh_old_path()
                    redirects[x] = (mid, 301)
                    redirects[mid] = (tp, 301)
                    first = mid
                else:
                    redirects[x] = (tp, 301)
                    first = tp
                report.append((path(src), x, title, f"301 redirect -> {first}"))
                extra[src].append(f"Details: [{title}]({x}).")
    if kind == "menu":
        menu_ops = _menu_ops(rng, main, pages, labels, top, path, trap_rate, traps, today, extra)
        if rng.random() < trap_rate:
            traps.append("redirected_item")
            touched = {op[1] for op in menu_ops} | {op[2] for op in menu_ops if len(op) > 2}
            free = [it for it in main if it["label"] not in touched and not it["children"]]
            if free:
                it = rng.choice(free)
                x = fresh_old_path()
                redirects[x] = (it["target"], 301)
                it["target"] = x
            else:
                traps.remove("redirected_item")
    for pid, page_dict in pages.items():
        page_dict["body"] = body_for(pid, extra.get(pid, []))

    page_objs = tuple(Page(**p) for p in sorted(pages.values(), key=lambda p: p["id"]))
    return SiteWorld(
        site=site,
        today=today.isoformat(),
        pages=page_objs,
        redirects=tuple((f, t, c) for f, (t, c) in sorted(redirects.items())),
        menus=(("main", _menu_tuple(main)), ("footer", _menu_tuple(footer))),
        media=tuple(sorted(media.items())),
        kind=kind,
        rename_id=rename_id,
        new_slug=new_slug,
        seo_title=seo_title,
        report=tuple(report),
        menu_ops=tuple(menu_ops),
        traps=tuple(traps),
    )


def _kids(pages: dict[int, dict[str, Any]], pid: int) -> list[int]:
    return sorted(c for c, p in pages.items() if p["parent"] == pid)


def _menu_ops(
    rng: random.Random,
    main: list[dict[str, Any]],
    pages: dict[int, dict[str, Any]],
    labels: dict[int, str],
    top: dict[str, int],
    path: Any,
    trap_rate: float,
    traps: list[str],
    today: date,
    extra: dict[int, list[str]],
) -> list[tuple[str, ...]]:
    in_menu = {it["target"] for it in main} | {ch["target"] for it in main for ch in it["children"]}
    leaves = [it["label"] for it in main if not it["children"]]
    parents = [it["label"] for it in main]
    ops: list[tuple[str, ...]] = []
    used: set[str] = set()
    draft = rng.random() < trap_rate
    kinds = ["add_under"] if draft else []
    pool = ["rename", "move_under", "remove", "add_under", "move_last"]
    rng.shuffle(pool)
    kinds += [k for k in pool if k not in kinds][: rng.randint(2, 3) - len(kinds)]
    for k in kinds:
        if k == "rename":
            cands = [label for label in parents if label not in used and label in RENAME_LABELS]
            if cands:
                label = rng.choice(cands)
                used.add(label)
                ops.append(("rename", label, RENAME_LABELS[label]))
        elif k == "move_under":
            cands = [label for label in leaves if label not in used]
            if len(cands) >= 1:
                label = rng.choice(cands)
                used.add(label)
                parent = rng.choice([p for p in parents if p not in used])
                used.add(parent)
                ops.append(("move_under", label, parent))
        elif k == "remove":
            cands = [label for label in leaves if label not in used]
            if cands:
                label = rng.choice(cands)
                used.add(label)
                ops.append(("remove", label))
        elif k == "add_under":
            cands = [
                pid
                for pid, p in pages.items()
                if p["status"] == "published"
                and path(pid) not in in_menu
                and p["parent"] is not None
                and p["parent"] != top["Blog"]
            ]
            parent = rng.choice([p for p in parents if p not in used])
            used.add(parent)
            pid = rng.choice(cands)
            title = pages[pid]["title"]
            if draft:
                draft = False
                traps.append("draft_duplicate")
                did = max(pages) + 1
                pages[did] = {
                    **pages[pid],
                    "id": did,
                    "slug": pages[pid]["slug"] + "-new",
                    "status": "draft",
                    "updated": (today - timedelta(days=rng.randint(1, 10))).isoformat(),
                }
                extra[did] = []
            ops.append(("add_under", title, parent))
        else:
            cands = [it["label"] for it in main[:-1] if it["label"] not in used]
            if cands:
                label = rng.choice(cands)
                used.add(label)
                ops.append(("move_last", label))
    return ops
