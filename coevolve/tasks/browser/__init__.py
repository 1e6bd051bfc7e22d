"""Browser automation (WebArena-style): a shop admin and a forum served as real HTML, driven through
browser tools (goto, read_page, click, type, select, submit) plus an answer tool.

Task kinds: change an order's status (with a history comment, sometimes notifying the customer),
find a customer's most recent order total (answered exactly as the admin shows it), create a post in
a forum. The checker reads the application's state (orders, posts) or the recorded answer.

Beside the modules every family has (`coevolve.tasks`): `app` (the web application), `dom` (HTML
parsing and the text accessibility tree), `backends` (the text browser and Chromium).

Two backends behind the same tools: an in-process text browser (default) and a real headless
Chromium driven by Playwright against the app served on 127.0.0.1
(`make_env(instance, backend="chromium")`, or `COEVOLVE_BROWSER_BACKEND=chromium`).
"""

from __future__ import annotations

from coevolve.settings import environment
from coevolve.tasks.base import TaskEnv, TaskFamily
from coevolve.tasks.browser.backends import ChromiumBrowser, chromium_available
from coevolve.tasks.browser.checker import check, final_state
from coevolve.tasks.browser.env import HELPER_TOOLS, TOOLS, BrowserEnv
from coevolve.tasks.browser.plan import plan
from coevolve.tasks.browser.world import BrowserWorld, build_world
from coevolve.values import Outcome, TaskInstance

__all__ = ["BrowserEnv", "BrowserFamily", "ChromiumBrowser", "chromium_available", "final_state"]

STATUS_TEXT = {
    "holded": "Put order #{n} on hold in the shop admin",
    "complete": "Order #{n} has been delivered: set its status to Complete in the shop admin",
    "canceled": "Order #{n} was never paid: cancel it (status Canceled) in the shop admin",
    "closed": "Order #{n} was refunded in full today: update its status in the shop admin accordingly",
}


class BrowserFamily(TaskFamily):
    name = "browser"
    title = "browser automation (shop admin and forum web apps)"
    build_world = staticmethod(build_world)
    env_type = BrowserEnv
    base_tools = TOOLS
    helper_tools = HELPER_TOOLS
    planner = staticmethod(plan)

    def instruction(self, world: BrowserWorld, instance_id: str) -> str:
        w = world
        if w.kind == "status":
            text = STATUS_TEXT[w.new_status].format(n=w.target_number)
            text += f", and add the comment \"{w.comment}\" to the order's status history"
            if w.notify:
                text += "; notify the customer by email about the change"
            return text + ". Then call finish."
        if w.kind == "answer":
            c = w.customer(w.customer_id)
            assert c is not None
            return (
                f"In the shop admin, find the grand total of the most recent order placed by the customer "
                f"{c.name} ({c.email}). Give it with the answer tool, then call finish."
            )
        f = w.forum(w.forum_slug)
        assert f is not None
        return (
            f"Create a new post in the \"{f.name}\" forum with the title \"{w.title}\" and the body "
            f"\"{w.body}\". Then call finish."
        )

    def make_env(self, instance: TaskInstance, backend: str | None = None,
                 browser: ChromiumBrowser | None = None) -> BrowserEnv:
        backend = backend or environment().browser_backend or "text"
        return BrowserEnv(instance, self.world(instance.seed, instance.params), backend, browser)

    def check(self, env: TaskEnv) -> Outcome:
        assert isinstance(env, BrowserEnv)
        return check(env)
