"""Website management family: golden instances (hand-derived expected CMS states) with mutations,
checker reports per trap and per requirement, concepts, tools. The checks every family shares (rules,
handbook) are in test_family_contract.py, the levers (stated facts help, hooks help, synthetic pass
rates) in test_families.py."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from coevolve.tasks import get_family
from coevolve.tasks.base import Knowledge
from coevolve.tasks.website import WebsiteEnv
from coevolve.tasks.website.world import LINK
from tests.helpers import failed

FAMILY = get_family("website")
FULL = FAMILY.full_knowledge()
ROOT = Path(__file__).resolve().parent.parent
GOLDEN = json.loads((ROOT / "coevolve" / "tasks" / "website" / "golden.json").read_text())["instances"]
ITEMS = (*FAMILY.facts, *FAMILY.constraints)
# (kind, trap) -> the fact (or constraint) whose absence must fail the checker
TRAPS = {
    ("rename", "child_pages"): "child_pages",
    ("rename", "redirect_chain"): "resolve_redirects",
    ("rename", "stale_canonical"): "seo_canonical",
    ("links", "redirect_chain"): "resolve_redirects",
    ("links", "draft_duplicate"): "no_drafts",
    ("menu", "redirected_item"): "resolve_redirects",
    ("menu", "draft_duplicate"): "no_drafts",
}
# the requirement lines each kind of request reports
REQUIREMENTS = {
    "rename": {"page_renamed", "seo_title", "page_metadata", "redirects", "links_updated"},
    "links": {"reported_links_fixed"},
    "menu": {"menu_as_requested"},
}
SHARED = {"no_broken_links", "nothing_else_changed"}
# generator labels must never reach a report
LABELS = {t for i in FAMILY.generate("train") for t in FAMILY.answer_key(i)["traps"]} | {"traps"}


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


def assert_graders_report(outcome) -> None:
    """Every failed line has a reason; no generator label and no stated rule in the report."""
    reasons = failed(outcome)
    assert all(reasons.values()), reasons
    text = json.dumps(outcome.detail)
    assert not any(re.search(rf"\b{re.escape(label)}\b", text) for label in LABELS), text
    assert not any(f.id in text for f in FAMILY.facts), text
    joined = "\n".join(reasons.values())
    assert not [x.id for x in ITEMS if x.stated_in(joined)], joined


# ------------------------------------------------------------------ golden instances
def _compact(items: list[dict]) -> list:
    return [[it["label"], it["target"], [[c["label"], c["target"]] for c in it["children"]]] for it in items]


def _flat(items: list[dict]) -> list[tuple[str, str]]:
    return [(node["label"], node["target"]) for it in items for node in (it, *it["children"])]


def final_state(inst, env: WebsiteEnv) -> dict:
    """What differs from the starting CMS, in golden.json's format."""
    start = FAMILY.make_env(inst)
    pages, links = {}, []
    for pid, page in env.pages.items():
        before = start.pages[pid]
        fields = {k: v for k, v in page.items() if k != "body" and v != before[k]}
        if fields:
            pages[str(pid)] = fields
        if page["body"] != before["body"]:
            old, new = LINK.findall(before["body"]), LINK.findall(page["body"])
            assert len(old) == len(new) and LINK.sub("", before["body"]) == LINK.sub("", page["body"])
            links += [{"on": pid, "old": a[2], "new": b[2]} for a, b in zip(old, new) if a != b]
    redirects = sorted([f, t, c] for f, (t, c) in env.redirects.items() if start.redirects.get(f) != (t, c))
    assert set(start.redirects) <= set(env.redirects)
    state = {"pages": pages, "redirects": redirects, "links": links}
    for name, items in env.menus.items():
        if items == start.menus[name]:
            continue
        if world(inst).kind == "menu" and name == "main":
            state["main_menu"] = _compact(items)
            continue
        before, after = _flat(start.menus[name]), _flat(items)
        assert [label for label, _ in before] == [label for label, _ in after]
        links += [{"on": f"menu:{name}", "old": a[1], "new": b[1]} for a, b in zip(before, after) if a != b]
    state["links"] = sorted(links, key=json.dumps)
    return state


