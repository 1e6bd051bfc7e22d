"""Website management: change requests against a small CMS behind admin tools.

Services: a CMS with pages (hierarchical slugs, status, body with markdown links, SEO metadata),
redirects, menus (main and footer), a media library, and the report of the last link crawl. Each
instance is one change request: rename a page (with redirects), fix the broken links listed in the
crawl report, or reorganise the main menu. The checker compares the final CMS state with the state
the reference plan produces (pages, redirects, menus), and lists any broken internal link left.
"""

from __future__ import annotations

import json
import random
import re
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

TRAP_RATE = {1: 0.15, 2: 0.3, 3: 0.5}
KINDS = (("rename", 0.4), ("links", 0.3), ("menu", 0.3))
MAX_TEXT = 20_000
MAX_ITEMS = 200
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


class WebsiteFamily(TaskFamily):
    name = "website"
    title = "website management"
    facts = (
        DomainFact(
            "permanent_301",
            "A page that has moved for good gets a 301 (permanent) redirect; 302 is only for temporary moves.",
            ("301 (permanent)", "permanent redirect", "302 is only for temporary"),
            common=True,
        ),
        DomainFact(
            "resolve_redirects",
            "A link or menu item that only reaches its page through a redirect counts as broken: point it "
            "straight at the final live page, following redirect chains (A -> B -> C) to the end, and when a "
            "page moves, re-point existing redirects to it so that no redirect chain is created.",
            ("through a redirect", "redirect chain", "final live page"),
        ),
        DomainFact(
            "child_pages",
            "Page URLs are hierarchical: renaming a page also moves every child page (/parent/child), so each "
            "child's old URL needs its own 301 and the links to it must be updated too.",
            ("child page", "urls are hierarchical", "/parent/child"),
        ),
        DomainFact(
            "seo_canonical",
            "A rename does not touch the SEO canonical URL: when a page's canonical URL is set to its old "
            "address, change it to the new one.",
            ("canonical url", "canonical field"),
        ),
        DomainFact(
            "no_drafts",
            "Draft pages are not public: never link or add a menu item to a draft page, even when its title "
            "matches; use the published page with that title.",
            ("draft pages are not public", "never link", "to a draft"),
        ),
    )
    constraints = (
        Constraint(
            "seo_title",
            "When the request gives a new SEO title, the renamed page's seo_title is set to exactly that text.",
            ("every field the task asks", "new seo title", "seo title the task"),
        ),
    )

    # ------------------------------------------------------------------ generation
    def world(self, seed: int, params: dict[str, Any]) -> SiteWorld:
        return _world(seed, json.dumps(params, sort_keys=True))

    def instruction(self, world: SiteWorld, instance_id: str) -> str:
        w = world
        if w.kind == "rename":
            page = w.page(w.rename_id)
            old = w.path(page.id)
            new = old.rsplit("/", 1)[0] + "/" + w.new_slug
            seo = f' Also set its SEO title to "{w.seo_title}".' if w.seo_title else ""
            return (
                f'{w.site} website, change request: rename the page "{page.title}" (now at `{old}`) so that its '
                f"slug becomes `{w.new_slug}` and its URL `{new}`. Keep the old address working with a redirect, "
                f"and update every internal link and menu item that pointed at the old address.{seo} When you are "
                "done, no internal link on the site may be broken. Then call finish."
            )
        if w.kind == "links":
            return (
                f"{w.site} website, change request: the last link crawl found broken internal links (see the link "
                "report). Fix every reported link, wherever it appears, so that it leads to the page it was meant "
                "for (the link text names that page). Change nothing else. Then call finish."
            )
        ops = "\n".join(f"{i + 1}. {_op_text(op)}" for i, op in enumerate(w.menu_ops))
        return (
            f"{w.site} website, change request: reorganise the main menu.\n{ops}\n"
            "Keep every other item and its position as it is, and make sure no link in the main menu is broken "
            "afterwards. Then call finish."
        )

    def make_env(self, instance: TaskInstance) -> WebsiteEnv:
        return WebsiteEnv(instance, self.world(instance.seed, instance.params))

    def baseline_tools(self) -> tuple[ToolSpec, ...]:
        return TOOLS

    # ------------------------------------------------------------------ solution
    def plan(self, instance: TaskInstance, knowledge: Knowledge) -> list[PlanStep]:
        w = self.world(instance.seed, instance.params)
        all_facts = tuple(f.id for f in self.facts)
        if w.kind == "rename":
            fields, redirects, changes = solve_rename(w, knowledge)
            old = w.path(w.rename_id)
            return [
                PlanStep("get_page", {"path": old}),
                PlanStep("list_pages", {}),
                PlanStep("list_redirects", {}),
                PlanStep(
                    "update_page",
                    fields,
                    facts=all_facts,
                    uses=(0,),
                    constraint="seo_title" if w.seo_title else None,
                ),
                PlanStep("save_redirects", {"redirects": redirects}, facts=all_facts, uses=(0, 2)),
                PlanStep("replace_links", {"changes": changes}, facts=all_facts, uses=(0,)),
                PlanStep("finish", {"summary": f"renamed {old}"}),
            ]
        if w.kind == "links":
            return [
                PlanStep("read_link_report", {}),
                PlanStep("list_pages", {}),
                PlanStep("list_redirects", {}),
                PlanStep(
                    "replace_links", {"changes": solve_links(w, knowledge)}, facts=all_facts, uses=(0, 1, 2)
                ),
                PlanStep("finish", {"summary": f"fixed {len(w.report)} reported links"}),
            ]
        return [
            PlanStep("get_menu", {"menu": "main"}),
            PlanStep("list_pages", {}),
            PlanStep("list_redirects", {}),
            PlanStep(
                "set_menu",
                {"menu": "main", "items": solve_menu(w, knowledge)},
                facts=all_facts,
                uses=(0, 1, 2),
            ),
            PlanStep("finish", {"summary": "main menu reorganised"}),
        ]

    def check(self, env: TaskEnv) -> Outcome:
        assert isinstance(env, WebsiteEnv)
        ref = self.make_env(env.instance)
        impl = {t.name: t.impl for t in ref.tool_specs()}
        for step in self.plan(env.instance, self.full_knowledge()):
            ref.call(impl.get(step.tool, step.tool), dict(step.args))
        start, want, have = _snapshot(WebsiteEnv(env.instance, env.world)), _snapshot(ref), _snapshot(env)
        required = {k for k in want if want[k] != start.get(k)}
        wrong = sorted(k for k in set(want) | set(have) if want.get(k) != have.get(k))
        done = sum(1 for k in required if have.get(k) == want[k])
        broken = env.broken_links()
        passed = not wrong
        score = 1.0 if passed else round(done / len(required) if required else 0.0, 4)
        if not passed and any(k not in required for k in wrong):
            score = round(score / 2, 4)  # collateral change outside the request
        return Outcome(
            passed,
            score,
            {
                "kind": env.world.kind,
                "traps": list(env.world.traps),
                "wrong": [list(k) for k in wrong][:20],
                "broken_links": [list(b) for b in broken][:20],
            },
        )


