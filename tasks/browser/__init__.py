"""Browser automation (WebArena-style): a shop admin and a forum served as real HTML, driven through
browser tools (goto, read_page, click, type, select, submit) plus an answer tool.

Task kinds: change an order's status (with a history comment, sometimes notifying the customer),
find a customer's most recent order total (answered exactly as the admin shows it), create a post in
a forum. The checker reads the application's state (orders, posts) or the recorded answer.

Two backends behind the same tools: an in-process text browser (default) and a real headless
Chromium driven by Playwright against the app served on 127.0.0.1
(`make_env(instance, backend="chromium")`, or `COEVOLVE_BROWSER_BACKEND=chromium`).
"""

from __future__ import annotations

import json
import os
from typing import Any

from harness_store.values import Outcome, TaskInstance, ToolSpec
from tasks.base import Constraint, DomainFact, Knowledge, PlanStep, TaskEnv, TaskFamily
from tasks.browser.backends import ChromiumBrowser, chromium_available
from tasks.browser.env import TOOLS, BrowserEnv
from tasks.browser.world import STATUSES, BrowserWorld, make_world, money

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
            ("entity id", "not the order number", "order number is not the id", "use its view link"),
        ),
        DomainFact(
            "refund_closed",
            "A fully refunded order gets the status Closed; Canceled is only for orders that were never paid.",
            ("refunded order gets the status closed", "refunded orders are closed", "closed, not canceled"),
        ),
        DomainFact(
            "customer_by_email",
            "Customer names are not unique: identify a customer by email address, never by name alone.",
            ("names are not unique", "identify a customer by email", "by email address"),
        ),
        DomainFact(
            "publish_not_save",
            "In the forum editor, Save only stores a private draft; a post goes live only with Publish.",
            ("save only stores a private draft", "goes live only with publish", "click publish"),
        ),
        DomainFact(
            "answer_as_shown",
            "Answers are compared exactly: give a value exactly as the page shows it (e.g. $1,234.50, with "
            "the currency sign and thousands separator).",
            ("exactly as the page shows", "as shown on the page", "currency sign"),
            common=True,
        ),
    )
    constraints = (
        Constraint(
            "notify_customer",
            "When the task asks to notify the customer, set 'Notify customer by email' to Yes when saving.",
            ("notify the customer", "notify customer by email", "set notify"),
        ),
    )

    # ------------------------------------------------------------------------------ generation
    def world(self, seed: int, params: dict[str, Any]) -> BrowserWorld:
        return make_world(seed, json.dumps(params, sort_keys=True))

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
        w = self.world(instance.seed, instance.params)
        facts, cut = knowledge.facts, knowledge.cut
        if w.kind == "status":
            # not knowing (or not having seen the grid): the order number taken for the id
            eid = w.target_eid if "order_entity_id" in facts and 1 not in cut else int(w.target_number)
            status = "canceled" if w.refund and "refund_closed" not in facts else w.new_status
            notify = "yes" if w.notify and "notify_customer" in knowledge.constraints else "no"
            return [
                PlanStep("goto", {"url": "/admin/orders"}),
                PlanStep("read_page", {}),
                PlanStep("goto", {"url": f"/admin/orders/{eid}"}, facts=("order_entity_id",), uses=(1,)),
                PlanStep("read_page", {}),
                PlanStep("select", {"element": "order-status", "option": status}, facts=("refund_closed",)),
                PlanStep("select", {"element": "notify-customer", "option": notify},
                         constraint="notify_customer" if w.notify else None),
                PlanStep("type", {"element": "status-comment", "text": w.comment}),
                PlanStep("click", {"element": "save-order"}),
                PlanStep("finish", {"summary": f"order #{w.target_number} set to {STATUSES[w.new_status]}"}),
            ]
        if w.kind == "answer":
            c = w.customer(w.customer_id)
            assert c is not None
            if 1 in cut:  # the grid was not seen: a guessed URL
                url = f"/admin/customers/{c.email.split('@')[0]}"
                cid = 0
            else:
                cid = c.id if "customer_by_email" in facts else min(x.id for x in w.customers if x.name == c.name)
                url = f"/admin/customers/{cid}"
            if 3 in cut or cid == 0:
                answer = "unknown"
            else:
                total = w.last_order(cid).total
                answer = money(total) if "answer_as_shown" in facts else f"{total / 100:g}"
            return [
                PlanStep("goto", {"url": "/admin/customers"}),
                PlanStep("read_page", {}),
                PlanStep("goto", {"url": url}, facts=("customer_by_email",), uses=(1,)),
                PlanStep("read_page", {}),
                PlanStep("answer", {"answer": answer}, facts=("customer_by_email", "answer_as_shown"), uses=(3,)),
                PlanStep("finish", {"summary": "answered"}),
            ]
        f = w.forum(w.forum_slug)
        assert f is not None
        slug = f.slug if 1 not in cut else f.name.lower().replace(" ", "-")
        button = "publish-post" if "publish_not_save" in facts or not w.drafts else "save-post"
        return [
            PlanStep("goto", {"url": "/forum"}),
            PlanStep("read_page", {}),
            PlanStep("goto", {"url": f"/f/{slug}/submit"}, uses=(1,)),
            PlanStep("read_page", {}),
            PlanStep("type", {"element": "post-title", "text": w.title}),
            PlanStep("type", {"element": "post-body", "text": w.body}),
            PlanStep("click", {"element": button}, facts=("publish_not_save",)),
            PlanStep("finish", {"summary": f"posted in {f.name}"}),
        ]

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
        w, app = env.world, env.app
        order_changes = sorted({eid for k, eid in app.mutations if k == "order"})
        new_posts = app.posts[len(w.posts):]
        detail: dict[str, Any] = {"kind": w.kind, "traps": list(w.traps), "orders_changed": order_changes,
                                  "posts_created": len(new_posts)}
        problems: list[str] = []
        if w.kind == "status":
            o, before = app.orders[w.target_eid], w.order(w.target_eid)
            assert before is not None
            added = o.history[len(before.history):]
            notified = sum(1 for *_, n in added if n)
            if o.status != w.new_status:
                problems.append(f"status is {o.status!r}, want {w.new_status!r}")
            if not any(c == w.comment for _, _, c, _ in added):
                problems.append("the comment is not in the order's history")
            if notified != (1 if w.notify else 0):
                problems.append(f"customer notified {notified} time(s), want {1 if w.notify else 0}")
            if set(order_changes) - {w.target_eid}:
                problems.append("other orders were changed")
            if new_posts:
                problems.append("forum posts were created")
        elif w.kind == "answer":
            want = money(w.last_order(w.customer_id).total)
            detail["answer"] = env.answer
            if env.answer != want:
                problems.append(f"answer {env.answer!r} is not the expected value")
            if app.mutations:
                problems.append("the application was changed")
        else:
            mine = [p for p in new_posts if p.forum == w.forum_slug and p.published]
            if len(new_posts) != 1 or len(mine) != 1:
                problems.append(f"{len(new_posts)} new post(s), {len(mine)} published in {w.forum_slug}; want exactly 1")
            elif mine[0].title != w.title.strip() or mine[0].body != w.body.strip():
                problems.append("the post's title or body differs from the task's")
            if order_changes:
                problems.append("orders were changed")
        detail["problems"] = problems
        passed = not problems
        return Outcome(passed, 1.0 if passed else 0.0, detail)


__all__ = ["BrowserEnv", "BrowserFamily", "ChromiumBrowser", "chromium_available"]
