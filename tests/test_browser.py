"""Browser family: golden instances (hand-derived final states) with mutations, checker reports per
trap, concepts, tools and pages, and the Chromium backend. The checks every family shares (rules,
handbook) are in test_family_contract.py, the levers (stated facts help, hooks help) in test_families.py."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import pytest

from coevolve.tasks import get_family
from coevolve.tasks.base import Knowledge
from coevolve.tasks.browser import BrowserEnv, BrowserFamily, ChromiumBrowser, chromium_available, final_state
from coevolve.tasks.browser.dom import parse, render_tree
from coevolve.tasks.browser.world import STATUSES, money
from tests.helpers import failed
from tests.rollouts import rollout_all

FAM: BrowserFamily = get_family("browser")  # type: ignore[assignment]
FULL = FAM.full_knowledge()
GOLDEN = json.loads((Path(__file__).resolve().parent.parent / "coevolve" / "tasks" / "browser" / "golden.json").read_text())[
    "instances"
]
WORLD_DIGEST = "1694ea947c868d1f"  # sha256 of the test and first 10 val worlds (reprs), as generated before the split
TRAP_FACT = {"id_offset": "order_entity_id", "refund": "refund_closed", "dup_name": "customer_by_email",
             "drafts": "publish_not_save"}
TRAP_REQUIREMENTS = {
    "id_offset": {"order_status_set", "history_comment_added", "customer_notification", "nothing_else_changed"},
    "refund": {"order_status_set"},
    "dup_name": {"answer_correct"},
    "drafts": {"post_published"},
}


def world(inst):
    return FAM.world(inst.seed, inst.params)


def pool():
    return [i for s in ("train", "val", "test") for i in FAM.generate(s)]


def with_trap(trap: str):
    return next(i for i in pool() if trap in FAM.answer_key(i)["traps"])


def of_kind(kind: str, n: int = 1, split: str = "val"):
    return [i for i in FAM.generate(split) if world(i).kind == kind][:n]


def run(inst, knowledge: Knowledge, env: BrowserEnv | None = None):
    env = env or FAM.make_env(inst)
    for step in FAM.plan(inst, knowledge):
        env.call(step.tool, dict(step.args))
    return FAM.check(env), env


def without_fact(fact: str) -> Knowledge:
    return replace(FULL, facts=FULL.facts - {fact})


def ok(result) -> str:
    assert not result.error, result.content
    return result.content


def env_with_state(inst, state) -> BrowserEnv:
    """A fresh env with a final state written into it through the browser tools, as an agent would."""
    env = FAM.make_env(inst)
    for u in state["order_updates"]:
        ok(env.call("goto", {"url": f"/admin/orders/{u['eid']}"}))
        ok(env.call("select", {"element": "order-status", "option": u["status"]}))
        ok(env.call("select", {"element": "notify-customer", "option": "yes" if u["notified"] else "no"}))
        ok(env.call("type", {"element": "status-comment", "text": u["comment"]}))
        ok(env.call("click", {"element": "save-order"}))
    for p in state["new_posts"]:
        ok(env.call("goto", {"url": f"/f/{p['forum']}/submit"}))
        ok(env.call("type", {"element": "post-title", "text": p["title"]}))
        ok(env.call("type", {"element": "post-body", "text": p["body"]}))
        ok(env.call("click", {"element": "publish-post" if p["published"] else "save-post"}))
    if state["answer"] is not None:
        ok(env.call("answer", {"answer": state["answer"]}))
    assert final_state(env) == state
    return env


# ------------------------------------------------------------------------------ golden instances
@pytest.mark.parametrize("golden", GOLDEN, ids=lambda g: g["id"])
def test_reference_solver_reaches_the_hand_derived_state(golden):
    outcome, env = FAM.reference_solve(FAM.instance(golden["id"]))
    assert final_state(env) == golden["state"]
    assert outcome.passed


def mutations(inst, state) -> dict[str, dict]:
    w = world(inst)
    out: dict[str, dict] = {}
    if state["order_updates"]:
        u = state["order_updates"][0]
        other = next(o for o in w.orders if o.eid != u["eid"])
        out["save dropped"] = {**state, "order_updates": []}
        out["another order saved too"] = {**state, "order_updates": [
            u, {**u, "eid": other.eid, "number": other.number}]}
        out["status altered"] = {**state, "order_updates": [
            {**u, "status": "pending" if u["status"] != "pending" else "processing"}]}
        out["comment altered"] = {**state, "order_updates": [{**u, "comment": u["comment"].rstrip(".")}]}
        out["notification flipped"] = {**state, "order_updates": [{**u, "notified": not u["notified"]}]}
        out["saved twice with notification"] = {**state, "order_updates": [u, {**u, "notified": True}]}
    elif state["new_posts"]:
        p = state["new_posts"][0]
        other = next(f.slug for f in w.forums if f.slug != p["forum"])
        out["post dropped"] = {**state, "new_posts": []}
        out["post doubled"] = {**state, "new_posts": [p, p]}
        out["title altered"] = {**state, "new_posts": [{**p, "title": p["title"] + "!"}]}
        out["body altered"] = {**state, "new_posts": [{**p, "body": p["body"][:-1]}]}
        out["other forum"] = {**state, "new_posts": [{**p, "forum": other}]}
        if w.drafts:
            out["left as a draft"] = {**state, "new_posts": [{**p, "published": False}]}
        o = w.orders[0]
        out["an order saved"] = {**state, "order_updates": [
            {"eid": o.eid, "number": o.number, "status": o.status, "comment": "", "notified": False}]}
    else:
        a = state["answer"]
        o = w.orders[0]
        out["answer dropped"] = {**state, "answer": None}
        out["answer without currency sign"] = {**state, "answer": a.lstrip("$")}
        out["answer off by a cent"] = {**state, "answer": money(round(float(a.strip("$").replace(",", "")) * 100) + 1)}
        out["an order saved"] = {**state, "order_updates": [
            {"eid": o.eid, "number": o.number, "status": o.status, "comment": "", "notified": False}]}
    return out


@pytest.mark.parametrize("golden", GOLDEN, ids=lambda g: g["id"])
def test_checker_accepts_the_golden_state_and_rejects_each_mutation(golden):
    inst = FAM.instance(golden["id"])
    assert FAM.check(env_with_state(inst, golden["state"])).passed
    cases = mutations(inst, golden["state"])
    assert len(cases) >= 4
    for what, state in cases.items():
        outcome = FAM.check(env_with_state(inst, state))
        assert not outcome.passed and outcome.score == 0.0, what
        assert failed(outcome) and all(failed(outcome).values()), (what, outcome.detail)


def test_golden_instances_cover_every_kind_and_trap():
    kinds = {world(FAM.instance(g["id"])).kind for g in GOLDEN}
    traps = {t for g in GOLDEN for t in FAM.answer_key(FAM.instance(g["id"]))["traps"]}
    assert kinds == {"status", "answer", "forum"}
    assert traps >= {"id_offset", "refund", "notify", "dup_name", "drafts"}


# ------------------------------------------------------------------------------ checker reports
@pytest.mark.parametrize("trap", sorted(TRAP_FACT))
def test_each_trap_fails_without_its_fact_with_a_graders_reason(trap):
    insts = [i for i in pool() if trap in FAM.answer_key(i)["traps"]]
    assert len(insts) >= 5
    for inst in insts:
        assert run(inst, FULL)[0].passed
        outcome, _ = run(inst, without_fact(TRAP_FACT[trap]))
        assert not outcome.passed and outcome.score == 0.0, (inst.id, outcome.detail)
        reasons = failed(outcome)
        assert set(reasons) <= TRAP_REQUIREMENTS[trap] and all(reasons.values()), (inst.id, reasons)
        report = json.dumps(outcome.detail)
        assert trap not in report and "trap" not in report  # no generator labels in the report
        w = world(inst)
        if w.kind == "answer":  # never the expected answer
            assert money(w.last_order(w.customer_id).total) not in report
        if w.kind == "status" and trap == "refund":  # never the expected status
            assert STATUSES[w.new_status] not in report and w.new_status not in report


def test_answer_format_fact_matters():
    inst = of_kind("answer")[0]
    outcome, env = run(inst, without_fact("answer_as_shown"))
    assert not outcome.passed and env.answer and not env.answer.startswith("$")
    assert set(failed(outcome)) == {"answer_correct"} and repr(env.answer) in failed(outcome)["answer_correct"]


def test_notify_constraint_matters():
    inst = with_trap("notify")
    outcome, _ = run(inst, replace(FULL, constraints=frozenset()))
    assert not outcome.passed
    assert set(failed(outcome)) == {"customer_notification"}
    assert "not notified" in failed(outcome)["customer_notification"]


def test_facts_only_matter_where_their_trap_is():
    for inst in FAM.generate("val"):
        traps = set(FAM.answer_key(inst)["traps"])
        if not traps & set(TRAP_FACT) and world(inst).kind != "answer":
            plan_full = FAM.plan(inst, FULL)
            plan_common = FAM.plan(inst, Knowledge(frozenset({"answer_as_shown"}), FULL.constraints))
            assert [s.args for s in plan_full] == [s.args for s in plan_common], inst.id


def test_wrong_order_id_changes_another_order_and_the_report_names_it():
    inst = with_trap("id_offset")
    outcome, env = run(inst, without_fact("order_entity_id"))
    w = world(inst)
    saved = [u["eid"] for u in final_state(env)["order_updates"]]
    assert saved and w.target_eid not in saved
    assert env.app.orders[w.target_eid].status == w.order(w.target_eid).status
    wrong = w.order(saved[0])
    assert f"#{wrong.number}" in failed(outcome)["nothing_else_changed"]
    assert "never saved" in failed(outcome)["order_status_set"]


def test_status_checker_mutations():
    inst = next(i for i in of_kind("status", 10) if world(i).notify is False)
    w = world(inst)
    base = f"/admin/orders/{w.target_eid}"

    def save(env, eid, status, comment, notify="no"):
        env.call("goto", {"url": f"/admin/orders/{eid}"})
        env.call("select", {"element": "order-status", "option": status})
        env.call("select", {"element": "notify-customer", "option": notify})
        env.call("type", {"element": "status-comment", "text": comment})
        return env.call("click", {"element": "save-order"})

    env = FAM.make_env(inst)
    assert "You updated the order" in save(env, w.target_eid, w.new_status, w.comment).content
    assert FAM.check(env).passed
    cases = {
        "wrong status": (lambda e: save(e, w.target_eid, "pending", w.comment), "order_status_set"),
        "no comment": (lambda e: save(e, w.target_eid, w.new_status, ""), "history_comment_added"),
        "notified unasked": (lambda e: save(e, w.target_eid, w.new_status, w.comment, "yes"), "customer_notification"),
    }
    for name, (act, req) in cases.items():
        env = FAM.make_env(inst)
        act(env)
        outcome = FAM.check(env)
        assert not outcome.passed and set(failed(outcome)) == {req}, (name, outcome.detail)
    # right change plus a change to another order
    env = FAM.make_env(inst)
    save(env, w.target_eid, w.new_status, w.comment)
    other = next(o for o in w.orders if o.eid != w.target_eid)
    save(env, other.eid, "closed", "oops")
    assert failed(FAM.check(env)) == {"nothing_else_changed": f"orders other than #{w.target_number} were saved: "
                                      f"#{other.number}"}
    # typing without saving changes nothing
    env = FAM.make_env(inst)
    env.call("goto", {"url": base})
    env.call("select", {"element": "order-status", "option": w.new_status})
    env.call("type", {"element": "status-comment", "text": w.comment})
    assert set(failed(FAM.check(env))) == {"order_status_set", "history_comment_added"}


def test_answer_checker_mutations():
    inst = of_kind("answer")[0]
    w = world(inst)
    right = money(w.last_order(w.customer_id).total)
    env = FAM.make_env(inst)
    env.call("answer", {"answer": right})
    assert FAM.check(env).passed
    wrongs = (right.replace("$", ""), right + "0",
              money(min(o.total for o in w.orders if o.customer_id == w.customer_id) - 1))
    for wrong in wrongs:
        env = FAM.make_env(inst)
        env.call("answer", {"answer": wrong})
        outcome = FAM.check(env)
        assert not outcome.passed and set(failed(outcome)) == {"answer_correct"}, wrong
        assert repr(right) not in json.dumps(outcome.detail)  # its own answer is quoted, never the right one
    env = FAM.make_env(inst)  # the last answer counts
    env.call("answer", {"answer": right})
    env.call("answer", {"answer": "no idea"})
    assert not FAM.check(env).passed
    env = FAM.make_env(inst)  # no answer at all
    assert set(failed(FAM.check(env))) == {"answer_given"}
    env = FAM.make_env(inst)  # right answer, but the agent changed the shop
    env.call("answer", {"answer": right})
    o = w.orders[0]
    env.call("goto", {"url": f"/admin/orders/{o.eid}"})
    env.call("click", {"element": "save-order"})
    assert failed(FAM.check(env)) == {"nothing_changed": "the task only asks for information, but the application "
                                      f"was changed: orders were saved: #{o.number}"}


def test_forum_checker_mutations():
    inst = of_kind("forum")[0]
    w = world(inst)

    def post(env, slug, title, body, button="publish-post"):
        env.call("goto", {"url": f"/f/{slug}/submit"})
        env.call("type", {"element": "post-title", "text": title})
        env.call("type", {"element": "post-body", "text": body})
        return env.call("click", {"element": button})

    env = FAM.make_env(inst)
    post(env, w.forum_slug, w.title, w.body)
    assert FAM.check(env).passed
    other = next(f for f in w.forums if f.slug != w.forum_slug)
    for name, act, req in (
        ("twice", lambda e: (post(e, w.forum_slug, w.title, w.body), post(e, w.forum_slug, w.title, w.body)),
         "single_post"),
        ("wrong forum", lambda e: post(e, other.slug, w.title, w.body), "post_created"),
        ("wrong title", lambda e: post(e, w.forum_slug, w.title + "!", w.body), "post_title_and_body"),
        ("wrong body", lambda e: post(e, w.forum_slug, w.title, w.body[:-1]), "post_title_and_body"),
    ):
        env = FAM.make_env(inst)
        act(env)
        outcome = FAM.check(env)
        assert not outcome.passed and req in failed(outcome), (name, outcome.detail)
    env = FAM.make_env(inst)
    post(env, other.slug, w.title, w.body)
    assert other.name in failed(FAM.check(env))["post_created"]  # the agent's own post, named


def test_implicit_submission_uses_the_first_button():
    inst = with_trap("drafts")
    w = world(inst)
    env = FAM.make_env(inst)
    env.call("goto", {"url": f"/f/{w.forum_slug}/submit"})
    env.call("type", {"element": "post-title", "text": w.title})
    env.call("type", {"element": "post-body", "text": w.body})
    out = env.call("submit", {"form": "post-form"})
    outcome = FAM.check(env)
    assert "Draft saved" in out.content and not outcome.passed
    assert set(failed(outcome)) == {"post_published"} and "draft" in failed(outcome)["post_published"]


def test_empty_and_finish_only_score_zero():
    for inst in FAM.generate("val", 15):
        env = FAM.make_env(inst)
        outcome = FAM.check(env)
        assert outcome.score == 0.0 and failed(outcome) and all(failed(outcome).values())
        env.call("finish", {})
        assert not FAM.check(env).passed


def test_reports_never_carry_generator_labels():
    labels = {"traps", "id_offset", "dup_name", "impostor", "injected"}
    for inst in FAM.generate("val"):
        for k in (FULL, Knowledge(frozenset(), frozenset()), replace(FULL, cut=frozenset({1}))):
            report = json.dumps(run(inst, k)[0].detail)
            assert not any(label in report for label in labels), (inst.id, report)


# ------------------------------------------------------------------------------ concepts and handbook
PARAPHRASES = {
    "order_entity_id": "Don't type the order number into the URL: the id there is internal, so open the order "
                       "from the grid's View link instead.",
    "refund_closed": "If the money went back to the customer in a full refund, mark the order Closed rather "
                     "than Canceled.",
    "customer_by_email": "Two customers can share the same name, so always look them up by their email.",
    "publish_not_save": "Posts stay private drafts until you press Publish.",
    "answer_as_shown": "Copy the total exactly as the admin displays it, including the dollar sign.",
    "notify_customer": "If the task asks you to notify the customer, set the notification dropdown to Yes.",
}
LONE_KEYWORDS = (
    "Order numbers have nine digits.", "Closed orders cannot be refunded again.", "Search by name or email.",
    "Drafts are listed with (draft) after the title.", "Give the exact order number.",
    "The order form has a 'Notify customer by email' field, which is No by default.",
    "In the grid, the order number is plain text, not a link.", "Customers are listed with their name and email.",
    "Published posts appear in the forum list.",
    "Order statuses: Pending, Processing, On Hold, Complete, Canceled and Closed.",
)


def test_concepts_recognise_statements_and_paraphrases_not_lone_keywords():
    items = (*FAM.facts, *FAM.constraints)
    assert {x.id for x in items} == set(PARAPHRASES)
    for x in items:
        assert x.stated_in(x.statement), x.id
        assert x.stated_in(PARAPHRASES[x.id]), x.id
        for text in LONE_KEYWORDS:
            assert not x.stated_in(text), (x.id, text)


# ------------------------------------------------------------------------------ tools and pages
def test_world_generation_is_pinned():
    """Worlds are a pure function of (seed, params), unchanged by the package split."""
    digest = hashlib.sha256()
    for inst in FAM.generate("test") + FAM.generate("val", 10):
        digest.update(repr(world(inst)).encode())
    assert digest.hexdigest()[:16] == WORLD_DIGEST



def test_element_ids_are_stable_and_computable():
    inst = of_kind("status")[0]
    w = world(inst)
    env = FAM.make_env(inst)
    env.call("goto", {"url": "/admin/orders"})
    a, b = env.call("read_page", {}).content, env.call("read_page", {}).content
    assert a == b and f"#order-{w.target_eid}-view href=/admin/orders/{w.target_eid}" in a
    env.call("click", {"element": f"order-{w.target_eid}-view"})
    page = env.call("read_page", {}).content
    for eid in ("order-status", "notify-customer", "status-comment", "save-order"):
        assert f"#{eid}" in page
    env.call("type", {"element": "status-comment", "text": 'say "hi"\nthere'})
    assert 'value="say \\"hi\\"\\nthere"' in env.call("read_page", {}).content


def test_tool_errors_are_observations():
    inst = of_kind("status")[0]
    env = FAM.make_env(inst)
    env.call("goto", {"url": "/admin/orders"})
    for tool, args in [
        ("click", {"element": "nope"}),
        ("type", {"element": "nav-orders", "text": "x"}),
        ("select", {"element": "orders-search", "option": "x"}),
        ("goto", {"url": "https://example.com/"}),
        ("goto", {"url": "javascript:alert(1)"}),
        ("submit", {"form": "nav-home"}),
        ("answer", {"answer": "  "}),
        ("read_page", {"verbose": True}),
    ]:
        r = env.call(tool, args)
        assert r.error and r.content.startswith("error"), (tool, r.content)
    assert env.call("goto", {"url": "/nowhere"}).content.endswith("Not found | Shop Admin")
    env.call("goto", {"url": f"/admin/orders/{world(inst).target_eid}"})
    r = env.call("select", {"element": "order-status", "option": "shipped"})
    assert r.error and "holded (On Hold)" in r.content
    assert not env.call("select", {"element": "order-status", "option": "On Hold"}).error


def test_parser_round_trip_of_escapes():
    html = '<html><head><title>A &amp; B</title></head><body><p>x &lt; y</p><textarea id="t">a&amp;b</textarea></body></html>'
    tree = render_tree(parse(html), "/", 200)
    assert 'page "A & B"' in tree and "x < y" in tree and 'value="a&b"' in tree


# ---------------------------------------------------------------------------------------- Chromium
needs_chromium = pytest.mark.skipif(
    not chromium_available(), reason="needs Debian chromium and the playwright package (make test installs them)"
)


@pytest.fixture(scope="module")
def chromium():
    b = ChromiumBrowser()
    yield b
    b.close()


def chromium_instances():
    out = of_kind("status", 2) + of_kind("answer", 1) + of_kind("forum", 1)
    return out + [with_trap("drafts"), with_trap("dup_name"), with_trap("id_offset")]


@needs_chromium
def test_chromium_passes_the_same_instances_as_the_text_browser(chromium):
    for inst in chromium_instances():
        text, real = FAM.make_env(inst), FAM.make_env(inst, backend="chromium", browser=chromium)
        try:
            for step in FAM.plan(inst, FULL):
                a, b = text.call(step.tool, dict(step.args)), real.call(step.tool, dict(step.args))
                assert a.content == b.content, (inst.id, step.tool)
            assert FAM.check(text).passed and FAM.check(real).passed, inst.id
            assert final_state(text) == final_state(real)
        finally:
            real.close()


@needs_chromium
def test_chromium_reaches_a_golden_state(chromium):
    golden = next(g for g in GOLDEN if g["state"]["order_updates"])
    inst = FAM.instance(golden["id"])
    env = FAM.make_env(inst, backend="chromium", browser=chromium)
    try:
        assert FAM.solve_in(inst, env).passed
        assert final_state(env) == golden["state"]
    finally:
        env.close()


@needs_chromium
def test_chromium_wrong_branches_fail_like_the_text_browser(chromium):
    for trap, fact in (("drafts", "publish_not_save"), ("id_offset", "order_entity_id")):
        inst = with_trap(trap)
        env = FAM.make_env(inst, backend="chromium", browser=chromium)
        try:
            outcome, _ = run(inst, without_fact(fact), env)
            assert not outcome.passed
            assert outcome.detail == run(inst, without_fact(fact))[0].detail
        finally:
            env.close()


@needs_chromium
def test_chromium_errors_and_implicit_submit(chromium):
    inst = with_trap("drafts")
    w = world(inst)
    env = FAM.make_env(inst, backend="chromium", browser=chromium)
    try:
        assert env.call("click", {"element": "nope"}).error
        assert env.call("goto", {"url": "https://example.com/"}).error
        env.call("goto", {"url": f"/f/{w.forum_slug}/submit"})
        env.call("type", {"element": "post-title", "text": w.title})
        env.call("type", {"element": "post-body", "text": "two\nlines & <b>"})
        assert 'value="two\\nlines & <b>"' in env.call("read_page", {}).content
        assert "Draft saved" in env.call("submit", {"form": "post-form"}).content
        assert env.app.posts[-1].body == "two\nlines & <b>" and not env.app.posts[-1].published
    finally:
        env.close()


@needs_chromium
def test_executor_rollouts_through_chromium(chromium, monkeypatch):
    """The async executor drives a Chromium env (Playwright runs in the browser's own thread), and a
    seeded rollout sees the same pages, so it ends as it does in the text browser."""
    insts = of_kind("status", 1) + of_kind("forum", 1)
    text = rollout_all(insts, FAM.baseline_harness(), "synthetic/expert", concurrency=2)
    monkeypatch.setattr(FAM, "make_env", lambda inst: BrowserFamily.make_env(FAM, inst, "chromium", chromium))
    real = rollout_all(insts, FAM.baseline_harness(), "synthetic/expert", concurrency=2)
    assert all(t.error != "infra" and t.outcome is not None for t in real), [t.error_detail for t in real]
    assert [t.outcome for t in real] == [t.outcome for t in text]
    assert [t.messages for t in real] == [t.messages for t in text]