def _op_text(op: tuple[str, ...]) -> str:
    kind = op[0]
    if kind == "rename":
        return f'Rename the menu item "{op[1]}" to "{op[2]}" (same target).'
    if kind == "move_under":
        return f'Move the item "{op[1]}" so that it becomes the last sub-item of "{op[2]}".'
    if kind == "remove":
        return f'Remove the item "{op[1]}".'
    if kind == "add_under":
        return f'Add the page "{op[1]}" as the last sub-item of "{op[2]}", labelled with the page title.'
    return f'Move the top-level item "{op[1]}" to the end of the menu.'


# ---------------------------------------------------------------------------------- solutions
def _descendants(w: SiteWorld, pid: int) -> list[int]:
    out = []
    stack = [pid]
    while stack:
        cur = stack.pop()
        kids = [p.id for p in w.pages if p.parent == cur]
        out += kids
        stack += kids
    return sorted(out)


def _final(w: SiteWorld, href: str) -> str:
    reds = {f: t for f, t, _ in w.redirects}
    seen = set()
    while href in reds and href not in seen:
        seen.add(href)
        href = reds[href]
    return href


def _by_title(w: SiteWorld, title: str, published_only: bool) -> Page | None:
    cands = [p for p in w.pages if p.title == title and (p.status == "published" or not published_only)]
    return max(cands, key=lambda p: (p.updated, p.id)) if cands else None


