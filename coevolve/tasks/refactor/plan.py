"""The refactor solution as a plan of steps, and the repository an agent with some knowledge leaves.

The reference plan: list_files, search (literal, with context), [read CHANGELOG.md], apply_patch (one
multi-file unified diff), [write CHANGELOG.md], run_tests, finish. What the patch contains depends on
the agent's knowledge (the plausible wrong branch of each fact); the sequence of tools does not.
"""

from __future__ import annotations

import difflib

from coevolve.tasks.base import Knowledge, PlanStep
from coevolve.tasks.refactor.world import CHANGELOG, RefactorWorld, _render, original_files

FACT_IDS = ("string_references", "method_namesake", "near_duplicate", "block_outputs", "aware_datetime")
KIND_FACTS = {
    "rename": ("string_references", "method_namesake"),
    "extract": ("near_duplicate", "block_outputs"),
    "deprecated": ("aware_datetime",),
}
FULL = Knowledge(frozenset(FACT_IDS), frozenset({"changelog"}))
SEARCH_STEP, CHANGELOG_READ_STEP = 1, 2  # plan steps whose observations later steps read


def plan(w: RefactorWorld, k: Knowledge) -> list[PlanStep]:
    before = original_files(w)
    after = refactored_files(w, k)
    after.pop(CHANGELOG, None)
    before_code = {p: c for p, c in before.items() if p != CHANGELOG}
    steps = [
        PlanStep("list_files", {}),
        PlanStep("search", {"pattern": w.pattern, "context": w.context}),
    ]
    if w.entry:
        steps.append(PlanStep("read_file", {"path": CHANGELOG}))
    steps.append(
        PlanStep("apply_patch", {"patch": make_patch(before_code, after)}, facts=KIND_FACTS[w.kind], uses=(SEARCH_STEP,))
    )
    if w.entry:
        steps.append(
            PlanStep(
                "write_file",
                {"path": CHANGELOG, "content": changelog_after(w, k, CHANGELOG_READ_STEP in k.cut)},
                uses=(CHANGELOG_READ_STEP,),
                constraint="changelog",
            )
        )
    steps.append(PlanStep("run_tests", {}))
    steps.append(PlanStep("finish", {"summary": f"{w.kind} refactoring done"}))
    return steps


def refactored_values(w: RefactorWorld, k: Knowledge) -> dict[str, str]:
    """Slot values of the refactoring an agent with knowledge `k` makes."""
    s = w.spec
    if w.kind == "rename":
        return {
            "fn": s["new"],
            "fn_str": s["new"] if "string_references" in k.facts else s["old"],
            "meth": s["old"] if "method_namesake" in k.facts else s["new"],
        }
    if w.kind == "extract":
        vals: dict[str, str] = {}
        replaced_mods: set[str] = set()
        for i, site in enumerate(s["sites"]):
            if site["near"] and "near_duplicate" in k.facts:
                vals[f"blk{i}"] = s["blocks"][f"blk{i}"]
                continue
            replaced_mods.add(site["mod"])
            if s["slug"] and "block_outputs" in k.facts:
                vals[f"blk{i}"] = f"    {site['out']} = {s['helper']}({site['v']})"
            else:
                vals[f"blk{i}"] = f"    {s['helper']}({site['v']})"
        for site in s["sites"]:
            m = site["mod"]
            lead = "" if s["slug"] else "\n"  # validation modules have no other import above the slot
            vals[f"imp_{m}"] = f"{lead}from {w.pkg}.{s['hmod_name']} import {s['helper']}\n" if m in replaced_mods else ""
        outputs = "block_outputs" in k.facts
        vals["rtype"] = "str" if outputs else "None"
        vals["ret"] = "    return text" if outputs else ""
        return vals
    vals = {f"dt_{m}": f"{names}, timezone" for m, names in s["dt_names"].items()}
    for i, site in enumerate(s["sites"]):
        if site["trap"] and "aware_datetime" in k.facts:
            vals[f"now{i}"] = "datetime.now(timezone.utc).replace(tzinfo=None)"
        else:
            vals[f"now{i}"] = "datetime.now(timezone.utc)"
    return vals


def refactored_files(w: RefactorWorld, k: Knowledge) -> dict[str, str]:
    """The whole repository after the refactoring an agent with knowledge `k` makes."""
    vals = refactored_values(w, k)
    files = {p: _render(t, vals) for p, t in w.templates.items()}
    files.update({p: _render(t, vals) for p, t in w.new_templates.items()})
    if SEARCH_STEP in k.cut:  # the search results were not visible: only the file the instruction names is changed
        before = original_files(w)
        files = {p: (c if p == w.primary else before[p]) for p, c in files.items() if p in before}
    return files


def canonical_tests(w: RefactorWorld) -> dict[str, str]:
    """The checker's own copies: the visible tests as a correct refactoring leaves them, and the hidden tests."""
    vals = refactored_values(w, FULL)
    out = {p: _render(w.templates[p], vals) for p in w.visible_tests}
    out["tests/test_hidden_checks.py"] = _render(w.hidden_test, vals)
    return out


def make_patch(before: dict[str, str], after: dict[str, str]) -> str:
    """A multi-file unified diff from `before` to `after` (a/ b/ prefixes, /dev/null for new files)."""
    parts = []
    for path in sorted(set(before) | set(after)):
        a, b = before.get(path), after.get(path)
        if a == b:
            continue
        parts.extend(
            difflib.unified_diff(
                (a or "").splitlines(keepends=True),
                (b or "").splitlines(keepends=True),
                "/dev/null" if a is None else f"a/{path}",
                "/dev/null" if b is None else f"b/{path}",
            )
        )
    return "".join(parts)


def changelog_after(w: RefactorWorld, k: Knowledge, cut: bool) -> str:
    """CHANGELOG.md as the agent writes it: under `## Unreleased` when it heeds the constraint, appended at
    the end when not, written from scratch when it never saw the file."""
    assert w.entry is not None
    if cut:
        return f"# Changelog\n\n## Unreleased\n\n{w.entry}\n"
    if "changelog" in k.constraints:
        return w.changelog.replace("## Unreleased\n", f"## Unreleased\n\n{w.entry}\n", 1)
    return w.changelog + f"{w.entry}\n"
