"""The website solution as a plan of steps, and the changes an agent with some knowledge makes."""

from __future__ import annotations

from typing import Any

from coevolve.tasks.base import Knowledge, PlanStep
from coevolve.tasks.website.world import Page, SiteWorld, _menu_json, slugify

FACTS = ("permanent_301", "resolve_redirects", "child_pages", "seo_canonical", "no_drafts")


def plan(w: SiteWorld, knowledge: Knowledge) -> list[PlanStep]:
    """The steps of the change request; with full knowledge, the reference solution."""
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
                facts=FACTS,
                uses=(0,),
                constraint="seo_title" if w.seo_title else None,
            ),
            PlanStep("save_redirects", {"redirects": redirects}, facts=FACTS, uses=(0, 2)),
            PlanStep("replace_links", {"changes": changes}, facts=FACTS, uses=(0,)),
            PlanStep("finish", {"summary": f"renamed {old}"}),
        ]
    if w.kind == "links":
        return [
            PlanStep("read_link_report", {}),
            PlanStep("list_pages", {}),
            PlanStep("list_redirects", {}),
            PlanStep("replace_links", {"changes": solve_links(w, knowledge)}, facts=FACTS, uses=(0, 1, 2)),
            PlanStep("finish", {"summary": f"fixed {len(w.report)} reported links"}),
        ]
    return [
        PlanStep("get_menu", {"menu": "main"}),
        PlanStep("list_pages", {}),
        PlanStep("list_redirects", {}),
        PlanStep(
            "set_menu", {"menu": "main", "items": solve_menu(w, knowledge)}, facts=FACTS, uses=(0, 1, 2)
        ),
        PlanStep("finish", {"summary": "main menu reorganised"}),
    ]


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
