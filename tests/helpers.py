"""Small helpers the test modules share: a checker report's failed lines, an env the plan has run through,
the project's Serve app for the life of a fixture."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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


@contextmanager
def serving(cfg: Any, store_dir: Path) -> Iterator[dict[str, Any]]:
    """`coevolve serve`'s app on `cfg` with its state in `store_dir`, for the life of the block: the
    server state; COEVOLVE_STORE points at `store_dir` and COEVOLVE_SERVE_URL is unset meanwhile (both
    restored after, and the app stopped)."""
    from coevolve.services.serving.app import start_serving, stop_serving

    old = os.environ.get("COEVOLVE_STORE"), os.environ.pop("COEVOLVE_SERVE_URL", None)
    os.environ["COEVOLVE_STORE"] = str(store_dir)
    try:
        yield start_serving(cfg, store_dir)
    finally:
        stop_serving(store_dir)
        if old[0] is None:
            os.environ.pop("COEVOLVE_STORE", None)
        else:
            os.environ["COEVOLVE_STORE"] = old[0]
        if old[1] is not None:
            os.environ["COEVOLVE_SERVE_URL"] = old[1]
