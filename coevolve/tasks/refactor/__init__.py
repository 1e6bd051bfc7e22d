"""Code refactoring: rename a function, extract a duplicated block, replace a deprecated API call.

Services: a generated small Python package with tests (an in-memory repository of files) behind file
tools (list, read, search, write, apply a unified diff), a test runner and finish. Every run of code the
agent wrote happens in `coevolve.sandbox`. The checker reads the final repository, never the agent's words.

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

from coevolve.tasks.base import TaskEnv, TaskFamily
from coevolve.tasks.refactor.checker import check
from coevolve.tasks.refactor.env import TOOLS, RefactorEnv, apply_patch
from coevolve.tasks.refactor.plan import FACT_IDS, make_patch, plan, refactored_files
from coevolve.tasks.refactor.world import CHANGELOG, RefactorWorld, build_world, original_files
from coevolve.values import Outcome

__all__ = ["CHANGELOG", "RefactorFamily", "apply_patch", "make_patch", "original_files", "refactored_files"]


class RefactorFamily(TaskFamily):
    name = "refactor"
    title = "code refactoring"
    build_world = staticmethod(build_world)
    env_type = RefactorEnv
    base_tools = TOOLS
    planner = staticmethod(plan)
    cached_plans = True  # building the patch is the costly part

    def instruction(self, world: RefactorWorld, instance_id: str) -> str:
        text = world.task
        if world.entry:
            text += f' Also record the change in {CHANGELOG}: add the line "{world.entry}" under the `## Unreleased` heading.'
        return text + " Then call finish."

    def check(self, env: TaskEnv) -> Outcome:
        assert isinstance(env, RefactorEnv)
        return check(env)


assert tuple(f.id for f in RefactorFamily.facts) == FACT_IDS