def solve_rename(
    w: SiteWorld, k: Knowledge
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, str]]]:
    facts = k.facts
    page = w.page(w.rename_id)
    old = w.path(page.id)
    new = old.rsplit("/", 1)[0] + "/" + w.new_slug
    seen_page = 0 not in k.cut
    fields: dict[str, Any] = {"page_id": page.id if seen_page else 0, "slug": w.new_slug}
    if "seo_canonical" in facts and seen_page and page.canonical == old:
        fields["canonical"] = new
    if w.seo_title and "seo_title" in k.constraints:
        fields["seo_title"] = w.seo_title
    moved = [(old, new)]
    if "child_pages" in facts and seen_page:
        moved += [(w.path(c), new + w.path(c)[len(old) :]) for c in _descendants(w, page.id)]
    code = 301 if "permanent_301" in facts else 302
    redirects = [{"from": o, "to": n, "code": code} for o, n in moved]
    if "resolve_redirects" in facts and 2 not in k.cut:
        targets = dict(moved)
        redirects += [{"from": f, "to": targets[t], "code": c} for f, t, c in w.redirects if t in targets]
    changes = [{"old": o, "new": n} for o, n in moved]
    return fields, redirects, changes


def solve_links(w: SiteWorld, k: Knowledge) -> list[dict[str, str]]:
    if 0 in k.cut:
        return []
    changes = []
    for _page, href, text, problem in w.report:
        if problem.startswith("404"):
            if 1 in k.cut:
                new = "/"
            else:
                target = _by_title(w, text, "no_drafts" in k.facts)
                new = w.path(target.id) if target else "/"
        else:
            first = problem.split("-> ", 1)[1]
            new = _final(w, href) if "resolve_redirects" in k.facts and 2 not in k.cut else first
        changes.append({"old": href, "new": new})
    return changes


def solve_menu(w: SiteWorld, k: Knowledge) -> list[dict[str, Any]]:
    items = [] if 0 in k.cut else _menu_json(w.menu("main"))

    def find(label: str) -> tuple[list[dict[str, Any]], int] | None:
        for i, it in enumerate(items):
            if it["label"] == label:
                return items, i
            for j, ch in enumerate(it["children"]):
                if ch["label"] == label:
                    return it["children"], j
        return None

    for op in w.menu_ops:
        kind = op[0]
        hit = find(op[1])
        if kind == "add_under":
            parent = find(op[2])
            if parent is None:
                continue
            if 1 in k.cut:
                target = "/" + slugify(op[1])
            else:
                page = _by_title(w, op[1], "no_drafts" in k.facts)
                target = w.path(page.id) if page else "/"
            parent[0][parent[1]]["children"].append({"label": op[1], "target": target, "children": []})
            continue
        if hit is None:
            continue
        siblings, i = hit
        if kind == "rename":
            siblings[i]["label"] = op[2]
        elif kind == "remove":
            siblings.pop(i)
        elif kind == "move_under":
            item = siblings.pop(i)
            parent = find(op[2])
            if parent is not None:
                parent[0][parent[1]]["children"].append(item)
        elif kind == "move_last":
            items.append(siblings.pop(i))
    if "resolve_redirects" in k.facts and 2 not in k.cut:
        for it in items:
            for node in (it, *it["children"]):
                node["target"] = _final(w, node["target"])
    return items


def _menu_json(items: tuple[MenuItem, ...]) -> list[dict[str, Any]]:
    return [{"label": label, "target": target, "children": _menu_json(kids)} for label, target, kids in items]


def _menu_tuple(items: list[dict[str, Any]]) -> tuple[MenuItem, ...]:
    return tuple((it["label"], it["target"], _menu_tuple(it["children"])) for it in items)


