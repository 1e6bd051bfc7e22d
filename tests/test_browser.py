"""The browser-automation family: checker mutations, traps, harness recipes, and the Chromium backend."""

from __future__ import annotations

from dataclasses import replace

import pytest

from harness_store.edits import apply_edit
from harness_store.values import AddRecipe, HarnessEdit, Recipe
from tasks import get_family
from tasks.base import Knowledge
from tasks.browser import BrowserEnv, BrowserFamily, ChromiumBrowser, chromium_available
from tasks.browser.dom import parse, render_tree
from tasks.browser.world import money
from tests.rollouts import pass_rate, rollout_all

FAM: BrowserFamily = get_family("browser")  # type: ignore[assignment]
FULL = FAM.full_knowledge()


def world(inst):
    return FAM.world(inst.seed, inst.params)


def pool():
    return [i for s in ("train", "val", "test") for i in FAM.generate(s)]


def with_trap(trap: str):
    return next(i for i in pool() if trap in world(i).traps)


def of_kind(kind: str, n: int = 1, split: str = "val"):
    return [i for i in FAM.generate(split) if world(i).kind == kind][:n]


def run(inst, knowledge: Knowledge, env: BrowserEnv | None = None):
    env = env or FAM.make_env(inst)
    for step in FAM.plan(inst, knowledge):
        env.call(step.tool, dict(step.args))
    return FAM.check(env), env


def without_fact(fact: str) -> Knowledge:
    return replace(FULL, facts=FULL.facts - {fact})


# ------------------------------------------------------------------------------------------ traps
@pytest.mark.parametrize(
    "trap,fact",
    [("id_offset", "order_entity_id"), ("refund", "refund_closed"), ("dup_name", "customer_by_email"),
     ("drafts", "publish_not_save")],
)
def test_each_trap_fails_without_its_fact(trap, fact):
    insts = [i for i in pool() if trap in world(i).traps]
    assert len(insts) >= 5
    for inst in insts:
        assert run(inst, FULL)[0].passed
        outcome, _ = run(inst, without_fact(fact))
        assert not outcome.passed and outcome.score == 0.0, (inst.id, outcome.detail)


def test_answer_format_fact_matters():
    inst = of_kind("answer")[0]
    outcome, env = run(inst, without_fact("answer_as_shown"))
    assert not outcome.passed and env.answer and not env.answer.startswith("$")


def test_notify_constraint_matters():
    inst = with_trap("notify")
    outcome, _ = run(inst, replace(FULL, constraints=frozenset()))
    assert not outcome.passed and "notified 0" in " ".join(outcome.detail["problems"])


def test_facts_only_matter_where_their_trap_is():
    for inst in FAM.generate("val"):
        traps = set(world(inst).traps)
        if not traps & {"id_offset", "refund", "dup_name", "drafts"} and world(inst).kind != "answer":
            plan_full = FAM.plan(inst, FULL)
            plan_common = FAM.plan(inst, Knowledge(frozenset({"answer_as_shown"}), FULL.constraints))
            assert [s.args for s in plan_full] == [s.args for s in plan_common], inst.id


def test_wrong_order_id_changes_another_order():
    inst = with_trap("id_offset")
    outcome, env = run(inst, without_fact("order_entity_id"))
    w = world(inst)
    assert outcome.detail["orders_changed"] and w.target_eid not in outcome.detail["orders_changed"]
    assert env.app.orders[w.target_eid].status == w.order(w.target_eid).status


# ------------------------------------------------------------------------------ checker mutations
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
        "wrong status": lambda e: save(e, w.target_eid, "pending", w.comment),
        "no comment": lambda e: save(e, w.target_eid, w.new_status, ""),
        "notified unasked": lambda e: save(e, w.target_eid, w.new_status, w.comment, "yes"),
    }
    for name, act in cases.items():
        env = FAM.make_env(inst)
        act(env)
        assert not FAM.check(env).passed, name
    # right change plus a change to another order
    env = FAM.make_env(inst)
    save(env, w.target_eid, w.new_status, w.comment)
    other = next(o.eid for o in w.orders if o.eid != w.target_eid)
    save(env, other, "closed", "oops")
    assert not FAM.check(env).passed
    # typing without saving changes nothing
    env = FAM.make_env(inst)
    env.call("goto", {"url": base})
    env.call("select", {"element": "order-status", "option": w.new_status})
    env.call("type", {"element": "status-comment", "text": w.comment})
    assert not FAM.check(env).passed


