"""The website grader: compares the final CMS state with the state the change request requires, and
reports per requirement.

The required state is the one the reference plan leaves (pages, redirects, menus, media). Every
difference is charged to one requirement: the requested rename, the SEO title, the page's metadata,
the redirects, the links and menu items, or "nothing else changed"; a last line lists broken internal
links. Reasons name the agent's own wrong items (its links, its redirect rows, its menu items, the
fields it changed) the way a failing test would; they never name the values it should have written
or why the instance was built the way it was. The score is the share of required changes made,
halved when anything outside the request changed.
"""

from __future__ import annotations

from typing import Any

from coevolve.tasks.base import PlanStep, Requirement, graded, plural
from coevolve.tasks.website.env import WebsiteEnv
from coevolve.tasks.website.world import LINK, _menu_tuple, _path
from coevolve.values import Outcome

FIELDS = ("title", "slug", "parent", "status", "body", "seo_title", "meta_description", "canonical")
SHOWN = 5

Key = tuple[str, str]


def snapshot(env: WebsiteEnv) -> dict[Key, Any]:
    """The CMS state the checker compares: page fields, redirects, menus, media."""
    snap: dict[Key, Any] = {}
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


def reference_env(env: WebsiteEnv, steps: list[PlanStep]) -> WebsiteEnv:
    """A fresh copy of the instance's CMS with the reference plan applied."""
    ref = WebsiteEnv(env.instance, env.world)
    impl = {t.name: t.impl for t in ref.tool_specs()}
    for step in steps:
        ref.call(impl.get(step.tool, step.tool), dict(step.args))
    return ref


def _listing(items: list[str]) -> str:
    shown = "; ".join(items[:SHOWN])
    return shown + (f"; and {len(items) - SHOWN} more" if len(items) > SHOWN else "")


def _note(env: WebsiteEnv, href: str) -> str:
    """What an address is in the agent's CMS, the way a link crawler would annotate it."""
    if href.startswith("/media/"):
        return "" if href in env.media else " (no such file)"
    if href in env.live_paths():
        return ""
    if href in env.redirects:
        return " (a redirect)"
    if href in env.paths().values():
        return " (not a published page)"
    return " (no page there)"


def _link_diffs(env: WebsiteEnv, where: str, want_body: str, have_body: str) -> list[str]:
    """The agent's links in one page body that differ from the required ones."""
    want, have = LINK.findall(want_body), LINK.findall(have_body)
    if len(want) != len(have) or LINK.sub("", want_body) != LINK.sub("", have_body):
        return [f"the text of {where} was changed beyond its links"]
    return [f'on {where}, "{h_text}" -> {h_href}{_note(env, h_href)}'
            for (_, text, w_href), (_, h_text, h_href) in zip(want, have) if w_href != h_href or text != h_text]


def _flat_menu(items: tuple[Any, ...]) -> list[tuple[str, str, str]]:
    """(parent label, label, target) in menu order; the parent label is "" for top-level items."""
    out = []
    for label, target, kids in items:
        out.append(("", label, target))
        out += [(label, k_label, k_target) for k_label, k_target, _ in kids]
    return out


def _item(env: WebsiteEnv, parent: str, label: str, target: str) -> str:
    under = f' under "{parent}"' if parent else ""
    return f'"{label}" -> {target}{_note(env, target)}{under}'


def _menu_diffs(env: WebsiteEnv, name: str, want: tuple[Any, ...], have: tuple[Any, ...]) -> list[str]:
    """The agent's menu items that differ from the required menu, and what is missing or out of order."""
    w, h = _flat_menu(want), _flat_menu(have)
    w_pos = {(p, label): t for p, label, t in w}
    h_pos = {(p, label): t for p, label, t in h}
    out = [
        f"menu {name}: {_item(env, p, label, t)}"
        for p, label, t in h
        if (p, label) in w_pos and w_pos[(p, label)] != t
    ]
    out += [
        f"menu {name}: unexpected item {_item(env, p, label, t)}"
        for p, label, t in h
        if (p, label) not in w_pos
    ]
    missing = sum(1 for key in w_pos if key not in h_pos)
    if missing:
        out.append(f"menu {name}: {missing} required item{'s are' if missing > 1 else ' is'} missing")
    if not out and [(p, label) for p, label, _ in w] != [(p, label) for p, label, _ in h]:
        out.append(f"menu {name}: the items are not in the required order")
    if not out and w != h:
        out.append(f"menu {name} differs from the required menu")
    return out


def _redirect(env: WebsiteEnv, f: str, row: tuple[str, int]) -> str:
    to, code = row
    note = ""
    if to not in env.live_paths():
        note = (
            "; the target is itself a redirect"
            if to in env.redirects
            else "; no published page at the target"
        )
    return f"{f} -> {to} ({code}{note})"


