"""The website services: the CMS (pages, redirects, menus, media library) behind admin tools, and the
report of the last link crawl."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from coevolve.tasks.base import FINISH_TOOL, TaskEnv, ToolArgError
from coevolve.tasks.tools import Param, json_schema, tool_specs
from coevolve.tasks.website.world import LINK, PATH, SLUG, SiteWorld, _menu_json, _path
from coevolve.values import TaskInstance, ToolSpec

MAX_TEXT = 20_000
MAX_ITEMS = 200
SitePath = Annotated[str, Param(description="a site path such as /about-us")]
_PATH = json_schema(SitePath)
_REDIRECT = {
    "type": "object",
    "properties": {"from": _PATH, "to": _PATH, "code": {"type": "integer", "enum": [301, 302]}},
    "required": ["from", "to"],
    "additionalProperties": False,
}
_CHANGE = {
    "type": "object",
    "properties": {"old": _PATH, "new": _PATH},
    "required": ["old", "new"],
    "additionalProperties": False,
}


def _menu_item(children: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "label": {"type": "string", "minLength": 1},
            "target": _PATH,
            "children": children,
        },
        "required": ["label", "target"],
        "additionalProperties": False,
    }


_MENU_ITEM = _menu_item({"type": "array", "items": _menu_item({"type": "array", "maxItems": 0})})  # two levels


class WebsiteEnv(TaskEnv):
    def __init__(self, instance: TaskInstance, world: SiteWorld):
        super().__init__(instance)
        self.world = world
        self.pages: dict[int, dict[str, Any]] = {p.id: dict(p.__dict__) for p in world.pages}
        self.redirects: dict[str, tuple[str, int]] = {f: (t, c) for f, t, c in world.redirects}
        self.menus: dict[str, list[dict[str, Any]]] = {name: _menu_json(items) for name, items in world.menus}
        self.media: dict[str, str] = dict(world.media)

    def tool_specs(self) -> tuple[ToolSpec, ...]:
        return (*TOOLS, FINISH_TOOL, *HELPER_TOOLS)

    # ---- helpers
    def path(self, pid: int) -> str:
        return _path(self._tree(), pid)

    def paths(self) -> dict[int, str]:
        """Every page's path, from one read of the page tree."""
        tree = self._tree()
        return {pid: _path(tree, pid) for pid in self.pages}

    def _tree(self) -> dict[int, tuple[str, int | None]]:
        return {q: (p["slug"], p["parent"]) for q, p in self.pages.items()}

    def _by_path(self) -> dict[str, int]:
        return {path: pid for pid, path in self.paths().items()}

    def live_paths(self) -> set[str]:
        return {path for pid, path in self.paths().items() if self.pages[pid]["status"] == "published"}

    def broken_links(self) -> list[tuple[str, str]]:
        """Internal links (page bodies of published pages, menus) that do not lead straight to a
        published page."""
        live, paths = self.live_paths(), self.paths()
        out = []
        for pid, p in sorted(self.pages.items()):
            if p["status"] != "published":
                continue
            for bang, _text, href in LINK.findall(p["body"]):
                if not href.startswith("/"):
                    continue
                if bang or href.startswith("/media/"):
                    if href not in self.media:
                        out.append((paths[pid], href))
                elif href not in live:
                    out.append((paths[pid], href))
        for name, items in self.menus.items():
            for it in items:
                for node in (it, *it["children"]):
                    if node["target"] not in live:
                        out.append((f"menu:{name}", node["target"]))
        return out

    # ---- pages
    def tool_list_pages(self) -> str:
        """List every CMS page: id, path, title, status, last update and SEO title."""
        lines = ["id | path | title | status | updated | seo_title"]
        paths = self.paths()
        for pid in sorted(self.pages, key=paths.__getitem__):
            p = self.pages[pid]
            lines.append(
                f"{pid} | {paths[pid]} | {p['title']} | {p['status']} | {p['updated']} | {p['seo_title']}"
            )
        return "\n".join(lines) + f"\n({len(self.pages)} pages)"

    def tool_get_page(self, path: SitePath) -> str:
        """Show one page by path: fields, SEO metadata, children and body."""
        if not isinstance(path, str):
            raise ToolArgError("path must be a string such as /about-us")
        pid = self._by_path().get(path)
        if pid is None:
            hint = f" (it redirects to {self.redirects[path][0]})" if path in self.redirects else ""
            raise ToolArgError(f"no page at {path[:200]!r}{hint}")
        p = self.pages[pid]
        paths = self.paths()
        kids = sorted(paths[c] for c, q in self.pages.items() if q["parent"] == pid)
        parent = paths[p["parent"]] if p["parent"] in self.pages else "(none)"
        return "\n".join(
            [
                f"id: {pid}",
                f"path: {paths[pid]}",
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
        canonical: Annotated[str | None, Param(description="site path, or empty for the page itself")] = None,
        status: Literal["published", "draft"] | None = None,
    ) -> str:
        """Change fields of a page by id. Only the fields given change. Changing the slug changes the page's
        URL; it does not create redirects or update links."""
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
        """List the site's redirects (from, to, HTTP code)."""
        lines = ["from | to | code"] + [f"{f} | {t} | {c}" for f, (t, c) in sorted(self.redirects.items())]
        return "\n".join(lines) + f"\n({len(self.redirects)} redirects)"

    def tool_save_redirects(
        self, redirects: Annotated[list[dict[str, Any]], Param(items=_REDIRECT, maxItems=MAX_ITEMS)]
    ) -> str:
        """Create or overwrite redirects, keyed by their from path."""
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

    def tool_delete_redirect(self, from_path: SitePath) -> str:
        """Delete the redirect from a path."""
        if not isinstance(from_path, str) or from_path not in self.redirects:
            raise ToolArgError(f"no redirect from {str(from_path)[:200]!r}")
        del self.redirects[from_path]
        return f"deleted the redirect from {from_path}"

    # ---- links and menus
    def tool_replace_links(
        self, changes: Annotated[list[dict[str, Any]], Param(items=_CHANGE, maxItems=MAX_ITEMS)]
    ) -> str:
        """Site-wide link replacement: every link in page bodies and every menu item whose target is exactly
        `old` is changed to `new`."""
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
        """Show a menu ('main' or 'footer') as JSON: items with label, target and children."""
        if not isinstance(menu, str) or menu not in self.menus:
            raise ToolArgError(f"no menu {str(menu)[:100]!r} (menus: {', '.join(self.menus)})")
        return json.dumps(self.menus[menu], indent=1)

    def tool_set_menu(
        self, menu: str, items: Annotated[list[dict[str, Any]], Param(items=_MENU_ITEM)]
    ) -> str:
        """Replace a whole menu with the given items (two levels: items may have children without
        children)."""
        if not isinstance(menu, str) or menu not in self.menus:
            raise ToolArgError(f"no menu {str(menu)[:100]!r} (menus: {', '.join(self.menus)})")
        self.menus[menu] = _check_items(items, depth=0)
        return f"menu {menu} saved ({len(self.menus[menu])} top-level items)"

    # ---- media and crawl
    def tool_list_media(self) -> str:
        """List the media library (file path and alt text)."""
        lines = ["file | alt text"] + [f"{f} | {alt}" for f, alt in sorted(self.media.items())]
        return "\n".join(lines)

    def tool_read_link_report(self) -> str:
        """Read the report of the last link crawl."""
        w = self.world
        if not w.report:
            return f"Link crawl of {w.today}: no broken internal links found."
        lines = [f"Link crawl of {w.today}: broken internal links", "page | href | link text | problem"]
        lines += [" | ".join(r) for r in w.report]
        return "\n".join(lines)

    # ---- helper tools (not in the baseline)
    def _path_arg(self, path: Any) -> str:
        if not isinstance(path, str) or not path.startswith("/") or len(path) > 300:
            raise ToolArgError("path must be a site path such as /about-us")
        return path

    def tool_resolve_path(self, path: SitePath) -> str:
        """Follow the site's redirects from a path to where they end, and say what is there: a published
        page, a draft page or no page."""
        cur = self._path_arg(path)
        hops, seen = [cur], {cur}
        while cur in self.redirects:
            cur, code = self.redirects[cur]
            hops.append(f"{cur} ({code})")
            if cur in seen:
                return " -> ".join(hops) + ": a redirect loop"
            seen.add(cur)
        pid = self._by_path().get(cur)
        if pid is None:
            where = "no page"
        else:
            p = self.pages[pid]
            where = f"{'a published page' if p['status'] == 'published' else 'a draft page'} (id {pid}, {p['title']!r})"
        chain = " -> ".join(hops)
        return f"{chain}: {where}" if len(hops) > 1 else f"{chain} is not redirected: {where}"

    def tool_find_pages(self, title: Annotated[str, Param(minLength=1)]) -> str:
        """The pages with a given title (case-insensitive): id, path, status and last update of each."""
        if not isinstance(title, str) or not title.strip() or len(title) > 300:
            raise ToolArgError("title must be a page title")
        want = " ".join(title.split()).lower()
        hits = sorted(pid for pid, p in self.pages.items() if " ".join(p["title"].split()).lower() == want)
        if not hits:
            return f"no page is titled {title.strip()[:100]!r}"
        lines = [f"pages titled {title.strip()[:100]!r}: id | path | status | updated"]
        paths = self.paths()
        lines += [f"{pid} | {paths[pid]} | {self.pages[pid]['status']} | {self.pages[pid]['updated']}" for pid in hits]
        return "\n".join(lines)

    def tool_page_tree(self, path: SitePath) -> str:
        """The page at a path and the paths of all the pages below it (children, their children, ...)."""
        pid = self._by_path().get(self._path_arg(path))
        if pid is None:
            raise ToolArgError(f"no page at {path[:200]!r}")
        out, stack = [], [pid]
        while stack:
            cur = stack.pop()
            kids = [q for q, p in self.pages.items() if p["parent"] == cur]
            out += kids
            stack += kids
        paths = self.paths()
        below = sorted(paths[q] for q in out)
        return f"{paths[pid]} (id {pid}) and its {len(below)} descendant page{'s' if len(below) != 1 else ''}: " + (
            ", ".join(below) or "none"
        )

    def tool_links_to(self, path: SitePath) -> str:
        """Everything that points at a path: the pages whose bodies link to it, the menu items that target
        it and the redirects whose target it is."""
        target = self._path_arg(path)
        pattern = re.compile(r"\]\(" + re.escape(target) + r"\)")
        paths = self.paths()
        pages = sorted(paths[pid] for pid, p in self.pages.items() if pattern.search(p["body"]))
        items = [f"{name}: {node['label']!r}" for name, its in self.menus.items() for it in its
                 for node in (it, *it["children"]) if node["target"] == target]  # fmt: skip
        reds = sorted(f for f, (t, _) in self.redirects.items() if t == target)
        return "\n".join([
            f"links to {target}:",
            f"page bodies: {', '.join(pages) or 'none'}",
            f"menu items: {', '.join(items) or 'none'}",
            f"redirects with this target: {', '.join(reds) or 'none'}",
        ])


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


TOOLS = tool_specs(
    WebsiteEnv.tool_list_pages,
    WebsiteEnv.tool_get_page,
    WebsiteEnv.tool_update_page,
    WebsiteEnv.tool_list_redirects,
    WebsiteEnv.tool_save_redirects,
    WebsiteEnv.tool_delete_redirect,
    WebsiteEnv.tool_replace_links,
    WebsiteEnv.tool_get_menu,
    WebsiteEnv.tool_set_menu,
    WebsiteEnv.tool_list_media,
    WebsiteEnv.tool_read_link_report,
)
HELPER_TOOLS = tool_specs(
    WebsiteEnv.tool_resolve_path,
    WebsiteEnv.tool_find_pages,
    WebsiteEnv.tool_page_tree,
    WebsiteEnv.tool_links_to,
)