def _snapshot(env: WebsiteEnv) -> dict[tuple[str, str], Any]:
    snap: dict[tuple[str, str], Any] = {}
    tree = {pid: (p["slug"], p["parent"]) for pid, p in env.pages.items()}
    for pid, p in env.pages.items():
        own = _path(tree, pid)
        canonical = "" if p["canonical"] in ("", own) else p["canonical"]
        snap[("page", str(pid))] = (
            p["title"],
            p["slug"],
            p["parent"],
            p["status"],
            p["body"],
            p["seo_title"],
            p["meta_description"],
            canonical,
        )
    for f, (t, c) in env.redirects.items():
        snap[("redirect", f)] = (t, c)
    for name, items in env.menus.items():
        snap[("menu", name)] = _menu_tuple(items)
    for f, alt in env.media.items():
        snap[("media", f)] = alt
    return snap


# ---------------------------------------------------------------------------------- generation
@lru_cache(maxsize=512)
def _world(seed: int, params_json: str) -> SiteWorld:
    params = json.loads(params_json)
    rng = random.Random(seed)
    difficulty = int(params["difficulty"])
    size = int(params["size"])
    trap_rate = TRAP_RATE.get(difficulty, 0.4)
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
    sections = list(SECTIONS)
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
    main_sections = main_sections[: 6 + min(size, 3)]
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
            traps.append("canonical")
            page["canonical"] = path(rename_id)
        if rng.random() < trap_rate:
            traps.append("redirect_chain")
            redirects[fresh_old_path()] = (path(rename_id), 301)
        if rng.random() < trap_rate:
            traps.append("seo_title")
            seo_title = f"{page['title']} - {rng.choice(('updated', 'our offer', 'all you need'))} | {site}"
        reserved = {rename_id, *[pid for pid in pages if pages[pid]["parent"] == rename_id]}

    # historic redirects to live pages (never to the renamed page or its children)
    targets = [pid for pid in published if pid not in reserved]
    for _ in range(3 + 12 * size * size):
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


