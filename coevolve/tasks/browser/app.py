"""The stateful web application both browsers drive: a shop admin and a forum, served as real HTML.

`WebApp.handle(method, target, form)` is the whole server: the text browser calls it in-process, the
HTTP server in `backends` calls it for Chromium. It is thread-safe (one lock). The checker reads its
state (`orders`, `posts`), never what the agent says.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from html import escape
from typing import Any
from urllib.parse import parse_qs, urlsplit

from coevolve.tasks.browser.world import STATUSES, BrowserWorld, Order, Post, money

NOW = "2026-04-01 12:00"
USER = "ops_bot"
MAX_FIELD = 5000


@dataclass
class Response:
    status: int
    html: str = ""
    location: str | None = None


@dataclass
class OrderState:
    status: str
    history: list[tuple[str, str, str, bool]] = field(default_factory=list)


def _e(s: Any) -> str:
    return escape(str(s), quote=True)


class WebApp:
    def __init__(self, world: BrowserWorld):
        self.world = world
        self.orders: dict[int, OrderState] = {o.eid: OrderState(o.status, list(o.history)) for o in world.orders}
        self.posts: list[Post] = list(world.posts)
        self.mutations: list[tuple[str, Any]] = []
        self._flash: tuple[str, str] | None = None  # (path it shows on, message)
        self._lock = threading.Lock()

    # ------------------------------------------------------------------------------------ dispatch
    def handle(self, method: str, target: str, form: dict[str, str] | None = None) -> Response:
        with self._lock:
            parts = urlsplit(target)
            path = parts.path or "/"
            query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
            method = method.upper()
            with contextlib.suppress(_NotFound):
                if method == "POST":
                    return self._post(path, form or {})
                if method == "GET":
                    return self._get(path, query)
            if method not in ("GET", "POST"):
                return Response(405, self._page("Method not allowed", "<h1>Method not allowed</h1>", path))
            return Response(404, self._page("Not found", f"<h1>Not found</h1><p>No page at {_e(path)}.</p>", path))

    def _get(self, path: str, query: dict[str, str]) -> Response:
        routes: list[tuple[str, Any]] = [
            (r"/", self._home),
            (r"/admin", self._dashboard),
            (r"/admin/orders", lambda: self._orders(query.get("q", ""))),
            (r"/admin/orders/(\d+)", self._order),
            (r"/admin/customers", lambda: self._customers(query.get("q", ""))),
            (r"/admin/customers/(\d+)", self._customer),
            (r"/forum", self._forums),
            (r"/f/([a-z0-9]+)", self._forum),
            (r"/f/([a-z0-9]+)/submit", self._submit_form),
            (r"/f/([a-z0-9]+)/(\d+)", self._post_page),
        ]
        for pattern, fn in routes:
            m = re.fullmatch(pattern, path.rstrip("/") or "/")
            if m:
                title, body = fn(*m.groups())
                return Response(200, self._page(title, body, path))
        raise _NotFound

    def _post(self, path: str, form: dict[str, str]) -> Response:
        m = re.fullmatch(r"/admin/orders/(\d+)/status", path)
        if m:
            return self._update_order(int(m.group(1)), form)
        m = re.fullmatch(r"/f/([a-z0-9]+)/submit", path)
        if m:
            return self._create_post(m.group(1), form)
        raise _NotFound

    # ------------------------------------------------------------------------------------ actions
    def _redirect(self, to: str, message: str) -> Response:
        self._flash = (to, message)
        return Response(303, "", to)

    def _update_order(self, eid: int, form: dict[str, str]) -> Response:
        if eid not in self.orders:
            raise _NotFound
        status = form.get("status", "")
        notify = form.get("notify", "no")
        comment = _norm(form.get("comment", ""))
        back = f"/admin/orders/{eid}"
        if status not in STATUSES or notify not in ("yes", "no") or len(comment) > MAX_FIELD:
            return self._redirect(back, "The order was not saved: invalid form data.")
        o = self.orders[eid]
        o.status = status
        o.history.append((NOW, status, comment, notify == "yes"))
        self.mutations.append(("order", eid))
        return self._redirect(back, "You updated the order." + (" The customer was notified." if notify == "yes" else ""))

    def _create_post(self, slug: str, form: dict[str, str]) -> Response:
        if self.world.forum(slug) is None:
            raise _NotFound
        title, body = _norm(form.get("title", "")), _norm(form.get("body", ""))
        action = form.get("action", "publish")
        if not title or not body or len(title) > 300 or len(body) > MAX_FIELD:
            return self._redirect(f"/f/{slug}/submit", "A post needs a title (up to 300 characters) and a body.")
        published = action == "publish" or not self.world.drafts
        post = Post(len(self.posts) + 1, slug, title, body, USER, published)
        self.posts.append(post)
        self.mutations.append(("post", post.id))
        msg = "Your post is live." if published else "Draft saved. Only you can see it until it is published."
        return self._redirect(f"/f/{slug}/{post.id}", msg)

    # ------------------------------------------------------------------------------------ pages
    def _page(self, title: str, body: str, path: str) -> str:
        flash = ""
        if self._flash and self._flash[0] == path:
            flash = f'<div id="flash" role="alert">{_e(self._flash[1])}</div>'
            self._flash = None
        area = "Forum" if path.startswith(("/forum", "/f/")) else "Shop Admin"
        nav = (
            '<nav><a id="nav-home" href="/">Home</a> <a id="nav-orders" href="/admin/orders">Orders</a> '
            '<a id="nav-customers" href="/admin/customers">Customers</a> <a id="nav-forum" href="/forum">Forum</a> '
            f"<span>Signed in as {USER}</span></nav>"
        )
        return (
            f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)} | {area}</title></head>'
            f"<body>{nav}<main>{flash}{body}</main></body></html>"
        )

    def _home(self) -> tuple[str, str]:
        return "Home", (
            "<h1>Welcome</h1><ul>"
            '<li><a id="home-admin" href="/admin">Shop admin</a>: orders and customers</li>'
            '<li><a id="home-forum" href="/forum">Community forum</a></li></ul>'
        )

    def _dashboard(self) -> tuple[str, str]:
        counts = Counter(o.status for o in self.orders.values())
        rows = "".join(f"<tr><td>{_e(STATUSES[s])}</td><td>{counts[s]}</td></tr>" for s in STATUSES)
        return "Dashboard", (
            "<h1>Dashboard</h1>"
            f"<p>{len(self.orders)} orders, {len(self.world.customers)} customers.</p>"
            f"<table><tr><th>Status</th><th>Orders</th></tr>{rows}</table>"
        )

    def _order_row(self, o: Order) -> str:
        c = self.world.customer(o.customer_id)
        return (
            f"<tr><td>{o.number}</td><td>{o.placed}</td><td>{_e(c.name if c else '?')}</td>"
            f"<td>{money(o.total)}</td><td>{_e(STATUSES[self.orders[o.eid].status])}</td>"
            f'<td><a id="order-{o.eid}-view" href="/admin/orders/{o.eid}">View</a></td></tr>'
        )

    def _orders(self, q: str) -> tuple[str, str]:
        rows = [o for o in sorted(self.world.orders, key=lambda o: o.placed, reverse=True)]
        if q.strip():
            needle = q.strip().lower().lstrip("#")
            rows = [
                o for o in rows
                if needle in o.number or needle in (self.world.customer(o.customer_id) or _NOBODY).name.lower()
            ]
        return "Orders", (
            "<h1>Orders</h1>"
            '<form id="orders-filter" method="get" action="/admin/orders">'
            f'<div><label for="orders-search">Search by order # or name</label><input id="orders-search" name="q" type="text" value="{_e(q)}"></div>'
            '<div><button id="orders-search-submit" type="submit">Search</button></div></form>'
            f"<p>{len(rows)} records found.</p>"
            "<table><tr><th>Order #</th><th>Purchase date</th><th>Bill-to name</th><th>Grand total</th>"
            f"<th>Status</th><th>Action</th></tr>{''.join(self._order_row(o) for o in rows)}</table>"
        )

    def _order(self, eid: str) -> tuple[str, str]:
        o = self.world.order(int(eid))
        if o is None:
            raise _NotFound
        st = self.orders[o.eid]
        c = self.world.customer(o.customer_id) or _NOBODY
        items = "".join(
            f"<tr><td>{sku}</td><td>{_e(name)}</td><td>{q}</td><td>{money(p)}</td><td>{money(q * p)}</td></tr>"
            for sku, name, q, p in o.items
        )
        history = "".join(
            f"<li>{when} | {_e(STATUSES[s])} | {_e(text) or '(no comment)'} | "
            f"{'customer notified' if notified else 'customer not notified'}</li>"
            for when, s, text, notified in st.history
        )
        opts = "".join(
            f'<option value="{k}"{" selected" if k == st.status else ""}>{_e(v)}</option>' for k, v in STATUSES.items()
        )
        return f"Order # {o.number}", (
            f"<h1>Order # {o.number}</h1>"
            f"<p>Placed {o.placed}. Status: {_e(STATUSES[st.status])}.</p>"
            f'<p>Customer: <a id="order-customer" href="/admin/customers/{c.id}">{_e(c.name)}</a> ({_e(c.email)})</p>'
            "<h2>Items ordered</h2>"
            "<table><tr><th>SKU</th><th>Product</th><th>Qty</th><th>Price</th><th>Row total</th></tr>"
            f"{items}</table>"
            f"<p>Subtotal {money(o.total - o.shipping)}; shipping {money(o.shipping)}; grand total {money(o.total)}.</p>"
            f"<h2>Status history</h2><ul>{history}</ul>"
            "<h2>Update status</h2>"
            f'<form id="order-status-form" method="post" action="/admin/orders/{o.eid}/status">'
            f'<div><label for="order-status">Status</label><select id="order-status" name="status">{opts}</select></div>'
            '<div><label for="notify-customer">Notify customer by email</label>'
            '<select id="notify-customer" name="notify"><option value="no" selected>No</option>'
            '<option value="yes">Yes</option></select></div>'
            '<div><label for="status-comment">Comment</label><textarea id="status-comment" name="comment"></textarea></div>'
            '<div><button id="save-order" type="submit">Save</button></div></form>'
        )

    def _customers(self, q: str) -> tuple[str, str]:
        rows = list(self.world.customers)
        if q.strip():
            needle = q.strip().lower()
            rows = [c for c in rows if needle in c.name.lower() or needle in c.email.lower()]
        n_orders = {c.id: 0 for c in self.world.customers}
        for o in self.world.orders:
            n_orders[o.customer_id] += 1
        body = "".join(
            f"<tr><td>{c.id}</td><td>{_e(c.name)}</td><td>{_e(c.email)}</td><td>{n_orders[c.id]}</td>"
            f'<td><a id="customer-{c.id}-view" href="/admin/customers/{c.id}">View</a></td></tr>'
            for c in rows
        )
        return "Customers", (
            "<h1>Customers</h1>"
            '<form id="customers-filter" method="get" action="/admin/customers">'
            f'<div><label for="customers-search">Search by name or email</label><input id="customers-search" name="q" type="text" value="{_e(q)}"></div>'
            '<div><button id="customers-search-submit" type="submit">Search</button></div></form>'
            f"<p>{len(rows)} records found.</p>"
            f"<table><tr><th>ID</th><th>Name</th><th>Email</th><th>Orders</th><th>Action</th></tr>{body}</table>"
        )

    def _customer(self, cid: str) -> tuple[str, str]:
        c = self.world.customer(int(cid))
        if c is None:
            raise _NotFound
        mine = sorted((o for o in self.world.orders if o.customer_id == c.id), key=lambda o: o.placed, reverse=True)
        rows = "".join(
            f"<tr><td>{o.number}</td><td>{o.placed}</td><td>{_e(STATUSES[self.orders[o.eid].status])}</td>"
            f'<td>{money(o.total)}</td><td><a id="order-{o.eid}-view" href="/admin/orders/{o.eid}">View</a></td></tr>'
            for o in mine
        )
        return f"Customer {c.name}", (
            f"<h1>{_e(c.name)}</h1><p>Customer ID {c.id}. Email: {_e(c.email)}.</p>"
            f"<h2>Orders ({len(mine)})</h2>"
            f"<table><tr><th>Order #</th><th>Purchase date</th><th>Status</th><th>Grand total</th><th>Action</th></tr>{rows}</table>"
        )

    def _forums(self) -> tuple[str, str]:
        counts = Counter(p.forum for p in self.posts if p.published)
        rows = "".join(
            f'<tr><td><a id="forum-{f.slug}" href="/f/{f.slug}">{_e(f.name)}</a></td><td>{_e(f.description)}</td>'
            f'<td>{counts.get(f.slug, 0)}</td><td><a id="forum-{f.slug}-new" href="/f/{f.slug}/submit">New post</a></td></tr>'
            for f in self.world.forums
        )
        return "Forums", (
            "<h1>Forums</h1>"
            f"<table><tr><th>Forum</th><th>Description</th><th>Posts</th><th>Action</th></tr>{rows}</table>"
        )

    def _forum(self, slug: str) -> tuple[str, str]:
        f = self.world.forum(slug)
        if f is None:
            raise _NotFound
        mine = [p for p in self.posts if p.forum == slug and (p.published or p.author == USER)]
        items = "".join(
            f'<li><a id="post-{p.id}" href="/f/{slug}/{p.id}">{_e(p.title)}</a> by {_e(p.author)}'
            f"{'' if p.published else ' (draft)'}</li>"
            for p in reversed(mine)
        )
        return f.name, (
            f"<h1>{_e(f.name)}</h1><p>{_e(f.description)}</p>"
            f'<p><a id="new-post" href="/f/{slug}/submit">New post</a></p><ul>{items}</ul>'
        )

    def _submit_form(self, slug: str) -> tuple[str, str]:
        f = self.world.forum(slug)
        if f is None:
            raise _NotFound
        buttons = (
            '<button id="save-post" type="submit" name="action" value="draft">Save</button>'
            '<button id="publish-post" type="submit" name="action" value="publish">Publish</button>'
            if self.world.drafts
            else '<button id="publish-post" type="submit" name="action" value="publish">Publish</button>'
        )
        return f"New post in {f.name}", (
            f"<h1>New post in {_e(f.name)}</h1>"
            f'<form id="post-form" method="post" action="/f/{slug}/submit">'
            '<div><label for="post-title">Title</label><input id="post-title" name="title" type="text" value=""></div>'
            '<div><label for="post-body">Body</label><textarea id="post-body" name="body"></textarea></div>'
            f"<div>{buttons}</div></form>"
        )

    def _post_page(self, slug: str, pid: str) -> tuple[str, str]:
        p = next((p for p in self.posts if p.id == int(pid) and p.forum == slug), None)
        if p is None or (not p.published and p.author != USER):
            raise _NotFound
        f = self.world.forum(slug)
        state = "" if p.published else "<p>Draft: only you can see this post.</p>"
        return p.title, (
            f"<h1>{_e(p.title)}</h1>{state}"
            f'<p>Posted by {_e(p.author)} in <a id="post-forum" href="/f/{slug}">{_e(f.name if f else slug)}</a></p>'
            f"<p>{_e(p.body)}</p>"
        )


class _NotFound(Exception):
    pass


class _Nobody:
    id = 0
    name = "?"
    email = "?"


_NOBODY: Any = _Nobody()


def _norm(s: str) -> str:
    return s.replace("\r\n", "\n").replace("\r", "\n").strip() if isinstance(s, str) else ""
