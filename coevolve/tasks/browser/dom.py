"""A small HTML DOM, the text accessibility tree both browser backends show, and browser form semantics.

Both backends render pages through `parse` + `render_tree`: the text browser from the HTML it holds
(with the values the agent typed), Chromium from a snapshot of its live DOM (values copied into
attributes). So the tree, and the element ids in it, are the same for the same page state whichever
backend produced it. Element ids are the HTML `id` attributes the application renders: semantic and
stable (`order-status`, `order-105-view`), so a plan can name them without reading the page.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from html.parser import HTMLParser

VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"})
INLINE = frozenset(
    {"a", "span", "b", "strong", "em", "i", "code", "small", "label", "input", "select", "textarea", "button",
     "br", "abbr", "time", "#text"}
)
SKIP = frozenset({"head", "script", "style", "template", "noscript", "option"})
SUBMIT_TYPES = frozenset({"submit", "image"})
TEXT_TYPES = frozenset({"text", "search", "email", "number", "password", "tel", "url", ""})
TAG_ROLES = {"button": "button", "textarea": "textbox", "select": "combobox"}  # actionable by their tag alone
_WS = re.compile(r"\s+")


class Node:
    __slots__ = ("attrs", "children", "parent", "tag")

    def __init__(self, tag: str, attrs: dict[str, str], parent: Node | None):
        self.tag = tag
        self.attrs = attrs
        self.children: list[Node | str] = []
        self.parent = parent

    def iter(self) -> Iterator[Node]:
        yield self
        for c in self.children:
            if isinstance(c, Node):
                yield from c.iter()

    def text(self) -> str:
        parts: list[str] = []

        def walk(n: Node) -> None:
            for c in n.children:
                if isinstance(c, str):
                    parts.append(c)
                elif c.tag not in ("script", "style"):
                    walk(c)

        walk(self)
        return _WS.sub(" ", "".join(parts)).strip()

    def by_id(self, element_id: str) -> Node | None:
        return next((n for n in self.iter() if n.attrs.get("id") == element_id), None)

    def find(self, tag: str) -> Node | None:
        return next((n for n in self.iter() if n.tag == tag), None)

    def form(self) -> Node | None:
        n = self.parent
        while n is not None and n.tag != "form":
            n = n.parent
        return n


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {}, None)
        self.cur = self.root

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: "" if v is None else v for k, v in attrs}, self.cur)
        self.cur.children.append(node)
        if tag not in VOID:
            self.cur = node

    def handle_endtag(self, tag: str) -> None:
        n: Node | None = self.cur
        while n is not None and n is not self.root and n.tag != tag:
            n = n.parent
        if n is not None and n is not self.root and n.parent is not None:
            self.cur = n.parent

    def handle_data(self, data: str) -> None:
        self.cur.children.append(data)


def parse(html: str) -> Node:
    p = _Parser()
    p.feed(html)
    p.close()
    for n in p.root.iter():
        if n.tag == "textarea":  # the text content is the control's value
            n.attrs["value"] = "".join(c for c in n.children if isinstance(c, str))
            n.children = []
    return p.root


# ------------------------------------------------------------------------------------------ controls
def kind(n: Node) -> str | None:
    """The role of an actionable element, or None."""
    if n.tag == "a" and "href" in n.attrs:
        return "link"
    if n.tag in TAG_ROLES:
        return TAG_ROLES[n.tag]
    if n.tag == "input":
        t = n.attrs.get("type", "text").lower()
        if t in SUBMIT_TYPES or t in ("button", "reset"):
            return "button"
        if t in ("checkbox", "radio"):
            return t
        if t in TEXT_TYPES:
            return "textbox"
    return None


def is_submit(n: Node) -> bool:
    if n.tag == "button":
        return n.attrs.get("type", "submit").lower() == "submit"
    return n.tag == "input" and n.attrs.get("type", "").lower() in SUBMIT_TYPES


def default_button(form: Node) -> Node | None:
    """The button implicit submission (Enter in a field) uses: the form's first submit button."""
    return next((n for n in form.iter() if is_submit(n) and "disabled" not in n.attrs), None)


def options(select: Node) -> list[Node]:
    return [n for n in select.iter() if n.tag == "option"]


def option_value(opt: Node) -> str:
    return opt.attrs["value"] if "value" in opt.attrs else opt.text()


def selected_option(select: Node) -> Node | None:
    opts = options(select)
    return next((o for o in opts if "selected" in o.attrs), opts[0] if opts else None)


def labels(root: Node) -> dict[str, str]:
    return {n.attrs["for"]: n.text() for n in root.iter() if n.tag == "label" and n.attrs.get("for")}


def name_of(n: Node, label_map: dict[str, str]) -> str:
    if n.tag == "input" and kind(n) == "button":
        return n.attrs.get("value", "Submit")
    if n.tag in ("a", "button"):
        return n.text() or n.attrs.get("aria-label", "")
    return (
        label_map.get(n.attrs.get("id", ""))
        or n.attrs.get("aria-label")
        or n.attrs.get("placeholder")
        or n.attrs.get("name", "")
    )


