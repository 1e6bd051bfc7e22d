"""Browser automation (WebArena-style): a shop admin and a forum served as real HTML, driven through
browser tools (goto, read_page, click, type, select, submit) plus an answer tool.

Task kinds: change an order's status (with a history comment, sometimes notifying the customer),
find a customer's most recent order total (answered exactly as the admin shows it), create a post in
a forum. The checker reads the application's state (orders, posts) or the recorded answer.

The package: `world` (generation), `app` (the web application), `dom` (HTML parsing and the text
accessibility tree), `backends` (the text browser and Chromium), `env` (the tools), `plan` (the
reference solution as steps), `checker` (the grader), `handbook.md` (the domain documentation).

Two backends behind the same tools: an in-process text browser (default) and a real headless
Chromium driven by Playwright against the app served on 127.0.0.1
(`make_env(instance, backend="chromium")`, or `COEVOLVE_BROWSER_BACKEND=chromium`).
"""

from __future__ import annotations

import os
from typing import Any

from harness_store.values import Outcome, TaskInstance, ToolSpec
from tasks.base import Concept, Constraint, DomainFact, Knowledge, PlanStep, TaskEnv, TaskFamily
from tasks.browser.backends import ChromiumBrowser, chromium_available
from tasks.browser.checker import check, final_state
from tasks.browser.env import TOOLS, BrowserEnv
from tasks.browser.plan import plan
from tasks.browser.world import BrowserWorld, build_world, money

__all__ = ["BrowserEnv", "BrowserFamily", "BrowserWorld", "ChromiumBrowser", "chromium_available", "final_state",
           "money"]

BACKEND_ENV = "COEVOLVE_BROWSER_BACKEND"
STATUS_TEXT = {
    "holded": "Put order #{n} on hold in the shop admin",
    "complete": "Order #{n} has been delivered: set its status to Complete in the shop admin",
    "canceled": "Order #{n} was never paid: cancel it (status Canceled) in the shop admin",
    "closed": "Order #{n} was refunded in full today: update its status in the shop admin accordingly",
}


