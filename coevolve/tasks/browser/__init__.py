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

from coevolve.tasks.base import Concept, Constraint, DomainFact, Knowledge, PlanStep, TaskEnv, TaskFamily
from coevolve.tasks.browser.backends import ChromiumBrowser, chromium_available
from coevolve.tasks.browser.checker import check, final_state
from coevolve.tasks.browser.env import HELPER_TOOLS, TOOLS, BrowserEnv
from coevolve.tasks.browser.plan import plan
from coevolve.tasks.browser.world import BrowserWorld, build_world, money
from coevolve.values import Outcome, TaskInstance, ToolSpec

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
            reversals=(
                # the admin URL takes the order number
                Concept(
                    (
                        ("order number", "order #", "order no", "increment id", "number the customer",
                         "number customers", "quoted number", "customer-facing number", "number quoted"),
                        ("url", "/admin/orders/", "link", "address", "path"),
                        ("same", "equal", "is the id", "matches", "match", "identical", "use", "put", "type",
                         "build", "plug", "insert", "append", "directly", "followed by", "plus the",
                         "with the order number"),
                    ),
                    unless=("differ", "not the same", "internal", "entity id", "view link", "grid"),
                ),
                # the URL has no internal id
                Concept((
                    ("url", "/admin/orders/", "link", "address"),
                    ("not use an internal", "not use the internal", "doesn't use an internal",
                     "doesn't use the internal", "not use an entity", "not use the entity",
                     "doesn't use an entity", "doesn't use the entity", "no internal id", "no entity id",
                     "not the internal id", "not the entity id", "isn't the internal", "isn't the entity",
                     "is not the internal", "is not the entity"),
                )),
            ),
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
            reversals=(
                # a refunded order is canceled
                Concept((
                    ("refund", "money back", "reimburs", "credit memo"),
                    ("the status canceled", "the status cancelled", "as canceled", "to canceled",
                     "is canceled", "are canceled", "be canceled", "status to canceled", "as cancelled",
                     "to cancelled", "is cancelled", "are cancelled", "be cancelled", "cancel it",
                     "cancel the order", "cancel them", "cancel refunded", "cancel a refunded",
                     "cancel fully", "cancel any"),
                )),
                # a refunded order is not closed
                Concept((
                    ("refund", "money back", "reimburs", "credit memo"),
                    ("not closed", "never closed", "shouldn't be closed", "should not be closed",
                     "isn't closed", "don't close", "do not close", "never close", "not be closed",
                     "stays open", "remain open", "keep it open", "stay open", "leave it open"),
                )),
            ),
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
            reversals=(
                # a customer is found by name
                Concept(
                    (
                        ("identify", "identifies", "match", "pick", "choose", "select", "is enough",
                         "suffic", "assume", "unique", "right one", "right customer", "correct customer",
                         "go by", "recogni", "find", "look up"),
                        ("by name", "by their name", "by the name", "by full name", "by customer name",
                         "by the customer's name", "by names", "on the name", "on name", "names are unique",
                         "name is unique", "names are distinct", "name alone", "matching name",
                         "with the name", "with that name", "the first customer", "first match",
                         "first result"),
                    ),
                    unless=("email", "e-mail"),
                ),
                # the email address is not needed
                Concept(
                    (
                        ("email", "e-mail"),
                        ("don't need", "do not need", "doesn't need", "does not need", "not needed",
                         "isn't needed", "unnecessary", "no need", "irrelevant", "optional",
                         "doesn't matter", "does not matter"),
                        ("customer", "identify", "find", "match"),
                    ),
                    unless=("name",),
                ),
            ),
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
            reversals=(
                # Save makes the post live
                Concept((
                    ("save", "saving", "saved"),
                    ("live", "public", "publish", "visible", "posted", "goes out", "everyone can see",
                     "appears", "online"),
                    ("right away", "immediately", "makes", "enough", "suffic", "is all", "at once",
                     "directly", "same as", "equivalent", "instantly"),
                )),
                # a saved post is not a private draft
                Concept((
                    ("save", "saving", "saved"),
                    ("not leave it", "doesn't leave it", "does not leave it", "not a draft",
                     "not a private draft", "isn't a draft", "isn't a private", "no draft",
                     "not stay private", "not remain private", "doesn't stay private",
                     "doesn't remain private", "not hidden", "isn't hidden"),
                )),
            ),
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
            reversals=(
                # numbers in plain form
                Concept(
                    (
                        ("strip", "drop", "remove", "without the currency", "without the dollar",
                         "without the $", "without a currency", "without currency", "without dollar",
                         "without commas", "without the comma", "without separators",
                         "without the separator", "without thousands", "leave out", "omit", "no currency",
                         "no dollar", "no comma", "no thousands", "plain", "bare", "raw number",
                         "just the number", "only the number", "only digits", "digits only", "numeric only",
                         "reformat", "normaliz", "normalis", "round"),
                        ("currency", "dollar", "$", "symbol", "comma", "separator", "decimal", "cents",
                         "number", "digits"),
                    ),
                    unless=("exact", "as shown", "verbatim", "as displayed", "as it appears"),
                ),
                # answers are compared loosely
                Concept((
                    ("answer", "value", "result"),
                    ("not compared exactly", "compared loosely", "loosely", "approximately", "roughly",
                     "close enough", "format doesn't matter", "format does not matter",
                     "formatting doesn't matter", "formatting does not matter", "any format",
                     "whatever format", "need not be exact", "needn't be exact", "don't need to be exact",
                     "doesn't need to be exact", "not be exact", "not exactly", "isn't exact",
                     "aren't exact"),
                )),
            ),
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
            reversals=(
                # the notification stays off
                Concept(
                    (
                        ("notif",),
                        ("to no", "set to no", "leave it at no", "leave at no", "option at no", "box at no",
                         "setting at no", "left at no", "stays at no", "stay at no", "remain at no",
                         "keep it at no", "as no", "= no", "'no'", "\"no\"", "off", "unchecked", "untick",
                         "disabled", "disable", "turned off", "switched off", "never notify",
                         "don't notify", "do not notify", "not notify", "no notification",
                         "skip the notification", "without notifying", "without notification"),
                    ),
                    unless=("yes",),
                ),
            ),
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

    def optional_tools(self) -> tuple[ToolSpec, ...]:
        """Helper tools the environment offers beside the baseline's (domain computation over data the base
        tools expose); an `add_tool` edit naming one adds it to a harness (`coevolve.tasks.helpers`)."""
        return HELPER_TOOLS

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