# ---------------------------------------------------------------------------------- environment
class WebsiteEnv(TaskEnv):
    def __init__(self, instance: TaskInstance, world: SiteWorld):
        super().__init__(instance)
        self.world = world
        self.pages: dict[int, dict[str, Any]] = {p.id: dict(p.__dict__) for p in world.pages}
        self.redirects: dict[str, tuple[str, int]] = {f: (t, c) for f, t, c in world.redirects}
        self.menus: dict[str, list[dict[str, Any]]] = {name: _menu_json(items) for name, items in world.menus}
        self.media: dict[str, str] = dict(world.media)

    def tool_specs(self) -> tuple[ToolSpec, ...]:
        return (*TOOLS, FINISH_TOOL)

    # ---- helpers
    def path(self, pid: int) -> str:
        return _path({q: (p["slug"], p["parent"]) for q, p in self.pages.items()}, pid)

    def _by_path(self) -> dict[str, int]:
        return {self.path(pid): pid for pid in self.pages}

    def live_paths(self) -> set[str]:
        return {self.path(pid) for pid, p in self.pages.items() if p["status"] == "published"}

    def broken_links(self) -> list[tuple[str, str]]:
        """Internal links (page bodies of published pages, menus) that do not lead straight to a
        published page."""
        live = self.live_paths()
        out = []
        for pid, p in sorted(self.pages.items()):
            if p["status"] != "published":
                continue
            for bang, _text, href in LINK.findall(p["body"]):
                if not href.startswith("/"):
                    continue
                if bang or href.startswith("/media/"):
                    if href not in self.media:
                        out.append((self.path(pid), href))
                elif href not in live:
                    out.append((self.path(pid), href))
        for name, items in self.menus.items():
            for it in items:
                for node in (it, *it["children"]):
                    if node["target"] not in live:
                        out.append((f"menu:{name}", node["target"]))
        return out

    # ---- pages
    def tool_list_pages(self) -> str:
        lines = ["id | path | title | status | updated | seo_title"]
        for pid in sorted(self.pages, key=lambda q: self.path(q)):
            p = self.pages[pid]
            lines.append(
                f"{pid} | {self.path(pid)} | {p['title']} | {p['status']} | {p['updated']} | {p['seo_title']}"
            )
        return "\n".join(lines) + f"\n({len(self.pages)} pages)"

    def tool_get_page(self, path: str) -> str:
        if not isinstance(path, str):
            raise ToolArgError("path must be a string such as /about-us")
        pid = self._by_path().get(path)
        if pid is None:
            hint = f" (it redirects to {self.redirects[path][0]})" if path in self.redirects else ""
            raise ToolArgError(f"no page at {path[:200]!r}{hint}")
        p = self.pages[pid]
        kids = sorted(self.path(c) for c, q in self.pages.items() if q["parent"] == pid)
        parent = self.path(p["parent"]) if p["parent"] in self.pages else "(none)"
        return "\n".join(
            [
                f"id: {pid}",
                f"path: {self.path(pid)}",
                f"title: {p['title']}",
                f"slug: {p['slug']}",
                f"status: {p['status']}",
                f"parent: {parent}",
                f"children: {', '.join(kids) or '(none)'}",
                f"updated: {p['updated']}",
                f"seo_title: {p['seo_title']}",
                f"meta_description: {p['meta_description']}",
                f"canonical: {p['canonical'] or '(default: the page itself)'}",
                "body:",
                p["body"],
            ]
        )

    def tool_update_page(
        self,
        page_id: int,
        slug: str | None = None,
        title: str | None = None,
        body: str | None = None,
        seo_title: str | None = None,
        meta_description: str | None = None,
        canonical: str | None = None,
        status: str | None = None,
    ) -> str:
        if not isinstance(page_id, int) or isinstance(page_id, bool) or page_id not in self.pages:
            raise ToolArgError(f"no page with id {str(page_id)[:50]}")
        p = self.pages[page_id]
        new = dict(p)
        for name, value in (
            ("title", title),
            ("body", body),
            ("seo_title", seo_title),
            ("meta_description", meta_description),
        ):
            if value is None:
                continue
            if not isinstance(value, str) or len(value) > MAX_TEXT or (name == "title" and not value.strip()):
                raise ToolArgError(f"{name} must be a string of at most {MAX_TEXT} characters")
            new[name] = value
        if slug is not None:
            if not isinstance(slug, str) or not SLUG.match(slug) or len(slug) > 100:
                raise ToolArgError("slug must be lowercase words joined by hyphens, e.g. what-we-do")
            siblings = {
                q["slug"] for q2, q in self.pages.items() if q["parent"] == p["parent"] and q2 != page_id
            }
            if slug in siblings:
                raise ToolArgError(f"another page under the same parent already uses the slug {slug!r}")
            new["slug"] = slug
        if canonical is not None:
            if not isinstance(canonical, str) or (canonical and not PATH.match(canonical)):
                raise ToolArgError(
                    "canonical must be a site path such as /about-us, or empty for the default"
                )
            new["canonical"] = canonical
        if status is not None:
            if status not in ("published", "draft"):
                raise ToolArgError("status must be 'published' or 'draft'")
            new["status"] = status
        changed = sorted(k for k in new if new[k] != p[k])
        self.pages[page_id] = new
        return (
            f"page {page_id} updated ({', '.join(changed) or 'no change'}); path is now {self.path(page_id)}"
        )

    # ---- redirects
    def tool_list_redirects(self) -> str:
        lines = ["from | to | code"] + [f"{f} | {t} | {c}" for f, (t, c) in sorted(self.redirects.items())]
        return "\n".join(lines) + f"\n({len(self.redirects)} redirects)"

    def tool_save_redirects(self, redirects: list[dict[str, Any]]) -> str:
        if not isinstance(redirects, list) or len(redirects) > MAX_ITEMS:
            raise ToolArgError(f"redirects must be a list of at most {MAX_ITEMS} objects")
        clean = []
        for i, r in enumerate(redirects):
            if not isinstance(r, dict) or set(r) - {"from", "to", "code"} or not {"from", "to"} <= set(r):
                raise ToolArgError(f"redirect {i} must be an object with from, to and optional code")
            f, t, c = r["from"], r["to"], r.get("code", 301)
            if not isinstance(f, str) or not PATH.match(f) or not isinstance(t, str) or not PATH.match(t):
                raise ToolArgError(f"redirect {i}: from and to must be site paths such as /old-page")
            if f == t:
                raise ToolArgError(f"redirect {i}: from and to are the same path")
            if c not in (301, 302) or isinstance(c, bool):
                raise ToolArgError(f"redirect {i}: code must be 301 or 302")
            clean.append((f, t, c))
        for f, t, c in clean:
            self.redirects[f] = (t, c)
        return f"saved {len(clean)} redirects"

    def tool_delete_redirect(self, from_path: str) -> str:
        if not isinstance(from_path, str) or from_path not in self.redirects:
            raise ToolArgError(f"no redirect from {str(from_path)[:200]!r}")
        del self.redirects[from_path]
        return f"deleted the redirect from {from_path}"

    # ---- links and menus
    def tool_replace_links(self, changes: list[dict[str, Any]]) -> str:
        if not isinstance(changes, list) or len(changes) > MAX_ITEMS:
            raise ToolArgError(f"changes must be a list of at most {MAX_ITEMS} objects")
        pairs = []
        for i, ch in enumerate(changes):
            if not isinstance(ch, dict) or set(ch) != {"old", "new"}:
                raise ToolArgError(f"change {i} must be an object with exactly old and new")
            old, new = ch["old"], ch["new"]
            if not isinstance(old, str) or not old.startswith("/") or len(old) > 300:
                raise ToolArgError(f"change {i}: old must be a site path")
            if not isinstance(new, str) or not PATH.match(new):
                raise ToolArgError(f"change {i}: new must be a site path such as /about-us")
            pairs.append((old, new))
        report = []
        for old, new in pairs:
            n_pages = n_menu = 0
            pattern = re.compile(r"(\]\()" + re.escape(old) + r"(\))")
            for p in self.pages.values():
                body, n = pattern.subn(lambda m, new=new: m.group(1) + new + m.group(2), p["body"])
                if n:
                    p["body"] = body
                    n_pages += 1
            for items in self.menus.values():
                for it in items:
                    for node in (it, *it["children"]):
                        if node["target"] == old:
                            node["target"] = new
                            n_menu += 1
            report.append(f"{old} -> {new}: {n_pages} pages, {n_menu} menu items")
        return "\n".join(report) or "no changes given"

    def tool_get_menu(self, menu: str) -> str:
        if not isinstance(menu, str) or menu not in self.menus:
            raise ToolArgError(f"no menu {str(menu)[:100]!r} (menus: {', '.join(self.menus)})")
        return json.dumps(self.menus[menu], indent=1)

    def tool_set_menu(self, menu: str, items: list[dict[str, Any]]) -> str:
        if not isinstance(menu, str) or menu not in self.menus:
            raise ToolArgError(f"no menu {str(menu)[:100]!r} (menus: {', '.join(self.menus)})")
        self.menus[menu] = _check_items(items, depth=0)
        return f"menu {menu} saved ({len(self.menus[menu])} top-level items)"

    # ---- media and crawl
    def tool_list_media(self) -> str:
        lines = ["file | alt text"] + [f"{f} | {alt}" for f, alt in sorted(self.media.items())]
        return "\n".join(lines)

    def tool_read_link_report(self) -> str:
        w = self.world
        if not w.report:
            return f"Link crawl of {w.today}: no broken internal links found."
        lines = [f"Link crawl of {w.today}: broken internal links", "page | href | link text | problem"]
        lines += [" | ".join(r) for r in w.report]
        return "\n".join(lines)


