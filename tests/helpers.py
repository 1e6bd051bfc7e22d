"""Small helpers the test modules share: a checker report's failed lines, an env the plan has run through."""

from __future__ import annotations

from coevolve.tasks.base import Knowledge, TaskEnv, TaskFamily
from coevolve.values import Outcome, TaskInstance


def failed(outcome: Outcome) -> dict[str, str]:
    """The failed requirement lines of a checker's report: id -> reason."""
    return {r["id"]: r["reason"] for r in outcome.detail["requirements"] if not r["passed"]}


def solved_env(family: TaskFamily, inst: TaskInstance, knowledge: Knowledge | None = None) -> TaskEnv:
    """A fresh env the family's plan for `knowledge` (full knowledge by default) has run through, every
    step without an error observation."""
    env = family.make_env(inst)
    for step in family.plan(inst, family.full_knowledge() if knowledge is None else knowledge):
        result = env.call(step.tool, dict(step.args))
        assert not result.error, (step.tool, result.content[:500])
    return env