def form_data(form: Node, submitter: Node | None) -> list[tuple[str, str]]:
    """The name/value pairs a browser submits for `form` (HTML's form data set, the parts we use)."""
    out: list[tuple[str, str]] = []
    for n in form.iter():
        name = n.attrs.get("name")
        if not name or "disabled" in n.attrs:
            continue
        if n.tag == "input":
            t = n.attrs.get("type", "text").lower()
            if t in SUBMIT_TYPES or t in ("button", "reset"):
                if n is submitter:
                    out.append((name, n.attrs.get("value", "")))
            elif t in ("checkbox", "radio"):
                if "checked" in n.attrs:
                    out.append((name, n.attrs.get("value", "on")))
            elif t != "file":
                out.append((name, n.attrs.get("value", "")))
        elif n.tag == "textarea":
            out.append((name, n.attrs.get("value", "")))
        elif n.tag == "select":
            opt = selected_option(n)
            if opt is not None:
                out.append((name, option_value(opt)))
        elif n.tag == "button" and n is submitter:
            out.append((name, n.attrs.get("value", "")))
    return out


# ------------------------------------------------------------------------------ accessibility tree
def _q(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def describe(n: Node, label_map: dict[str, str]) -> str:
    """One actionable element in the tree's notation: `[role "name" #id ...]`."""
    role = kind(n) or n.tag
    parts = [role, _q(name_of(n, label_map))]
    if n.attrs.get("id"):
        parts.append("#" + n.attrs["id"])
    if role == "link":
        parts.append("href=" + n.attrs["href"])
    elif role == "textbox":
        if n.tag == "textarea":
            parts.append("multiline")
        parts.append("value=" + _q(n.attrs.get("value", "")))
    elif role in ("checkbox", "radio"):
        parts.append("checked" if "checked" in n.attrs else "unchecked")
    elif role == "combobox":
        sel = selected_option(n)
        parts.append("selected=" + _q(option_value(sel) if sel is not None else ""))
        parts.append("options=" + ", ".join(f"{_q(option_value(o))} {_q(o.text())}" for o in options(n)))
    return "[" + " ".join(parts) + "]"


def _inline(nodes: list[Node | str], label_map: dict[str, str]) -> str:
    out: list[str] = []

    def walk(c: Node | str) -> None:
        if isinstance(c, str):
            out.append(c)
            return
        if c.tag in SKIP or (c.tag == "input" and c.attrs.get("type", "").lower() == "hidden"):
            return
        if c.tag == "label" and c.attrs.get("for"):
            return  # it names its control
        if kind(c) is not None:
            out.append(f" {describe(c, label_map)} ")
            return
        if c.tag == "br":
            out.append(" ")
            return
        for cc in c.children:
            walk(cc)

    for c in nodes:
        walk(c)
    return _WS.sub(" ", "".join(out)).strip()


def _is_inline(c: Node | str) -> bool:
    return isinstance(c, str) or c.tag in INLINE


def _block(n: Node, depth: int, lines: list[str], label_map: dict[str, str]) -> None:
    pad = "  " * depth
    tag = n.tag
    if tag in SKIP:
        return
    if tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
        lines.append(f"{pad}heading {_q(n.text())}")
        return
    if tag == "table":
        caption = n.find("caption")
        lines.append(f"{pad}table" + (f" {_q(caption.text())}" if caption else ""))
        for tr in (x for x in n.iter() if x.tag == "tr"):
            cells = [c for c in tr.children if isinstance(c, Node) and c.tag in ("td", "th")]
            lines.append(f"{pad}  row: " + " | ".join(_inline([c], label_map) for c in cells))
        return
    if tag in ("ul", "ol"):
        for li in (c for c in n.children if isinstance(c, Node) and c.tag == "li"):
            if all(_is_inline(c) for c in li.children):
                lines.append(f"{pad}- {_inline(li.children, label_map)}")
            else:
                lines.append(f"{pad}-")
                _children(li, depth + 1, lines, label_map)
        return
    head = ""
    if tag == "nav":
        head = "navigation"
    elif tag == "form":
        head = "form" + (f" #{n.attrs['id']}" if n.attrs.get("id") else "")
    elif n.attrs.get("role") == "alert":
        lines.append(f"{pad}alert {_q(n.text())}")
        return
    if head:
        lines.append(pad + head)
        _children(n, depth + 1, lines, label_map)
    else:
        _children(n, depth, lines, label_map)


def _children(n: Node, depth: int, lines: list[str], label_map: dict[str, str]) -> None:
    run: list[Node | str] = []

    def flush() -> None:
        text = _inline(run, label_map)
        if text:
            lines.append("  " * depth + text)
        run.clear()

    for c in n.children:
        if _is_inline(c):
            run.append(c)
        else:
            flush()
            assert isinstance(c, Node)
            _block(c, depth, lines, label_map)
    flush()


def render_tree(root: Node, url: str, status: int) -> str:
    """The page as a text accessibility tree. Actionable elements show as `[role "name" #id ...]`."""
    title = root.find("title")
    head = f"page {_q(title.text() if title else '')} url={url}"
    if status != 200:
        head += f" status={status}"
    lines = [head]
    body = root.find("body") or root
    label_map = labels(root)
    _children(body, 1, lines, label_map)
    return "\n".join(lines)