def golden_state(golden: dict) -> dict:
    state = {
        "pages": golden.get("pages", {}),
        "redirects": sorted(golden.get("redirects", [])),
        "links": sorted(golden.get("links", []), key=json.dumps),
    }
    if "main_menu" in golden:
        state["main_menu"] = golden["main_menu"]
    return state


def env_with_state(inst, state: dict) -> WebsiteEnv:
    """A fresh CMS with a golden-format state written into it through the tools."""
    env = FAMILY.make_env(inst)
    for pid, fields in state.get("pages", {}).items():
        assert not env.call("update_page", {"page_id": int(pid), **fields}).error
    if state.get("redirects"):
        rows = [{"from": f, "to": t, "code": c} for f, t, c in state["redirects"]]
        assert not env.call("save_redirects", {"redirects": rows}).error
    for change in state.get("links", []):
        on, old, new = change["on"], change["old"], change["new"]
        if isinstance(on, int):
            body = env.pages[on]["body"].replace(f"]({old})", f"]({new})")
            assert not env.call("update_page", {"page_id": on, "body": body}).error
        else:
            name = on.split(":", 1)[1]
            items = env.menus[name]
            for it in items:
                for node in (it, *it["children"]):
                    if node["target"] == old:
                        node["target"] = new
            assert not env.call("set_menu", {"menu": name, "items": items}).error
    if "main_menu" in state:
        items = [
            {"label": label, "target": target, "children": [{"label": a, "target": b} for a, b in kids]}
            for label, target, kids in state["main_menu"]
        ]
        assert not env.call("set_menu", {"menu": "main", "items": items}).error
    return env


def _live_other(env: WebsiteEnv, *avoid: str) -> str:
    return next(p for p in ("/contact", "/pricing", "/careers") if p in env.live_paths() and p not in avoid)


def mutations(inst, golden: dict) -> dict[str, dict]:
    state = golden_state(golden)
    env = FAMILY.make_env(inst)
    out: dict[str, dict] = {}
    if "main_menu" in state:
        menu = state["main_menu"]
        first = menu[0]
        out["item dropped"] = {**state, "main_menu": menu[:-1]}
        out["item added"] = {**state, "main_menu": [*menu, ["Partners", "/partners", []]]}
        out["target altered"] = {
            **state,
            "main_menu": [[first[0], _live_other(env, first[1]), first[2]], *menu[1:]],
        }
        out["order changed"] = {**state, "main_menu": [menu[1], menu[0], *menu[2:]]}
        return out
    links = state["links"]
    first = links[0]
    out["link fix dropped"] = {**state, "links": links[1:]}
    out["link fix altered"] = {
        **state,
        "links": [{**first, "new": _live_other(env, first["new"])}, *links[1:]],
    }
    untouched = next(
        pid
        for pid in sorted(env.pages)
        if pid not in {c["on"] for c in links}
        and pid not in {int(p) for p in state["pages"]}
        and LINK.findall(env.pages[pid]["body"])
    )
    href = next(h for bang, _, h in LINK.findall(env.pages[untouched]["body"]) if not bang)
    out["link change added"] = {
        **state,
        "links": [*links, {"on": untouched, "old": href, "new": _live_other(env, href)}],
    }
    if state["redirects"]:
        rows = state["redirects"]
        out["redirect dropped"] = {**state, "redirects": rows[1:]}
        out["redirect made temporary"] = {**state, "redirects": [[rows[0][0], rows[0][1], 302], *rows[1:]]}
        out["redirect added"] = {**state, "redirects": [*rows, ["/extra-old-address", rows[0][1], 301]]}
    for pid, fields in state["pages"].items():
        for field in fields:
            if field in ("seo_title", "canonical"):  # the constraint skipped, the canonical left stale
                pages = {pid: {k: v for k, v in fields.items() if k != field}}
                out[f"{field} left as it was"] = {**state, "pages": pages}
    return out


