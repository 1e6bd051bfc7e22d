"""The browser solution as a plan of steps, and the decisions an agent with some knowledge makes.

Each task kind is one fixed sequence of browser tools; knowledge only changes the arguments: which
order page is opened, which status is chosen, whether the customer is notified, which customer's page
is read, how the answer is written, which editor button is pressed.
"""

from __future__ import annotations

from coevolve.tasks.base import Knowledge, PlanStep
from coevolve.tasks.browser.world import STATUSES, BrowserWorld, money


def order_page_eid(w: BrowserWorld, k: Knowledge) -> int:
    """The entity id in the order URL; without the fact (or the grid) the order number is taken for it."""
    return w.target_eid if "order_entity_id" in k.facts and 1 not in k.cut else int(w.target_number)


def chosen_status(w: BrowserWorld, k: Knowledge) -> str:
    """The status set on the order; a refund is taken for a cancellation without the fact."""
    return "canceled" if w.refund and "refund_closed" not in k.facts else w.new_status


def notify_option(w: BrowserWorld, k: Knowledge) -> str:
    return "yes" if w.notify and "notify_customer" in k.constraints else "no"


def customer_page(w: BrowserWorld, k: Knowledge) -> tuple[str, int]:
    """The customer page opened and the customer it shows (0: a guessed URL that shows nobody)."""
    c = w.customer(w.customer_id)
    assert c is not None
    if 1 in k.cut:  # the grid was not seen: a guessed URL
        return f"/admin/customers/{c.email.split('@')[0]}", 0
    cid = c.id if "customer_by_email" in k.facts else min(x.id for x in w.customers if x.name == c.name)
    return f"/admin/customers/{cid}", cid


def answer_text(w: BrowserWorld, k: Knowledge, cid: int) -> str:
    """The grand total of the customer's most recent order, written as the agent would write it."""
    if 3 in k.cut or cid == 0:
        return "unknown"
    total = w.last_order(cid).total
    return money(total) if "answer_as_shown" in k.facts else f"{total / 100:g}"


def editor_button(w: BrowserWorld, k: Knowledge) -> str:
    return "publish-post" if "publish_not_save" in k.facts or not w.drafts else "save-post"


def plan(w: BrowserWorld, k: Knowledge) -> list[PlanStep]:
    if w.kind == "status":
        return [
            PlanStep("goto", {"url": "/admin/orders"}),
            PlanStep("read_page", {}),
            PlanStep("goto", {"url": f"/admin/orders/{order_page_eid(w, k)}"}, facts=("order_entity_id",), uses=(1,)),
            PlanStep("read_page", {}),
            PlanStep("select", {"element": "order-status", "option": chosen_status(w, k)}, facts=("refund_closed",)),
            PlanStep("select", {"element": "notify-customer", "option": notify_option(w, k)},
                     constraint="notify_customer" if w.notify else None),
            PlanStep("type", {"element": "status-comment", "text": w.comment}),
            PlanStep("click", {"element": "save-order"}),
            PlanStep("finish", {"summary": f"order #{w.target_number} set to {STATUSES[w.new_status]}"}),
        ]
    if w.kind == "answer":
        url, cid = customer_page(w, k)
        return [
            PlanStep("goto", {"url": "/admin/customers"}),
            PlanStep("read_page", {}),
            PlanStep("goto", {"url": url}, facts=("customer_by_email",), uses=(1,)),
            PlanStep("read_page", {}),
            PlanStep("answer", {"answer": answer_text(w, k, cid)}, facts=("customer_by_email", "answer_as_shown"),
                     uses=(3,)),
            PlanStep("finish", {"summary": "answered"}),
        ]
    f = w.forum(w.forum_slug)
    assert f is not None
    slug = f.slug if 1 not in k.cut else f.name.lower().replace(" ", "-")
    return [
        PlanStep("goto", {"url": "/forum"}),
        PlanStep("read_page", {}),
        PlanStep("goto", {"url": f"/f/{slug}/submit"}, uses=(1,)),
        PlanStep("read_page", {}),
        PlanStep("type", {"element": "post-title", "text": w.title}),
        PlanStep("type", {"element": "post-body", "text": w.body}),
        PlanStep("click", {"element": editor_button(w, k)}, facts=("publish_not_save",)),
        PlanStep("finish", {"summary": f"posted in {f.name}"}),
    ]