def check(env: WebsiteEnv, reference_steps: list[PlanStep]) -> Outcome:
    w = env.world
    ref = reference_env(env, reference_steps)
    start, want, have = snapshot(WebsiteEnv(env.instance, w)), snapshot(ref), snapshot(env)
    required = {k for k in want if want[k] != start.get(k)}
    wrong = sorted(k for k in set(want) | set(have) if want.get(k) != have.get(k))
    done = sum(1 for k in required if have.get(k) == want[k])
    score = 1.0 if not wrong else round(done / len(required) if required else 0.0, 4)
    if wrong and any(k not in required for k in wrong):
        score = round(score / 2, 4)  # collateral change outside the request

    rename = w.kind == "rename"
    renamed = str(w.rename_id)
    slug_wrong: list[str] = []
    seo_wrong: list[str] = []
    meta_wrong: list[str] = []
    links_wrong: list[str] = []
    menu_wrong: list[str] = []
    redirects_missing = 0
    redirects_wrong: list[str] = []
    collateral: list[str] = []

    for k in wrong:
        kind, name = k
        if kind == "page" and k in want and k in have:
            pid = int(name)
            where = env.path(pid)
            title = env.pages[pid]["title"]
            s, wv, hv = (dict(zip(FIELDS, v)) for v in (start.get(k, want[k]), want[k], have[k]))
            other = []
            for field in FIELDS:
                if wv[field] == hv[field]:
                    continue
                field_required = wv[field] != s[field]
                if rename and name == renamed and field == "slug":
                    slug_wrong.append(
                        f'the page "{title}" (id {pid}) has the slug `{hv["slug"]}`, not the one the request gives'
                    )
                elif rename and name == renamed and field == "seo_title" and w.seo_title:
                    seo_wrong.append(
                        f'the SEO title of "{title}" is "{hv["seo_title"]}", not the text the request gives'
                    )
                elif rename and name == renamed and field == "canonical":
                    shown = hv["canonical"] or "the page's own address"
                    note = _note(env, hv["canonical"]) if hv["canonical"] else ""
                    meta_wrong.append(f'the canonical URL of "{title}" ({where}) is {shown}{note}')
                elif field == "body" and field_required:
                    links_wrong += _link_diffs(env, where, wv["body"], hv["body"])
                elif field == "body":
                    diffs = _link_diffs(env, where, wv["body"], hv["body"])
                    collateral += [d if d.startswith("the text") else f"link changed {d}" for d in diffs]
                else:
                    other.append(field)
            if other:
                collateral.append(f"page {pid} ({where}): {', '.join(other)} changed")
        elif kind == "redirect":
            ours = rename and (k in required or k not in start)
            if ours and k not in have:
                redirects_missing += 1
            elif ours:
                redirects_wrong.append(_redirect(env, name, have[k]))
            elif k not in have:
                collateral.append(f"the redirect from {name} was deleted")
            elif k not in start:
                collateral.append(f"a redirect was added: {_redirect(env, name, have[k])}")
            else:
                collateral.append(f"the redirect from {name} was changed: {_redirect(env, name, have[k])}")
        elif kind == "menu" and k in required:
            diffs = _menu_diffs(env, name, want[k], have.get(k, ()))
            (links_wrong if rename else menu_wrong).extend(diffs)
        elif kind == "menu":
            collateral.append(f"menu {name} was changed")
        else:
            collateral.append(f"{kind} {name} was changed")

    reqs: list[Requirement] = []
    if rename:
        reqs.append(Requirement("page_renamed", not slug_wrong, _listing(slug_wrong)))
        if w.seo_title:
            reqs.append(Requirement("seo_title", not seo_wrong, _listing(seo_wrong)))
        reqs.append(Requirement("page_metadata", not meta_wrong, _listing(meta_wrong)))
        reason = ""
        if redirects_missing:
            needed = sum(1 for k in required if k[0] == "redirect")
            reason = f"{redirects_missing} of the {needed} required redirects {'is' if redirects_missing == 1 else 'are'} missing"
        if redirects_wrong:
            reason += ("; " if reason else "") + f"wrong redirects: {_listing(redirects_wrong)}"
        reqs.append(Requirement("redirects", not reason, reason))
        reqs.append(
            Requirement(
                "links_updated",
                not links_wrong,
                f"{plural(len(links_wrong), 'link or menu item is', 'links or menu items are')} not as required: "
                f"{_listing(links_wrong)}"
                if links_wrong
                else "",
            )
        )
    elif w.kind == "links":
        reqs.append(
            Requirement(
                "reported_links_fixed",
                not links_wrong,
                f"{plural(len(links_wrong), 'link does', 'links do')} not lead to the page named by the link text: "
                f"{_listing(links_wrong)}"
                if links_wrong
                else "",
            )
        )
    else:
        reqs.append(
            Requirement(
                "menu_as_requested",
                not menu_wrong,
                f"the main menu is not as requested: {_listing(menu_wrong)}" if menu_wrong else "",
            )
        )
    broken = [
        f"{'on ' + src if src.startswith('/') else 'in the ' + src.removeprefix('menu:') + ' menu'}: {href}{_note(env, href)}"
        for src, href in env.broken_links()
    ]
    reqs.append(
        Requirement(
            "no_broken_links",
            not broken,
            f"{plural(len(broken), 'internal link is', 'internal links are')} broken: {_listing(broken)}"
            if broken
            else "",
        )
    )
    reqs.append(
        Requirement(
            "nothing_else_changed",
            not collateral,
            f"changes outside the request: {_listing(collateral)}" if collateral else "",
        )
    )
    return graded(reqs, score)