def test_golden_instances_cover_every_kind_and_trap():
    assert len(GOLDEN) >= 5 and all(g["id"].startswith("website/test/") for g in GOLDEN)
    kinds = {world(FAMILY.instance(g["id"])).kind for g in GOLDEN}
    traps = {t for g in GOLDEN for t in FAMILY.answer_key(FAMILY.instance(g["id"]))["traps"]}
    assert kinds == {"rename", "links", "menu"}
    assert {trap for _, trap in TRAPS} | {"new_seo_title"} <= traps
    assert all(g["kind"] == world(FAMILY.instance(g["id"])).kind and g["why"] for g in GOLDEN)


@pytest.mark.parametrize("golden", GOLDEN, ids=lambda g: g["id"])
def test_reference_solver_reaches_the_hand_derived_state(golden):
    inst = FAMILY.instance(golden["id"])
    outcome, env = FAMILY.reference_solve(inst)
    assert outcome.passed
    assert final_state(inst, env) == golden_state(golden)


@pytest.mark.parametrize("golden", GOLDEN, ids=lambda g: g["id"])
def test_checker_accepts_the_golden_state_and_rejects_each_mutation(golden):
    inst = FAMILY.instance(golden["id"])
    env = env_with_state(inst, golden_state(golden))
    assert final_state(inst, env) == golden_state(golden)
    assert FAMILY.check(env).passed
    muts = mutations(inst, golden)
    assert len(muts) >= 3
    for what, state in muts.items():
        outcome = FAMILY.check(env_with_state(inst, state))
        assert not outcome.passed, what
        assert outcome.score < 1.0 and failed(outcome), what
        assert_graders_report(outcome)


# ------------------------------------------------------------------ checker reports
def test_reference_passes_leaves_no_broken_link_and_empty_agent_scores_zero():
    for inst in FAMILY.generate("val", 20):
        outcome, env = FAMILY.reference_solve(inst)
        assert outcome.passed and outcome.score == 1.0
        assert env.broken_links() == []
        ids = {r["id"] for r in outcome.detail["requirements"]}
        assert ids <= REQUIREMENTS[world(inst).kind] | SHARED and SHARED <= ids
        empty = FAMILY.check(FAMILY.make_env(inst))
        assert not empty.passed and empty.score == 0.0
        assert_graders_report(empty)


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
        assert set(failed(outcome)) <= REQUIREMENTS[kind] | SHARED
        assert_graders_report(outcome)


def test_stale_canonical_is_reported_on_the_page_metadata_line():
    for inst in find("rename", "stale_canonical"):
        outcome = FAMILY.check(run_plan(inst, replace(FULL, facts=FULL.facts - {"seo_canonical"})))
        reasons = failed(outcome)
        assert set(reasons) == {"page_metadata"}
        assert (
            world(inst).path(world(inst).rename_id) in reasons["page_metadata"]
        )  # the agent's own stale value


def test_302_instead_of_301_fails_every_rename():
    for inst in find("rename"):
        outcome = FAMILY.check(run_plan(inst, replace(FULL, facts=FULL.facts - {"permanent_301"})))
        assert not outcome.passed
        assert set(failed(outcome)) == {"redirects"} and "(302)" in failed(outcome)["redirects"]


def test_skipped_seo_title_constraint_fails():
    instances = find("rename", "new_seo_title")
    assert instances
    for inst in instances:
        outcome = FAMILY.check(run_plan(inst, replace(FULL, constraints=frozenset())))
        assert set(failed(outcome)) == {"seo_title"}
        assert (
            world(inst).seo_title not in failed(outcome)["seo_title"]
        )  # the expected text is not given away


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
        outcome = FAMILY.check(run_plan(inst, replace(FULL, cut=frozenset({cut}))))
        assert not outcome.passed
        assert_graders_report(outcome)


def test_redirect_without_link_updates_leaves_broken_links():
    for inst in find("rename"):
        env = run_plan(inst, FULL, skip=("replace_links",))
        outcome = FAMILY.check(env)
        assert not outcome.passed and 0 < outcome.score < 1
        reasons = failed(outcome)
        assert set(reasons) == {"links_updated", "no_broken_links"}
        old = world(inst).path(world(inst).rename_id)
        assert old in reasons["no_broken_links"] and "(a redirect)" in reasons["no_broken_links"]


