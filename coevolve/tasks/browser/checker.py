"""The browser grader: reads the application's state (orders, posts) and the recorded answer, never
the agent's words, and reports per requirement.

Reasons name what is wrong with what the agent did (the orders it saved, the status it set, its posts,
its answer) the way a failing test would; they never name the expected value the agent did not
produce, nor why an instance was built the way it was. The score stays all-or-nothing: a web task
half done (a status set without its comment, a post left in drafts) is not done.
"""

from __future__ import annotations

from typing import Any

from coevolve.tasks.base import Requirement, graded, listing
from coevolve.tasks.browser.env import BrowserEnv
from coevolve.tasks.browser.world import STATUSES, BrowserWorld, money
from coevolve.values import Outcome


def final_state(env: BrowserEnv) -> dict[str, Any]:
    """What the grader reads: each order save (in order), each new post, and the recorded answer."""
    w, app = env.world, env.app
    seen: dict[int, int] = {}
    updates = []
    for what, eid in app.mutations:
        if what != "order":
            continue
        before = w.order(eid)
        assert before is not None
        i = len(before.history) + seen.get(eid, 0)
        seen[eid] = seen.get(eid, 0) + 1
        _, status, comment, notified = app.orders[eid].history[i]
        updates.append({"eid": eid, "number": before.number, "status": status, "comment": comment,
                        "notified": notified})
    posts = [
        {"forum": p.forum, "title": p.title, "body": p.body, "published": p.published}
        for p in app.posts[len(w.posts):]
    ]
    return {"order_updates": updates, "new_posts": posts, "answer": env.answer}


def check(env: BrowserEnv) -> Outcome:
    w = env.world
    state = final_state(env)
    if w.kind == "status":
        reqs = _status_task(env, state)
    elif w.kind == "answer":
        reqs = _answer_task(w, state)
    else:
        reqs = _forum_task(w, state)
    return graded(reqs, 1.0 if all(r.passed for r in reqs) else 0.0)


def _orders_saved(updates: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(f"#{u['number']}" for u in updates))


def _status_task(env: BrowserEnv, state: dict[str, Any]) -> list[Requirement]:
    w = env.world
    n = f"#{w.target_number}"
    mine = [u for u in state["order_updates"] if u["eid"] == w.target_eid]
    others = [u for u in state["order_updates"] if u["eid"] != w.target_eid]
    final = env.app.orders[w.target_eid].status
    if final == w.new_status:
        status_reason = ""
    elif not mine:
        status_reason = f"order {n} was never saved: it still has status {STATUSES[final]}"
    else:
        status_reason = f"order {n} has status {STATUSES[final]}, which is not the status the task calls for"
    if any(u["comment"] == w.comment for u in mine):
        comment_reason = ""
    elif not mine:
        comment_reason = f"the status history of order {n} has no new entry"
    else:
        added = listing([repr(u["comment"]) if u["comment"] else "(no comment)" for u in mine])
        comment_reason = f"no new entry in the status history of order {n} has the task's comment (new entries: {added})"
    notified = sum(1 for u in mine if u["notified"])
    if w.notify and notified == 0:
        notify_reason = f"the customer of order {n} was not notified by email, though the task asks for it"
    elif w.notify and notified > 1:
        notify_reason = f"the customer of order {n} was notified {notified} times; the task asks for one notification"
    elif not w.notify and notified:
        notify_reason = f"the customer of order {n} was notified by email, which the task does not ask for"
    else:
        notify_reason = ""
    extra = []
    if others:
        extra.append(f"orders other than {n} were saved: {listing(_orders_saved(others))}")
    if state["new_posts"]:
        extra.append(f"{len(state['new_posts'])} forum post(s) were created")
    return [
        Requirement("order_status_set", not status_reason, status_reason),
        Requirement("history_comment_added", not comment_reason, comment_reason),
        Requirement("customer_notification", not notify_reason, notify_reason),
        Requirement("nothing_else_changed", not extra, "; ".join(extra)),
    ]


def _answer_task(w: BrowserWorld, state: dict[str, Any]) -> list[Requirement]:
    answer = state["answer"]
    reqs = [Requirement("answer_given", answer is not None,
                        "" if answer is not None else "no answer was recorded (the answer tool was never called)")]
    if answer is not None:
        right = answer == money(w.last_order(w.customer_id).total)
        reqs.append(Requirement(
            "answer_correct", right,
            "" if right else f"the answer {answer!r} does not match the expected grand total (answers are compared "
            "as exact strings)",
        ))
    changed = []
    if state["order_updates"]:
        changed.append(f"orders were saved: {listing(_orders_saved(state['order_updates']))}")
    if state["new_posts"]:
        changed.append(f"{len(state['new_posts'])} forum post(s) were created")
    reqs.append(Requirement(
        "nothing_changed", not changed,
        "the task only asks for information, but the application was changed: " + "; ".join(changed) if changed else "",
    ))
    return reqs


def _forum_task(w: BrowserWorld, state: dict[str, Any]) -> list[Requirement]:
    forum = w.forum(w.forum_slug)
    assert forum is not None
    posts = state["new_posts"]
    here = [p for p in posts if p["forum"] == w.forum_slug]
    names = {f.slug: f.name for f in w.forums}
    if here:
        reqs = [Requirement("post_created", True)]
        post = next((p for p in here if p["published"]), here[0])
        published = post["published"]
        reqs.append(Requirement(
            "post_published", published,
            "" if published else f"the new post {post['title']!r} in {forum.name} is a draft: it was saved but not "
            "published",
        ))
        wrong = [what for what in ("title", "body") if post[what] != getattr(w, what).strip()]
        reqs.append(Requirement(
            "post_title_and_body", not wrong,
            "" if not wrong else "the new post's " + " and ".join(f"{x} {post[x]!r}" for x in wrong)
            + (" differ" if len(wrong) > 1 else " differs") + " from the task's",
        ))
    else:
        elsewhere = sorted({names.get(p["forum"], p["forum"]) for p in posts})
        reqs = [Requirement(
            "post_created", False,
            f"no new post was created in the {forum.name} forum"
            + (f" (new posts went to: {listing(elsewhere)})" if elsewhere else ""),
        )]
    reqs.append(Requirement(
        "single_post", len(posts) <= 1,
        "" if len(posts) <= 1 else f"{len(posts)} new posts were created; the task asks for one",
    ))
    saved = _orders_saved(state["order_updates"])
    reqs.append(Requirement(
        "nothing_else_changed", not saved,
        f"orders were saved, though the task is only about the forum: {listing(saved)}" if saved else "",
    ))
    return reqs