class BrowserFamily(TaskFamily):
    name = "browser"
    title = "browser automation (shop admin and forum web apps)"
    facts = (
        DomainFact(
            "order_entity_id",
            "Admin order URLs use the internal entity id (/admin/orders/<entity id>), which is not the order "
            "number (#000000123) that customers and tasks quote: find the order's row in the Orders grid and "
            "use its View link.",
            Concept((
                ("order number", "order #", "order no", "order's number", "increment id", "number the customer",
                 "number customers", "customer-facing number", "quoted number", "reference number"),
                ("entity id", "internal id", "internal number", "database id", "record id", "url", "view link",
                 "admin link", "order link", "in the link", "href", "web address", "page address", "address bar",
                 "path", "/admin/orders/"),
                ("not the", "is not", "isn't", "are not", "aren't", "never", "differ", "not the same", "distinct",
                 "separate", "unrelated", "do not match", "does not match", "don't match", "doesn't match",
                 "not equal", "rather than", "instead", "not derived", "cannot be", "can't be", "do not use",
                 "don't use", "never use", "not to be confused", "offset", "run ahead", "won't", "will not",
                 "doesn't work", "does not work", "wrong", "≠", "!="),
            )),
        ),
        DomainFact(
            "refund_closed",
            "A fully refunded order gets the status Closed; Canceled is only for orders that were never paid.",
            Concept((
                ("refund", "money back", "money was returned", "money is returned", "credit memo", "reimburs",
                 "paid back", "repaid"),
                ("closed", "close", "closing"),
                ("status", "cancel", "mark", "set", "becom", "get", "move", "change", "switch", "choose", "select",
                 "pick", "put", "use", "is closed", "are closed", "goes to", "go to", "mean", "must", "should",
                 "belong", "count as", "counts as", "treat", "->", "→", "=>", "="),
            )),
        ),
        DomainFact(
            "customer_by_email",
            "Customer names are not unique: identify a customer by email address, never by name alone.",
            Concept((
                ("name", "namesake", "homonym"),
                ("email", "e-mail", "mail address"),
                ("unique", "non-unique", "distinguish", "tell apart", "tell them apart", "duplicate", "same name",
                 "share", "shared", "alone", "by itself", "ambiguous", "collide", "clash", "repeat",
                 "more than one", "several customers", "two customers", "never by", "not by", "rather than",
                 "instead", "not enough", "distinct", "not guaranteed", "identical", "coincide", "go by", "identify by", "identified by", "identify them by", "identify a customer by",
                 "identify customers by", "identify the customer by", "identifies the customer",
                 "identifies a customer"),
            )),
        ),
        DomainFact(
            "publish_not_save",
            "In the forum editor, Save only stores a private draft; a post goes live only with Publish.",
            Concept((
                ("draft", "private", "unpublished", "not public", "only you can see", "only the author",
                 "only its author", "hidden", "invisible", "not visible"),
                ("publish", "go live", "goes live", "went live", "is live", "public", "visible to everyone",
                 "visible to all", "everyone can see"),
                ("save", "button", "click", "press", "hit", "until", "unless", "only with", "only by",
                 "only when", "only after", "only once", "submit", "enter key", "pressing enter"),
            )),
            rare=True,
        ),
        DomainFact(
            "answer_as_shown",
            "Answers are compared exactly: give a value exactly as the page shows it (e.g. $1,234.50, with "
            "the currency sign and thousands separator).",
            Concept((
                ("answer", "value", "total", "amount", "figure", "price", "sum", "number", "result", "reply",
                 "respon"),
                ("exact", "verbatim", "as shown", "as the page shows", "as displayed", "as it appears",
                 "as it is shown", "as-is", "character for character", "unchanged", "same format",
                 "without reformatting", "do not reformat", "don't reformat", "not reformat", "copy"),
                ("currency", "dollar", "$", "format", "separator", "comma", "sign", "page", "shown", "shows",
                 "display", "appear", "screen", "decimal", "cents", "symbol", "admin"),
            )),
            common=True,
        ),
    )
    constraints = (
        Constraint(
            "notify_customer",
            "When the task asks to notify the customer, set 'Notify customer by email' to Yes when saving.",
            Concept((
                ("notif", "inform", "tell the customer", "let the customer know", "message the customer",
                 "send an email", "send the customer an email", "email notification", "emailed about",
                 "email about the change", "email them"),
                ("customer", "buyer", "shopper", "client"),
                ("yes", "ask", "when the task", "if the task", "when a task", "if a task", "whenever the task",
                 "when the request", "if the request", "when a request", "if a request", "request", "must",
                 "always", "do not forget", "don't forget", "remember", "make sure", "be sure", "required",
                 "instruct", "says so", "calls for", "turn on", "switch on", "switch it to", "switch to", "enable"),
            )),
        ),
    )

    # ------------------------------------------------------------------------------ generation
    def build_world(self, seed: int, params: dict[str, Any]) -> BrowserWorld:
        return build_world(seed, params)

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
        backend = backend or os.environ.get(BACKEND_ENV, "text")
        return BrowserEnv(instance, self.world(instance.seed, instance.params), backend, browser)

    def baseline_tools(self) -> tuple[ToolSpec, ...]:
        return TOOLS

    # ------------------------------------------------------------------------------ solution
    def plan(self, instance: TaskInstance, knowledge: Knowledge) -> list[PlanStep]:
        return plan(self.world(instance.seed, instance.params), knowledge)

    def solve_in(self, instance: TaskInstance, env: TaskEnv) -> Outcome:
        """Run the full-knowledge plan in a given environment (e.g. a Chromium one) and check it."""
        impl = {t.name: t.impl for t in env.tool_specs()}
        for step in self.plan(instance, self.full_knowledge()):
            result = env.call(impl.get(step.tool, step.tool), dict(step.args))
            if result.error:
                raise AssertionError(f"reference step {step.tool} failed on {instance.id}: {result.content}")
        return self.check(env)

    # ------------------------------------------------------------------------------ checker
    def check(self, env: TaskEnv) -> Outcome:
        assert isinstance(env, BrowserEnv)
        return check(env)