def _check_items(items: Any, depth: int) -> list[dict[str, Any]]:
    if not isinstance(items, list) or len(items) > MAX_ITEMS:
        raise ToolArgError(f"items must be a list of at most {MAX_ITEMS} menu items")
    out = []
    for i, it in enumerate(items):
        if (
            not isinstance(it, dict)
            or not {"label", "target"} <= set(it)
            or set(it) - {"label", "target", "children"}
        ):
            raise ToolArgError(f"menu item {i} must be an object with label, target and optional children")
        label, target, kids = it["label"], it["target"], it.get("children", [])
        if not isinstance(label, str) or not label.strip() or len(label) > 200:
            raise ToolArgError(f"menu item {i}: label must be a non-empty string")
        if not isinstance(target, str) or not PATH.match(target):
            raise ToolArgError(f"menu item {i}: target must be a site path such as /about-us")
        if kids and depth >= 1:
            raise ToolArgError("menus have two levels: a sub-item cannot have children")
        out.append({"label": label, "target": target, "children": _check_items(kids, depth + 1)})
    return out


_NO_ARGS = {"type": "object", "properties": {}, "additionalProperties": False}
_PATH = {"type": "string", "description": "a site path such as /about-us"}
_MENU_ITEM: dict[str, Any] = {
    "type": "object",
    "properties": {
        "label": {"type": "string", "minLength": 1},
        "target": _PATH,
        "children": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "label": {"type": "string", "minLength": 1},
                    "target": _PATH,
                    "children": {"type": "array", "maxItems": 0},
                },
                "required": ["label", "target"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["label", "target"],
    "additionalProperties": False,
}

TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "list_pages",
        "List every CMS page: id, path, title, status, last update and SEO title.",
        _NO_ARGS,
        "list_pages",
    ),
    ToolSpec(
        "get_page",
        "Show one page by path: fields, SEO metadata, children and body.",
        {
            "type": "object",
            "properties": {"path": _PATH},
            "required": ["path"],
            "additionalProperties": False,
        },
        "get_page",
    ),
    ToolSpec(
        "update_page",
        "Change fields of a page by id. Only the fields given change. Changing the slug changes the page's "
        "URL; it does not create redirects or update links.",
        {
            "type": "object",
            "properties": {
                "page_id": {"type": "integer"},
                "slug": {"type": "string"},
                "title": {"type": "string"},
                "body": {"type": "string"},
                "seo_title": {"type": "string"},
                "meta_description": {"type": "string"},
                "canonical": {"type": "string", "description": "site path, or empty for the page itself"},
                "status": {"type": "string", "enum": ["published", "draft"]},
            },
            "required": ["page_id"],
            "additionalProperties": False,
        },
        "update_page",
    ),
    ToolSpec(
        "list_redirects", "List the site's redirects (from, to, HTTP code).", _NO_ARGS, "list_redirects"
    ),
    ToolSpec(
        "save_redirects",
        "Create or overwrite redirects, keyed by their from path.",
        {
            "type": "object",
            "properties": {
                "redirects": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "from": _PATH,
                            "to": _PATH,
                            "code": {"type": "integer", "enum": [301, 302]},
                        },
                        "required": ["from", "to"],
                        "additionalProperties": False,
                    },
                    "maxItems": MAX_ITEMS,
                }
            },
            "required": ["redirects"],
            "additionalProperties": False,
        },
        "save_redirects",
    ),
    ToolSpec(
        "delete_redirect",
        "Delete the redirect from a path.",
        {
            "type": "object",
            "properties": {"from_path": _PATH},
            "required": ["from_path"],
            "additionalProperties": False,
        },
        "delete_redirect",
    ),
    ToolSpec(
        "replace_links",
        "Site-wide link replacement: every link in page bodies and every menu item whose target is exactly "
        "`old` is changed to `new`.",
        {
            "type": "object",
            "properties": {
                "changes": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"old": _PATH, "new": _PATH},
                        "required": ["old", "new"],
                        "additionalProperties": False,
                    },
                    "maxItems": MAX_ITEMS,
                }
            },
            "required": ["changes"],
            "additionalProperties": False,
        },
        "replace_links",
    ),
    ToolSpec(
        "get_menu",
        "Show a menu ('main' or 'footer') as JSON: items with label, target and children.",
        {
            "type": "object",
            "properties": {"menu": {"type": "string"}},
            "required": ["menu"],
            "additionalProperties": False,
        },
        "get_menu",
    ),
    ToolSpec(
        "set_menu",
        "Replace a whole menu with the given items (two levels: items may have children without children).",
        {
            "type": "object",
            "properties": {"menu": {"type": "string"}, "items": {"type": "array", "items": _MENU_ITEM}},
            "required": ["menu", "items"],
            "additionalProperties": False,
        },
        "set_menu",
    ),
    ToolSpec("list_media", "List the media library (file path and alt text).", _NO_ARGS, "list_media"),
    ToolSpec("read_link_report", "Read the report of the last link crawl.", _NO_ARGS, "read_link_report"),
)