def test_answer_checker_mutations():
    inst = of_kind("answer")[0]
    w = world(inst)
    right = money(w.last_order(w.customer_id).total)
    env = FAM.make_env(inst)
    env.call("answer", {"answer": right})
    assert FAM.check(env).passed
    for wrong in (right.replace("$", ""), right + "0", money(min(o.total for o in w.orders if o.customer_id == w.customer_id) - 1)):
        env = FAM.make_env(inst)
        env.call("answer", {"answer": wrong})
        assert not FAM.check(env).passed, wrong
    env = FAM.make_env(inst)  # the last answer counts
    env.call("answer", {"answer": right})
    env.call("answer", {"answer": "no idea"})
    assert not FAM.check(env).passed
    env = FAM.make_env(inst)  # right answer, but the agent changed the shop
    env.call("answer", {"answer": right})
    o = w.orders[0]
    env.call("goto", {"url": f"/admin/orders/{o.eid}"})
    env.call("click", {"element": "save-order"})
    assert not FAM.check(env).passed


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
    other = next(f.slug for f in w.forums if f.slug != w.forum_slug)
    for name, act in {
        "twice": lambda e: (post(e, w.forum_slug, w.title, w.body), post(e, w.forum_slug, w.title, w.body)),
        "wrong forum": lambda e: post(e, other, w.title, w.body),
        "wrong title": lambda e: post(e, w.forum_slug, w.title + "!", w.body),
        "wrong body": lambda e: post(e, w.forum_slug, w.title, w.body[:-1]),
    }.items():
        env = FAM.make_env(inst)
        act(env)
        assert not FAM.check(env).passed, name


def test_implicit_submission_uses_the_first_button():
    inst = with_trap("drafts")
    w = world(inst)
    env = FAM.make_env(inst)
    env.call("goto", {"url": f"/f/{w.forum_slug}/submit"})
    env.call("type", {"element": "post-title", "text": w.title})
    env.call("type", {"element": "post-body", "text": w.body})
    out = env.call("submit", {"form": "post-form"})
    assert "Draft saved" in out.content and not FAM.check(env).passed


def test_empty_and_finish_only_score_zero():
    for inst in FAM.generate("val", 15):
        env = FAM.make_env(inst)
        assert FAM.check(env).score == 0.0
        env.call("finish", {})
        assert not FAM.check(env).passed


# -------------------------------------------------------------------------------- tools and pages
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


# ------------------------------------------------------------------------------ harness recipes
def test_recipe_stating_missing_facts_raises_weak_pass_rate():
    insts = [i for i in FAM.generate("val") if set(world(i).traps) & {"id_offset", "refund", "dup_name", "drafts"}]
    base = FAM.baseline_harness()
    notes = " ".join(f.statement for f in FAM.facts if not f.common)
    better = apply_edit(base, HarnessEdit((AddRecipe(Recipe("web-admin", notes)),), rationale="state the facts"))
    before = pass_rate(rollout_all(insts, base, "synthetic/weak"))
    after = pass_rate(rollout_all(insts, better, "synthetic/weak"))
    assert after > before + 0.2, (before, after)


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
        finally:
            real.close()


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
    """The async executor drives a Chromium env (Playwright runs in the browser's own thread)."""
    insts = of_kind("status", 1) + of_kind("forum", 1)
    monkeypatch.setattr(FAM, "make_env", lambda inst: BrowserFamily.make_env(FAM, inst, "chromium", chromium))
    trajs = rollout_all(insts, FAM.baseline_harness(), "synthetic/expert", concurrency=2)
    assert all(t.passed for t in trajs), [t.outcome for t in trajs]
