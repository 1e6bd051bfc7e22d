"""Code refactoring: rename a function, extract a duplicated block, replace a deprecated API call.

Services: a generated small Python package with tests (an in-memory repository of files) behind file
tools (list, read, search, write, apply a unified diff), a test runner and finish. Every run of code the
agent wrote happens in `coevolve.sandbox`. The checker reads the final repository, never the agent's words.
The package: `world` (generation), `env` (services and tools), `plan` (the reference solution as steps),
`checker` (the grader), `handbook.md` (the domain documentation).

Kinds (one per instance) and their traps, each present with a difficulty-dependent probability:
- rename `old` -> `new` across modules and tests. Traps: `__all__` lists the name as a string
  (fact `string_references`); a class in another module has a method of the same name, which must keep
  it (fact `method_namesake`).
- extract a copy-pasted block into `helper(value)` in a new module. Traps: the block computes a value
  the caller uses afterwards, so the helper must return it and callers assign it (fact
  `block_outputs`); one more block differs in a single constant and must stay (fact `near_duplicate`).
- replace deprecated `datetime.utcnow()` with `datetime.now(timezone.utc)`. Trap: some call sites mix
  the value with naive datetimes or print its isoformat, which need `.replace(tzinfo=None)` (fact
  `aware_datetime`).
- any kind may also ask for a CHANGELOG.md line under `## Unreleased` (constraint `changelog`; the
  careless branch appends it at the end of the file).
The size knob scales call sites, modules and unrelated functions (size 8 overflows the weak model's
context window).
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from coevolve.tasks.base import Concept, Constraint, DomainFact, Knowledge, PlanStep, TaskEnv, TaskFamily
from coevolve.tasks.refactor.checker import check
from coevolve.tasks.refactor.env import TOOLS, RefactorEnv, apply_patch
from coevolve.tasks.refactor.plan import (
    FACT_IDS,
    KIND_FACTS,
    canonical_tests,
    changelog_after,
    make_patch,
    plan,
    refactored_files,
)
from coevolve.tasks.refactor.world import CHANGELOG, RefactorWorld, build_world, original_files
from coevolve.values import Outcome, TaskInstance, ToolSpec

__all__ = [
    "CHANGELOG",
    "KIND_FACTS",
    "RefactorEnv",
    "RefactorFamily",
    "RefactorWorld",
    "apply_patch",
    "canonical_tests",
    "changelog_after",
    "make_patch",
    "original_files",
    "refactored_files",
]

FACTS = (
    DomainFact(
        "string_references",
        "Renaming a function includes its string references: names listed in `__all__` and other string "
        "literals that name it must be renamed too.",
        Concept((
            ("renam", "new name"),
            ("__all__", "string", "literal", "in quotes", "quoted", "quotation", "spelled out in text", "export list",
             "list of public names", "dunder all"),
            ("too", "also", "as well", "includ", "must", "every", "updat", "edit", "adjust", "miss", "forget",
             "not only", "not just", "cover", "need", "require", "along with", "likewise", "renamed", "rename its",
             "rename the", "rename any", "rename every", "rename all", "rename them", "rename those",
             "rename occurrences", "rename mentions", "rename references"),
        )),
        reversals=(
        # a rename leaves strings and `__all__` alone
        Concept((
            ("string", "literal", "__all__", "quoted", "in quotes", "docstring", "export list"),
            ("leave the string", "leave strings", "leave string", "leave the literal", "leave literals",
             "leave the __all__", "leave __all__", "leave names in", "leave the names in",
             "leave the quoted", "leave quoted", "strings unchanged", "literals unchanged",
             "__all__ unchanged", "strings untouched", "literals untouched", "__all__ untouched",
             "strings as they are", "literals as they are", "don't rename", "do not rename", "never rename",
             "don't touch", "do not touch", "never touch", "don't change", "do not change", "never change",
             "don't update", "do not update", "never update", "no need to", "only the code", "only code",
             "only the identifiers", "only identifiers", "only identifier", "just the code",
             "just the identifiers", "stop at call sites", "stop at the call sites", "only call sites",
             "only the call sites", "just the call sites", "only rename the code",
             "only rename identifiers", "only rename the identifiers"),
        )),
    ),
    ),
    DomainFact(
        "method_namesake",
        "Only references to the function itself are renamed: a method of the same name on a class is a "
        "different symbol and keeps its name (as do its calls).",
        Concept((
            ("method",),
            ("same name", "same-name", "namesake", "identically named", "identically-named", "identical name",
             "shares the name", "share the name", "sharing the name", "shares its name", "share its name",
             "sharing its name", "share the function's name", "shares the function's name",
             "sharing the function's name", "share a name", "shares a name", "same identifier", "happens to be called",
             "is also called", "are also called", "also named", "named the same", "called the same", "homonym"),
            ("keep", "unchanged", "untouched", "not renam", "not be renamed", "leave it", "leave that", "leave the method",
             "leave such", "leave them", "leave those", "alone", "different symbol", "separate symbol", "distinct",
             "unrelated", "retain", "preserve", "as is", "as it is", "as they are", "stay as", "stays as",
             "stay the same", "stays the same", "remain unchanged", "remains unchanged", "remain the same",
             "don't rename", "don't touch", "skip", "exclude", "ignore"),
        )),
        reversals=(
        # methods of the same name are renamed too
        Concept(
            (
                ("method",),
                ("too", "also", "as well", "including", "include", "every occurrence", "all occurrences",
                 "every reference", "all references", "everywhere", "every match", "all matches",
                 "anything named", "everything named", "every symbol"),
                ("renam", "new name"),
            ),
            unless=("keep", "different symbol", "separate symbol", "distinct", "unrelated", "unchanged",
                    "untouched", "not renam", "don't renam", "do not renam", "never renam", "leave",
                    "only references", "only the function"),
        ),
    ),
    ),
    DomainFact(
        "near_duplicate",
        "A block that differs from the duplicated one in any constant (a limit, a separator) is not a copy: "
        "leave it in place instead of replacing it with the helper.",
        Concept((
            ("block", "cop", "duplicat", "snippet", "clone", "repeated code"),
            ("differ", "different", "not identical", "near-duplicate", "near duplicate", "nearly identical",
             "almost identical", "look alike", "looks alike", "looks the same", "look the same", "lookalike",
             "similar", "reads the same", "variant", "resembl", "vary", "varies", "deviat", "not exact", "inexact",
             "tweak", "other than"),
            ("constant", "limit", "separator", "number", "literal", "maximum", "max ", "length", "parameter", "value",
             "threshold", "setting", "character", "width", "size"),
            ("not a copy", "not a duplicate", "not duplicates", "not a true", "not a real", "leave", "keep", "stays",
             "stay ", "untouched", "in place", "alone", "as is", "as-is", "unchanged", "retain", "preserve", "remain",
             "unreplaced", "not replace", "not be replaced", "don't replace", "not swap", "don't swap",
             "not substitut", "not merge", "not be merged", "don't merge", "not extract", "not be extracted",
             "don't extract", "don't touch", "skip", "exclude"),
        )),
        rare=True,
        reversals=(
        # similar blocks are replaced too
        Concept(
            (
                ("block", "cop", "duplicat", "snippet", "clone", "similar", "near-duplicate",
                 "near duplicate", "lookalike"),
                ("replace", "swap", "substitut", "merge", "extract", "dedup", "use the helper"),
                ("even if", "even when", "even though", "regardless", "as well", "too", "also",
                 "every similar", "all similar", "every block", "all blocks", "any block", "anyway",
                 "still a copy", "still a duplicate", "is a copy", "is a duplicate", "are copies",
                 "are duplicates"),
            ),
            unless=("exact cop", "exact duplicate", "identical cop", "except", "unless", "only exact",
                    "only identical", "only true", "only real", "not a copy", "not a duplicate", "leave it",
                    "leave them", "leave such", "leave that", "keep it", "keep them"),
        ),
        # a block that differs in a constant is still a copy
        Concept((
            ("block", "cop", "duplicat", "snippet", "clone", "similar"),
            ("differ", "different", "deviat", "vary", "varies", "tweak"),
            ("still a copy", "still a duplicate", "is a copy", "is a duplicate", "are copies",
             "are duplicates", "counts as a copy", "count as copies", "counts as a duplicate",
             "considered a copy", "considered a duplicate", "still counts", "still count"),
        )),
    ),
    ),
    DomainFact(
        "block_outputs",
        "An extracted helper must return every value the block computes that the caller uses afterwards, and "
        "each caller must assign the returned value.",
        Concept((
            ("return", "hand back", "hands back", "give back", "gives back", "pass back", "passes back",
             "hand over", "hands over"),
            ("assign", "store", "save", "capture", "bind", "variable", "afterwards", "later", "further down",
             "after the call", "after the block", "subsequent", "downstream", "rely on", "relies on", "relied on",
             "depend on", "depends on"),
            ("helper", "extract", "block", "shared function", "new function"),
        )),
        reversals=(
        # the helper returns nothing
        Concept((
            ("helper", "extracted function", "new function", "shared function"),
            ("return nothing", "returns nothing", "return none", "returns none", "no return",
             "without a return", "without returning", "needn't return", "need not return",
             "doesn't need to return", "does not need to return", "don't need to return",
             "do not need to return", "no need to return"),
        )),
        # callers need not assign
        Concept((
            ("caller", "call site"),
            ("just call", "simply call", "only call", "no need to assign", "don't assign", "do not assign",
             "needn't assign", "without assigning", "ignore the return", "discard the return"),
        )),
    ),
    ),
    DomainFact(
        "aware_datetime",
        "`datetime.now(timezone.utc)` returns an aware datetime: comparing or subtracting it with naive "
        "datetimes raises TypeError and its isoformat() ends in +00:00. Where the code works with naive UTC "
        "values, use `datetime.now(timezone.utc).replace(tzinfo=None)`.",
        Concept((
            ("aware", "tzinfo", "tz info", "offset", "+00:00", "carries a time zone", "carries a timezone",
             "time zone attached", "timezone attached", "zone attached", "with a time zone", "with a timezone"),
            ("naive",),
            ("typeerror", "type error", "raise", "throw", "mix", "compar", "subtract", "arithmetic",
             "replace(tzinfo", "tzinfo=none", "strip", "drop", "remove", "isoformat", "iso format", "iso string",
             "incompatible", "fail", "error", "crash", "break"),
        )),
        reversals=(
        # `datetime.now(timezone.utc)` is naive
        Concept((
            ("timezone.utc", "now(utc)"),
            ("gives a naive", "returns a naive", "produces a naive", "is naive", "is a naive", "are naive",
             "no tzinfo", "without tzinfo", "without a timezone", "without a time zone",
             "can be compared with naive", "compare it with naive", "safe to compare", "fine to compare",
             "safely compare", "mix freely", "can be mixed", "doesn't return an aware",
             "does not return an aware", "isn't aware", "is not aware", "not an aware"),
        )),
        # stripping the tzinfo is unnecessary
        Concept((
            ("replace(tzinfo", "tzinfo=none", "strip the tz", "strip tzinfo", "drop tzinfo"),
            ("don't need", "do not need", "doesn't need", "does not need", "not needed", "isn't needed",
             "unnecessary", "no need", "pointless", "redundant"),
        )),
    ),
    ),
)
assert tuple(f.id for f in FACTS) == FACT_IDS

# Where a changelog line goes: a preposition of place right before the `## Unreleased` heading or section.
UNRELEASED_PLACES = tuple(
    f"{where} {the}{mark}unreleased"
    for where in ("under", "below", "beneath", "underneath", "in", "into", "inside", "within", "to", "at the top of")
    for the in ("", "the ")
    for mark in ("", "`## ", "## ", "`")
)


class RefactorFamily(TaskFamily):
    name = "refactor"
    title = "code refactoring"
    facts = FACTS
    constraints = (
        Constraint(
            "changelog",
            "When the task asks for a changelog entry, it goes under the `## Unreleased` heading, with every "
            "existing line kept.",
            Concept((
                ("changelog", "change log", "release note"),
                UNRELEASED_PLACES,
            )),
            reversals=(
                # the changelog is rewritten
                Concept((
                    ("changelog", "change log", "release note"),
                    ("rewrite", "overwrite", "replace the file", "replace the old", "replace its",
                     "replace the content", "drop the old", "dropping the old", "delete the old",
                     "remove the old", "discard", "only the new entry", "just the new entry",
                     "with just the new", "with only the new", "start fresh", "from scratch",
                     "drop the `## unreleased", "drop the unreleased", "remove the unreleased",
                     "delete the unreleased", "under a new version", "new version heading"),
                )),
                # the entry goes elsewhere
                Concept((
                    ("changelog", "change log", "release note"),
                    ("above the heading", "above the headings", "at the end of the file",
                     "at the bottom", "end of the file", "bottom of the file", "under the latest release",
                     "under the last release", "under the released", "in the released", "under the version",
                     "under the newest version", "anywhere"),
                )),
            ),
        ),
    )

    # ------------------------------------------------------------------ generation
    def build_world(self, seed: int, params: dict[str, Any]) -> RefactorWorld:
        return build_world(seed, params)

    def instruction(self, world: RefactorWorld, instance_id: str) -> str:
        text = world.task
        if world.entry:
            text += f' Also record the change in {CHANGELOG}: add the line "{world.entry}" under the `## Unreleased` heading.'
        return text + " Then call finish."

    def make_env(self, instance: TaskInstance) -> RefactorEnv:
        return RefactorEnv(instance, self.world(instance.seed, instance.params))

    def baseline_tools(self) -> tuple[ToolSpec, ...]:
        return TOOLS

    # ------------------------------------------------------------------ solution
    def plan(self, instance: TaskInstance, knowledge: Knowledge) -> list[PlanStep]:
        return list(_cached_plan(self, instance.seed, json.dumps(instance.params, sort_keys=True), knowledge))

    def check(self, env: TaskEnv) -> Outcome:
        assert isinstance(env, RefactorEnv)
        return check(env)


@lru_cache(maxsize=4096)
def _cached_plan(family: RefactorFamily, seed: int, params_json: str, k: Knowledge) -> tuple[PlanStep, ...]:
    """Plans are asked for every turn of every synthetic rollout; building the patch is the costly part."""
    return tuple(plan(family.world(seed, json.loads(params_json)), k))
