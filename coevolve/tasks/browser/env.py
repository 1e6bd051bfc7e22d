"""The browser tools (goto, read_page, click, type, select, submit, answer) over either backend.

Every tool validates its arguments against the current page's DOM before acting, and the same code
runs for both backends, so errors and observations do not depend on the backend.
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urljoin, urlsplit

from coevolve.errors import BadInput
from coevolve.tasks.base import FINISH_TOOL, TaskEnv, ToolArgError
from coevolve.tasks.browser.app import WebApp
from coevolve.tasks.browser.backends import ChromiumBrowser, Session, TextSession, path_of, shared_chromium
from coevolve.tasks.browser.dom import (
    Node,
    default_button,
    describe,
    is_submit,
    kind,
    labels,
    option_value,
    options,
    render_tree,
)
from coevolve.tasks.browser.world import STATUSES, BrowserWorld, money
from coevolve.tasks.tools import Param, tool_specs
from coevolve.values import TaskInstance, ToolSpec

MAX_URL = 2000
MAX_TEXT = 5000
MAX_ANSWER = 1000
LOCAL_HOSTS = ("127.0.0.1", "localhost", "app", "")
NonEmpty = Annotated[str, Param(minLength=1)]
Element = Annotated[NonEmpty, Param(description="an element id as read_page shows it after '#'")]


class BrowserEnv(TaskEnv):
    def __init__(self, instance: TaskInstance, world: BrowserWorld, backend: str = "text",
                 browser: ChromiumBrowser | None = None):
        super().__init__(instance)
        self.world = world
        self.app = WebApp(world)
        self.answer: str | None = None
        self.backend = backend
        if backend == "text":
            self.session: Session = TextSession(self.app)
        elif backend == "chromium":
            self.session = (browser or shared_chromium()).session(self.app)
            # each of these waits on the browser's loop (ChromiumBrowser.call); answer/finish do not
            self.blocking_tools = SESSION_TOOLS
        else:
            raise BadInput(f"unknown browser backend {backend!r} (text, chromium)")

    def tool_specs(self) -> tuple[ToolSpec, ...]:
        return (*TOOLS, FINISH_TOOL, *HELPER_TOOLS)

    def close(self) -> None:
        self.session.close()

    # ------------------------------------------------------------------------------ helpers
    def _dom(self) -> Node:
        return self.session.dom()

    def _element(self, element: Any) -> tuple[Node, Node]:
        if not isinstance(element, str) or not element.strip() or len(element) > 200:
            raise ToolArgError("element must be an element id from read_page, e.g. 'save-order'")
        element = element.strip().lstrip("#")
        root = self._dom()
        node = root.by_id(element)
        if node is None:
            raise ToolArgError(
                f"no element with id {element!r} on this page ({self.session.url}); call read_page to see the ids"
            )
        return root, node

    def _where(self, what: str) -> str:
        root = self._dom()
        title = root.find("title")
        out = f"{what} -> now at {self.session.url} (status {self.session.status}): {title.text() if title else ''}"
        alert = next((n for n in root.iter() if n.attrs.get("role") == "alert"), None)
        if alert is not None:
            out += f"\nalert: {alert.text()}"
        return out

    def _act(self, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except ToolArgError:
            raise
        except Exception as e:  # noqa: BLE001 - a browser-side failure (timeout, detached element) is an observation
            raise ToolArgError(f"the browser could not do that: {type(e).__name__}: {str(e)[:300]}") from None

    # ------------------------------------------------------------------------------ tools
    def tool_goto(self, url: NonEmpty) -> str:
        """Open a page of the web application by path, e.g. /admin/orders."""
        if not isinstance(url, str) or not url.strip() or len(url) > MAX_URL:
            raise ToolArgError("url must be a path such as /admin/orders (or a full URL of this application)")
        parts = urlsplit(url.strip())
        if parts.scheme not in ("", "http", "https"):
            raise ToolArgError(f"cannot open {parts.scheme!r} URLs; use a path such as /admin/orders")
        if (parts.hostname or "") not in LOCAL_HOSTS:
            raise ToolArgError(f"cannot reach {parts.hostname}: only this application is reachable (use paths)")
        target = path_of(urljoin("http://app" + self.session.url, path_of(url.strip())))
        self._act(self.session.navigate, target)
        return self._where(f"goto {target}")

    def tool_read_page(self) -> str:
        """Read the current page as a text accessibility tree. Actionable elements appear as
        [role "name" #id ...]; use the id with click, type, select and submit."""
        return render_tree(self._dom(), self.session.url, self.session.status)

    def tool_click(self, element: Element) -> str:
        """Click an element (link, button, checkbox) by id."""
        root, node = self._element(element)
        role = kind(node)
        name = describe(node, labels(root))
        eid = node.attrs["id"]
        if role == "link":
            self._act(self.session.follow, eid, node.attrs["href"])
            return self._where(f"clicked {name}")
        if role == "button":
            form = node.form()
            if not is_submit(node) or form is None:
                return f"clicked {name}; nothing happened"
            if not form.attrs.get("id"):
                raise ToolArgError("this button's form cannot be submitted")
            self._act(self.session.click_submit, eid)
            return self._where(f"clicked {name}, submitted form #{form.attrs['id']}")
        if role in ("checkbox", "radio"):
            self._act(self.session.toggle, eid)
            return f"clicked {describe(self._dom().by_id(eid) or node, labels(root))}"
        if role == "textbox":
            raise ToolArgError(f"#{eid} is a textbox; use type to enter text")
        if role == "combobox":
            raise ToolArgError(f"#{eid} is a combobox; use select to choose an option")
        raise ToolArgError(f"#{eid} is not clickable (a <{node.tag}> element)")

    def tool_type(self, element: Element, text: str) -> str:
        """Replace the text of a textbox by id."""
        if not isinstance(text, str) or len(text) > MAX_TEXT:
            raise ToolArgError(f"text must be a string of at most {MAX_TEXT} characters")
        root, node = self._element(element)
        if kind(node) != "textbox":
            raise ToolArgError(f"#{node.attrs['id']} is not a textbox (it is {kind(node) or node.tag})")
        eid = node.attrs["id"]
        self._act(self.session.fill, eid, text)
        return f"typed {len(text)} characters into {describe(self._dom().by_id(eid) or node, labels(root))}"

    def tool_select(self, element: Element, option: NonEmpty) -> str:
        """Choose an option (by value or visible label) in a combobox by id."""
        if not isinstance(option, str) or not option.strip() or len(option) > 300:
            raise ToolArgError("option must be an option value or its visible label")
        _root, node = self._element(element)
        if kind(node) != "combobox":
            raise ToolArgError(f"#{node.attrs['id']} is not a combobox (it is {kind(node) or node.tag})")
        opts = options(node)
        want = option.strip()
        match = next((o for o in opts if option_value(o) == want or o.text() == want), None)
        if match is None:
            match = next((o for o in opts if want.lower() in (option_value(o).lower(), o.text().lower())), None)
        if match is None:
            listed = ", ".join(f"{option_value(o)} ({o.text()})" for o in opts)
            raise ToolArgError(f"no option {want!r} in #{node.attrs['id']}; options: {listed}")
        eid = node.attrs["id"]
        self._act(self.session.choose, eid, option_value(match))
        return f"selected {option_value(match)!r} ({match.text()}) in #{eid}"

    def tool_submit(self, form: Element) -> str:
        """Submit a form by id, as pressing Enter in it would (with its default button)."""
        _, node = self._element(form)
        f = node if node.tag == "form" else node.form()
        if f is None or not f.attrs.get("id"):
            raise ToolArgError(f"#{node.attrs['id']} is not a form or inside one")
        button = default_button(f)
        self._act(self.session.submit, f.attrs["id"], button.attrs.get("id") if button is not None else None)
        via = f" with its default button {button.text()!r}" if button is not None else ""
        return self._where(f"submitted form #{f.attrs['id']}{via}")

    def tool_answer(self, answer: NonEmpty) -> str:
        """Give the answer to a question the task asks. The last answer counts."""
        if not isinstance(answer, str) or not answer.strip() or len(answer) > MAX_ANSWER:
            raise ToolArgError(f"answer must be a non-empty string of at most {MAX_ANSWER} characters")
        self.answer = answer.strip()
        return f"answer recorded: {self.answer}"

    # ------------------------------------------------------------------------------ helper tools
    # Not in the baseline harness. They read what the admin's grids and pages show (the application's
    # current state), in-process for both backends, and change nothing.
    def tool_find_order(self, order_number: NonEmpty) -> str:
        """Find an order by the order number customers and tasks quote: its entity id and admin page URL,
        date, status, bill-to name and grand total, as the Orders grid shows them."""
        if not isinstance(order_number, str) or not order_number.strip().lstrip("#").isdigit() or len(order_number) > 40:
            raise ToolArgError("order_number must be an order number such as 000000123 or #000000123")
        n = int(order_number.strip().lstrip("#"))
        o = next((x for x in self.world.orders if int(x.number) == n), None)
        if o is None:
            return f"no order has the number {order_number.strip()}"
        c = self.world.customer(o.customer_id)
        return (
            f"order #{o.number}: entity id {o.eid}, admin page /admin/orders/{o.eid}; placed {o.placed}, status "
            f"{STATUSES[self.app.orders[o.eid].status]}, bill-to {c.name if c else '?'}, grand total {money(o.total)}"
        )

    def tool_find_customers(self, query: NonEmpty) -> str:
        """Customers whose name or email contains the query: id, name, email, admin page URL and number of
        orders, as the Customers grid shows them."""
        if not isinstance(query, str) or not query.strip() or len(query) > 200:
            raise ToolArgError("query must be a name or email (or part of one)")
        needle = query.strip().lower()
        hits = [c for c in self.world.customers if needle in c.name.lower() or needle in c.email.lower()]
        if not hits:
            return f"no customer's name or email contains {query.strip()[:100]!r}"
        lines = [f"customers matching {query.strip()[:100]!r}: id | name | email | admin page | orders"]
        lines += [
            f"{c.id} | {c.name} | {c.email} | /admin/customers/{c.id} | "
            f"{sum(o.customer_id == c.id for o in self.world.orders)}"
            for c in hits
        ]
        return "\n".join(lines)

    def tool_latest_order(self, customer_id: int) -> str:
        """A customer's most recent order (by purchase date): its number, date, status and grand total
        exactly as the admin shows it."""
        c = self.world.customer(customer_id) if isinstance(customer_id, int) and not isinstance(customer_id, bool) else None
        if c is None:
            raise ToolArgError(f"no customer with id {str(customer_id)[:40]}")
        mine = [o for o in self.world.orders if o.customer_id == c.id]
        if not mine:
            return f"customer {c.id} ({c.name}) has no orders"
        o = max(mine, key=lambda x: x.placed)
        return (
            f"customer {c.id} ({c.name}, {c.email}): most recent of {len(mine)} orders is #{o.number}, placed "
            f"{o.placed}, status {STATUSES[self.app.orders[o.eid].status]}, grand total {money(o.total)}"
        )

    def tool_forum_form(self, forum: NonEmpty) -> str:
        """The URL of the new-post form of a forum, by the forum's name or slug."""
        if not isinstance(forum, str) or not forum.strip() or len(forum) > 200:
            raise ToolArgError("forum must be a forum's name or slug")
        want = forum.strip().lower()
        f = next((x for x in self.world.forums if want in (x.name.lower(), x.slug)), None)
        if f is None:
            raise ToolArgError(f"no forum {forum.strip()[:100]!r} (forums: {', '.join(x.name for x in self.world.forums)})")
        return f"forum {f.name!r}: new-post form at /f/{f.slug}/submit"


SESSION_TOOLS = frozenset({"goto", "read_page", "click", "type", "select", "submit"})
# `required` even when empty, as these schemas were first written (harness ids hash them)
TOOLS = tool_specs(
    BrowserEnv.tool_goto,
    BrowserEnv.tool_read_page,
    BrowserEnv.tool_click,
    BrowserEnv.tool_type,
    BrowserEnv.tool_select,
    BrowserEnv.tool_submit,
    BrowserEnv.tool_answer,
    required_always=True,
)
HELPER_TOOLS = tool_specs(
    BrowserEnv.tool_find_order,
    BrowserEnv.tool_find_customers,
    BrowserEnv.tool_latest_order,
    BrowserEnv.tool_forum_form,
    required_always=True,
)
