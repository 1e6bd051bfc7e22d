"""Website management family: checker mutations, trap branches, and a harness edit that helps the weak agent."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from harness_store.edits import apply_edit
from harness_store.values import AddRecipe, HarnessEdit, Recipe
from tasks import get_family
from tasks.base import Knowledge
from tasks.website import WebsiteEnv
from tests.rollouts import pass_rate, rollout_all

FAMILY = get_family("website")
FULL = FAMILY.full_knowledge()
# (kind, trap) -> the fact (or constraint) whose absence must fail the checker
TRAPS = {
    ("rename", "child_pages"): "child_pages",
    ("rename", "redirect_chain"): "resolve_redirects",
    ("rename", "canonical"): "seo_canonical",
    ("links", "redirect_chain"): "resolve_redirects",
    ("links", "draft_duplicate"): "no_drafts",
    ("menu", "redirected_item"): "resolve_redirects",
    ("menu", "draft_duplicate"): "no_drafts",
}


def world(inst):
    return FAMILY.world(inst.seed, inst.params)


def run_plan(inst, knowledge: Knowledge, skip: tuple[str, ...] = ()) -> WebsiteEnv:
    env = FAMILY.make_env(inst)
    for step in FAMILY.plan(inst, knowledge):
        if step.tool in skip:
            continue
        result = env.call(step.tool, dict(step.args))
        assert not result.error or step.tool == "update_page", result.content
    assert isinstance(env, WebsiteEnv)
    return env


def find(kind: str, trap: str | None = None, n: int = 3) -> list:
    found = []
    for split in ("val", "train", "test"):
        for inst in FAMILY.generate(split, difficulty=3):
            w = world(inst)
            if w.kind == kind and (trap is None or trap in w.traps):
                found.append(inst)
                if len(found) == n:
                    return found
    return found


def test_reference_passes_leaves_no_broken_link_and_empty_agent_scores_zero():
    for inst in FAMILY.generate("val", 20):
        outcome, env = FAMILY.reference_solve(inst)
        assert outcome.passed and outcome.score == 1.0
        assert env.broken_links() == []
        empty = FAMILY.check(FAMILY.make_env(inst))
        assert not empty.passed and empty.score == 0.0


def test_every_kind_appears_on_val():
    kinds = {world(i).kind for i in FAMILY.generate("val")}
    assert kinds == {"rename", "links", "menu"}


@pytest.mark.parametrize("kind,trap", sorted(TRAPS))
def test_unknown_fact_fails_where_its_trap_is_present(kind, trap):
    fact = TRAPS[(kind, trap)]
    instances = find(kind, trap)
    assert instances, f"no {kind} instance with trap {trap}"
    for inst in instances:
        outcome = FAMILY.check(run_plan(inst, replace(FULL, facts=FULL.facts - {fact})))
        assert not outcome.passed, (inst.id, trap)
        assert outcome.score < 1.0


def test_302_instead_of_301_fails_every_rename():
    for inst in find("rename"):
        outcome = FAMILY.check(run_plan(inst, replace(FULL, facts=FULL.facts - {"permanent_301"})))
        assert not outcome.passed


def test_skipped_seo_title_constraint_fails():
    instances = find("rename", "seo_title")
    assert instances
    for inst in instances:
        assert not FAMILY.check(run_plan(inst, replace(FULL, constraints=frozenset()))).passed


def test_unknown_facts_are_harmless_without_their_traps():
    for inst in FAMILY.generate("val"):
        w = world(inst)
        needed = {fact for (kind, trap), fact in TRAPS.items() if kind == w.kind and trap in w.traps}
        if w.kind == "rename":
            needed.add("permanent_301")
        k = replace(FULL, facts=needed)
        assert FAMILY.check(run_plan(inst, k)).passed, inst.id


@pytest.mark.parametrize("kind,cut", [("rename", 0), ("links", 0), ("links", 1), ("menu", 0)])
def test_unseen_observation_fails(kind, cut):
    for inst in find(kind):
        assert not FAMILY.check(run_plan(inst, replace(FULL, cut=frozenset({cut})))).passed


def test_redirect_without_link_updates_leaves_broken_links():
    for inst in find("rename"):
        env = run_plan(inst, FULL, skip=("replace_links",))
        outcome = FAMILY.check(env)
        assert not outcome.passed and 0 < outcome.score < 1
        assert outcome.detail["broken_links"]


def test_collateral_change_fails():
    inst = find("rename", n=1)[0]
    env = run_plan(inst, FULL)
    other = next(pid for pid in env.pages if pid != world(inst).rename_id)
    env.call("update_page", {"page_id": other, "title": "Something else"})
    assert not FAMILY.check(env).passed
    env = run_plan(inst, FULL)
    historic = min(env.redirects)
    env.call("delete_redirect", {"from_path": historic})
    assert not FAMILY.check(env).passed


def test_menu_reordering_outside_the_request_fails():
    inst = find("menu", n=1)[0]
    env = run_plan(inst, FULL)
    items = env.menus["main"]
    env.call("set_menu", {"menu": "main", "items": [items[-1], *items[:-1]]})
    assert not FAMILY.check(env).passed


def test_fixing_links_by_hand_is_as_good_as_replace_links():
    """The checker reads the CMS state, not which tool produced it."""
    inst = find("links", n=1)[0]
    changes = FAMILY.plan(inst, FULL)[3].args["changes"]
    env = FAMILY.make_env(inst)
    for pid, page in list(env.pages.items()):
        body = page["body"]
        for ch in changes:
            body = re.sub(r"\]\(" + re.escape(ch["old"]) + r"\)", f"]({ch['new']})", body)
        if body != page["body"]:
            assert not env.call("update_page", {"page_id": pid, "body": body}).error
    assert FAMILY.check(env).passed


def test_bad_arguments_give_error_observations():
    env = FAMILY.make_env(FAMILY.instance_at("val", 0))
    for tool, args in [
        ("get_page", {"path": "/no-such-page"}),
        ("update_page", {"page_id": 99999, "title": "x"}),
        ("update_page", {"page_id": 1, "slug": "Not A Slug"}),
        ("save_redirects", {"redirects": [{"from": "/a", "to": "/a"}]}),
        ("save_redirects", {"redirects": [{"from": "/a", "to": "/b", "code": 307}]}),
        ("replace_links", {"changes": [{"old": "/a"}]}),
        (
            "set_menu",
            {
                "menu": "main",
                "items": [
                    {
                        "label": "x",
                        "target": "/x",
                        "children": [
                            {"label": "y", "target": "/y", "children": [{"label": "z", "target": "/z"}]}
                        ],
                    }
                ],
            },
        ),
        ("get_menu", {"menu": "sidebar"}),
        ("list_pages", {"verbose": True}),
    ]:
        result = env.call(tool, args)
        assert result.error and result.content.startswith("error"), (tool, result.content)


def test_stating_missing_facts_raises_weak_pass_rate():
    val = FAMILY.generate("val", 30)  # 30 of 50 keeps the test fast
    base = FAMILY.baseline_harness()
    uncommon = [f for f in FAMILY.facts if not f.common]
    assert all(f.stated_in(f.statement) for f in FAMILY.facts)
    assert all(c.stated_in(c.statement) for c in FAMILY.constraints)
    edit = HarnessEdit(
        ops=tuple(AddRecipe(Recipe(f.id, f.statement)) for f in uncommon),
        rationale="state the CMS rules",
        targets="implicit-knowledge",
    )
    before = pass_rate(rollout_all(val, base, "synthetic/weak"))
    after = pass_rate(rollout_all(val, apply_edit(base, edit), "synthetic/weak"))
    print(f"weak on val[:30]: {before:.2f} -> {after:.2f}")
    assert after > before + 0.05, (before, after)