def test_collateral_change_fails():
    inst = find("rename", n=1)[0]
    env = run_plan(inst, FULL)
    other = next(pid for pid in env.pages if pid != world(inst).rename_id)
    env.call("update_page", {"page_id": other, "title": "Something else"})
    outcome = FAMILY.check(env)
    assert not outcome.passed and outcome.score <= 0.5
    assert (
        set(failed(outcome)) == {"nothing_else_changed"}
        and "title" in failed(outcome)["nothing_else_changed"]
    )
    env = run_plan(inst, FULL)
    historic = min(env.redirects)
    env.call("delete_redirect", {"from_path": historic})
    outcome = FAMILY.check(env)
    assert not outcome.passed
    assert historic in failed(outcome)["nothing_else_changed"]


def test_menu_reordering_outside_the_request_fails():
    inst = find("menu", n=1)[0]
    env = run_plan(inst, FULL)
    items = env.menus["main"]
    env.call("set_menu", {"menu": "main", "items": [items[-1], *items[:-1]]})
    outcome = FAMILY.check(env)
    assert not outcome.passed
    assert "order" in failed(outcome)["menu_as_requested"]


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


def test_reports_never_state_a_rule_or_a_label():
    for inst in FAMILY.generate("val", 30, difficulty=3):
        for k in [Knowledge(frozenset(), frozenset()), replace(FULL, constraints=frozenset())] + [
            replace(FULL, facts=FULL.facts - {f}) for f in sorted(FULL.facts)
        ]:
            outcome = FAMILY.check(run_plan(inst, k))
            assert_graders_report(outcome)


# ------------------------------------------------------------------ facts, constraints, handbook
@pytest.mark.parametrize(
    "fact,text",
    [
        ("permanent_301", "Renamed pages always get a 301 from their old URL."),
        (
            "permanent_301",
            "If a page moved permanently, redirect it permanently; a 302 means it will come back.",
        ),
        (
            "resolve_redirects",
            "Point every menu entry directly at its destination page, never at a redirect.",
        ),
        ("resolve_redirects", "A link that hits a redirect chain must be changed to the page at its end."),
        ("child_pages", "When you rename a parent page, its children move with it: add a redirect for each."),
        (
            "seo_canonical",
            "After a slug change, a canonical still holding the old URL must be updated by hand.",
        ),
        ("no_drafts", "Only published pages may be linked from menus; skip drafts with the same title."),
        ("seo_title", "When the change request specifies an SEO title, use it verbatim."),
    ],
)
def test_paraphrases_are_recognised(fact, text):
    assert next(x for x in ITEMS if x.id == fact).stated_in(text)


@pytest.mark.parametrize(
    "text",
    [
        "301",
        "redirect",
        "canonical",
        "draft",
        "SEO title",
        "child pages",
        "The redirect list shows each rule with its code, 301 or 302.",
        "Each redirect has a from path, a to path and an HTTP code.",
        "Menu items link to pages; some old addresses in the site redirect elsewhere.",
        "The canonical field tells search engines which address is preferred.",
        "Child pages appear below their parent in the page tree.",
        "Drafts can be previewed by editors before they go live.",
        "SEO titles usually end with the brand name.",
        "Use a 302 redirect for all moved pages.",
    ],
)
def test_lone_keywords_and_near_misses_are_not_recognised(text):
    assert [x.id for x in ITEMS if x.stated_in(text)] == []


def test_paraphrase_fixtures_dev_and_negatives():
    path = ROOT / "tests" / "fixtures" / "paraphrases.json"
    if not path.exists():
        pytest.skip("no paraphrase fixtures")
    fixtures = json.loads(path.read_text())["families"]["website"]
    for x in ITEMS:
        assert all(x.stated_in(t) for t in fixtures[x.id]["dev"]), x.id
        assert not any(x.stated_in(t) for t in fixtures[x.id]["negatives"]), x.id

