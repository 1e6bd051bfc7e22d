"""The task protocol every family implements (docs/ARCHITECTURE.md §6) and the synthetic-agent contract (docs/ARCHITECTURE.md §5).

A family is a seeded generator of instances with fixed splits, an environment per instance exposing
JSON-schema tools, a checker over the final service state, and a reference solution written as a
*plan of steps*. `plan(instance, knowledge)` returns the steps an agent with that knowledge would
take: with full knowledge it is the reference solution; with a fact missing, a constraint unnoticed
or an observation cut, some step's arguments differ (the plausible wrong branch). The sequence of
tools never depends on knowledge, only the arguments do, so steps align across knowledge levels.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import sqlite3
import sys
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Annotated, Any, ClassVar

from coevolve.errors import BadInput
from coevolve.tasks.handbook import Handbook
from coevolve.tasks.rules import RULES_FILE, Constraint, DomainFact, load_rules
from coevolve.tasks.tools import Param, tool_spec
from coevolve.text import bounded
from coevolve.values import Harness, Outcome, PromptSection, TaskInstance, ToolSpec

MAX_ARG_CHARS = 100_000
MAX_OBSERVATION_CHARS = 100_000  # a tool observation is cut to this, its middle replaced by a marker
MAX_REASON_CHARS = 10_000  # likewise a checker's reason for one requirement





@dataclass(frozen=True)
class Requirement:
    """One line of a checker's report, as a grader would write it: what was required, whether the
    final state meets it and, if not, why (like a failing test's message). No generator labels."""

    id: str
    passed: bool
    reason: str = ""


def graded(requirements: Sequence[Requirement], score: float | None = None) -> Outcome:
    """An `Outcome` from requirement lines: passed when all pass; score defaults to the share passed."""
    if not requirements:
        raise ValueError("a checker must report at least one requirement")
    passed = all(r.passed for r in requirements)
    if score is None:
        score = sum(r.passed for r in requirements) / len(requirements)
    detail = {"requirements": [{"id": r.id, "passed": r.passed, "reason": bounded(r.reason, MAX_REASON_CHARS)}
                               for r in requirements]}
    return Outcome(passed, 1.0 if passed else round(min(score, 0.99), 4), detail)


def round_money(x: float) -> float:
    """An amount in cents' precision (the epsilon takes a float just under a half cent up)."""
    return round(x + 1e-9, 2)


def plural(n: int, one: str, many: str) -> str:
    """'1 row has' / '2 rows have': a count with its words agreeing."""
    return f"{n} {one if n == 1 else many}"


def listing(items: Sequence[str], n: int = 5, sep: str = ", ") -> str:
    """The first `n` items joined by `sep`, then "and K more" for the rest (a checker's reason)."""
    shown = sep.join(items[:n])
    return shown + (f" and {len(items) - n} more" if len(items) > n else "")


@dataclass(frozen=True)
class Knowledge:
    facts: frozenset[str]
    constraints: frozenset[str]  # instruction constraints the agent heeds
    cut: frozenset[int] = frozenset()  # plan steps whose observation the agent could not see in full


@dataclass(frozen=True)
class PlanStep:
    tool: str
    args: dict[str, Any]
    facts: tuple[str, ...] = ()  # facts that shape this step's arguments
    uses: tuple[int, ...] = ()  # earlier steps whose observations this step reads
    constraint: str | None = None  # instruction constraint that shapes this step


@dataclass(frozen=True)
class ToolResult:
    """A tool's observation. Error observations always start with `error` (TaskEnv.call ensures it)."""

    content: str
    error: bool = False
    finished: bool = False


class ToolArgError(ValueError):
    """Raised inside a tool for bad arguments; the env turns it into an error observation."""


class TaskEnv(ABC):
    """One instance's live services. `call` never raises for bad input: it returns an error result.

    `blocking_tools` names the tools (impls) whose call waits on something outside this process's
    Python — a sandbox subprocess, a browser, a remote model: the executor runs those calls (and this
    env's checker) on a worker thread, off its event loop, one call at a time per env. Every other tool
    is cheap pure Python and runs inline. An env whose blocking tools are set must tolerate being
    called from a thread other than the one that created it (sqlite: `check_same_thread=False`)."""

    blocking_tools: frozenset[str] = frozenset()
    # an outage of a service the episode depends on and the agent does not control (tau2's simulated
    # customer's model): set, the rollout is an infrastructure failure, never scored as the agent's
    infra_error: str = ""

    def __init__(self, instance: TaskInstance):
        self.instance = instance
        self.finished = False
        self.calls: list[tuple[str, dict[str, Any]]] = []

    @abstractmethod
    def tool_specs(self) -> tuple[ToolSpec, ...]: ...

    def call(self, impl: str, args: Any) -> ToolResult:
        self.calls.append((impl, args if isinstance(args, dict) else {"_raw": args}))
        method = getattr(self, f"tool_{impl}", None)
        if method is None or impl not in {t.impl for t in self.tool_specs()}:
            return ToolResult(f"error: unknown tool {impl!r}", error=True)
        if not isinstance(args, dict):
            return ToolResult("error: arguments must be a JSON object", error=True)
        if any(isinstance(v, str) and len(v) > MAX_ARG_CHARS for v in args.values()):
            return ToolResult(f"error: an argument is longer than {MAX_ARG_CHARS} characters", error=True)
        try:
            out = method(**args)
        except ToolArgError as e:
            return ToolResult(f"error: {e}", error=True)
        except TypeError as e:
            why = re.sub(r"^\S*\(\)\s*", "", str(e))  # "f() missing 1 required ..." -> "missing ..."
            return ToolResult(f"error: bad arguments for {impl}: {why}", error=True)
        except RecursionError:
            return ToolResult(f"error: arguments for {impl} are nested too deeply", error=True)
        if isinstance(out, ToolResult):
            content = bounded(out.content, MAX_OBSERVATION_CHARS)
            if out.error and not content.startswith("error"):
                return ToolResult(f"error: {content}", error=True, finished=out.finished)
            return replace(out, content=content)
        return ToolResult(bounded(out if isinstance(out, str) else json.dumps(out, sort_keys=True), MAX_OBSERVATION_CHARS))

    def tool_finish(
        self, summary: Annotated[str, Param(description="one-line summary of what you did")] = ""
    ) -> ToolResult:
        """Call when the task is complete. Ends the episode."""
        self.finished = True
        return ToolResult("finished", finished=True)


READ_ONLY_SQL = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, getattr(sqlite3, "SQLITE_RECURSIVE", 33)}
)


def read_only_authorizer(action: int, *_: Any) -> int:
    """For `sqlite3.Connection.set_authorizer`: plain reads only (no writes, no PRAGMA, no ATTACH)."""
    return sqlite3.SQLITE_OK if action in READ_ONLY_SQL else sqlite3.SQLITE_DENY


_WORLD_MEMO: dict[tuple[int, str], Any] = {}


def world_memo(world: Any, name: str, make: Callable[[], Any]) -> Any:
    """`make()`, computed once per world object and name, kept while the world lives."""
    key = (id(world), name)
    if key not in _WORLD_MEMO:
        _WORLD_MEMO[key] = make()
        weakref.finalize(world, _WORLD_MEMO.pop, key, None)
    return _WORLD_MEMO[key]


def read_only_db(world: Any, create_tables: Callable[[sqlite3.Connection, Any], None]) -> sqlite3.Connection:
    """One env's own in-memory database of the world's tables, open to plain reads only
    (`read_only_authorizer`): `create_tables(db, world)` fills them once per world, each env gets a copy."""

    def image() -> bytes:
        with closing(sqlite3.connect(":memory:")) as db:
            create_tables(db, world)
            db.commit()
            return db.serialize()

    db = sqlite3.connect(":memory:", check_same_thread=False)
    db.deserialize(world_memo(world, "sqlite", image))
    db.set_authorizer(read_only_authorizer)
    return db


FINISH_TOOL = tool_spec(TaskEnv.tool_finish, required_always=True)


@lru_cache(maxsize=1024)
def _cached_world(family: TaskFamily, seed: int, params_json: str) -> Any:
    return family.build_world(seed, json.loads(params_json))


@lru_cache(maxsize=8192)
def _cached_plan(family: TaskFamily, seed: int, params_json: str, knowledge: Knowledge) -> tuple[PlanStep, ...]:
    return tuple(family.planner(family.world(seed, json.loads(params_json)), knowledge))


def _module_dir(cls: type) -> Path | None:
    """The folder of the module that defines `cls` (None for a class defined outside a file)."""
    file = getattr(sys.modules.get(cls.__module__), "__file__", None)
    return Path(file).parent if file else None


def instance_seed(family: str, split: str, index: int, params: dict[str, Any]) -> int:
    key = f"{family}|{split}|{index}|{json.dumps(params, sort_keys=True)}"
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")


class TaskFamily(ABC):
    """One enterprise task family. Subclasses define the class attributes and the abstract methods.

    A family of this project is a package whose modules make its parts (`world`, `env`, `plan`, `checker`);
    its class declares them (`build_world`, `env_type`, `base_tools`, `helper_tools`, `planner`,
    `checker`) and writes its `instruction`, and the methods here wire them. Its facts and constraints
    are data, `facts.yaml` beside its module (`load_rules`), as its documentation is `handbook.md`. A family
    that wraps an external benchmark (tau2) overrides the wiring methods instead."""

    name: str
    title: str
    facts: tuple[DomainFact, ...] = ()
    constraints: tuple[Constraint, ...] = ()
    split_sizes: ClassVar[dict[str, int]] = {"train": 60, "val": 50, "test": 50}
    default_params: ClassVar[dict[str, Any]] = {"difficulty": 2, "size": 1}
    env_type: ClassVar[type[TaskEnv]]  # an instance's environment: env_type(instance, world)
    base_tools: ClassVar[tuple[ToolSpec, ...]] = ()  # the baseline harness's tools
    helper_tools: ClassVar[tuple[ToolSpec, ...]] = ()  # offered beside them (`optional_tools`)
    # planner(world, knowledge): the plan's steps; checker(env, knowledge): the grade (static functions)
    planner: ClassVar[Callable[[Any, Knowledge], list[PlanStep]]]
    checker: ClassVar[Callable[[Any, Knowledge], Outcome]]
    cached_plans: ClassVar[bool] = False  # memoise plans per (instance, knowledge): for costly planners

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A family with a rules file beside its module takes its facts and constraints from it."""
        super().__init_subclass__(**kwargs)
        folder = _module_dir(cls)
        path = folder / RULES_FILE if folder else None
        if path and path.is_file():
            if "facts" in vars(cls) or "constraints" in vars(cls):
                raise TypeError(f"{cls.__name__} declares facts or constraints in its class and in {path}: keep one")
            cls.facts, cls.constraints = load_rules(path)

    # ---------------------------------------------------------------- generation
    def generate(self, split: str, n: int | None = None, seed: int = 0, **params: Any) -> list[TaskInstance]:
        """`n` instances of the fixed split; seed 0 takes them in order, other seeds sample."""
        if split not in self.split_sizes:
            raise BadInput(f"unknown split {split!r} (splits: {sorted(self.split_sizes)})")
        size = self.split_sizes[split]
        n = size if n is None else n
        if not 0 < n <= size:
            raise BadInput(f"n must be in 1..{size} for split {split!r}, got {n}")
        unknown = set(params) - set(self.default_params)
        if unknown:
            raise BadInput(f"unknown parameters {sorted(unknown)} (known: {sorted(self.default_params)})")
        indices = list(range(size))
        if seed:
            random.Random(seed).shuffle(indices)
        return [self.instance_at(split, i, **params) for i in indices[:n]]

    def instance_at(self, split: str, index: int, **params: Any) -> TaskInstance:
        full = {**self.default_params, **params}
        seed = instance_seed(self.name, split, index, full)
        iid = f"{self.name}/{split}/{index}"
        extra = {k: v for k, v in full.items() if self.default_params.get(k) != v}
        if extra:
            iid += ":" + ",".join(f"{k}={v}" for k, v in sorted(extra.items()))
        return TaskInstance(
            family=self.name,
            id=iid,
            split=split,
            seed=seed,
            instruction=self.instruction(self.world(seed, full), iid),
            params=full,
        )

    def instance(self, instance_id: str) -> TaskInstance:
        """Rebuild an instance from its id (ids encode split, index and non-default knobs)."""
        base, _, knobs = instance_id.partition(":")
        try:
            family, split, index = base.split("/")
            params = {}
            for kv in filter(None, knobs.split(",")):
                k, v = kv.split("=")
                params[k] = type(self.default_params[k])(v)
            if family != self.name:
                raise ValueError
            i = int(index)
        except (ValueError, KeyError) as e:
            raise BadInput(f"bad instance id {instance_id!r} for family {self.name!r}") from e
        if split not in self.split_sizes:
            raise BadInput(f"bad instance id {instance_id!r}: unknown split {split!r} (splits: {sorted(self.split_sizes)})")
        if not 0 <= i < self.split_sizes[split]:
            raise BadInput(
                f"bad instance id {instance_id!r}: the {split} split of {self.name} has instances 0..{self.split_sizes[split] - 1}"
            )
        return self.instance_at(split, i, **params)

    # ---------------------------------------------------------------- per family
    def world(self, seed: int, params: dict[str, Any]) -> Any:
        """The instance's hidden data, a pure function of (seed, params), built once and cached."""
        return _cached_world(self, seed, json.dumps(params, sort_keys=True))

    @abstractmethod
    def build_world(self, seed: int, params: dict[str, Any]) -> Any:
        """Generate the world of one instance from its seed and knobs (called through `world`)."""

    @abstractmethod
    def instruction(self, world: Any, instance_id: str) -> str:
        """The task text the agent receives."""

    def make_env(self, instance: TaskInstance) -> TaskEnv:
        return self.env_type(instance, self.world(instance.seed, instance.params))

    def check(self, env: TaskEnv) -> Outcome:
        """The grade of the env's final state, by the family's checker under full knowledge."""
        assert isinstance(env, self.env_type)
        return self.checker(env, self.full_knowledge())

    def plan(self, instance: TaskInstance, knowledge: Knowledge) -> list[PlanStep]:
        """The family's planner on the instance's world; memoised with `cached_plans` (synthetic agents ask
        for the plan every turn), each call getting its own copy of the steps' arguments."""
        if not self.cached_plans:
            return self.planner(self.world(instance.seed, instance.params), knowledge)
        steps = _cached_plan(self, instance.seed, json.dumps(instance.params, sort_keys=True), knowledge)
        return [replace(s, args=dict(s.args)) for s in steps]

    def baseline_tools(self) -> tuple[ToolSpec, ...]:
        return self.base_tools

    def optional_tools(self) -> tuple[ToolSpec, ...]:
        """Helper tools the environment offers beside the baseline's (domain computation over data the base
        tools expose); an `add_tool` edit naming one adds it to a harness (`coevolve.tasks.helpers`)."""
        return self.helper_tools

    # ---------------------------------------------------------------- shared
    def answer_key(self, instance: TaskInstance) -> dict[str, Any]:
        """The testbed's ground truth for an instance (trap labels): analysis code only, never a role."""
        return {"traps": list(getattr(self.world(instance.seed, instance.params), "traps", ()))}

    @cached_property
    def handbook(self) -> Handbook:
        """The family's domain documentation (`handbook.md` beside the family's module)."""
        folder = _module_dir(type(self))
        assert folder is not None, f"{type(self).__name__} is not defined in a file"
        return Handbook.load(folder / "handbook.md")

    def full_knowledge(self) -> Knowledge:
        return Knowledge(frozenset(f.id for f in self.facts), frozenset(c.id for c in self.constraints))

    def baseline_harness(self) -> Harness:
        """A generic harness: role, task-agnostic guidance, every tool, no hooks, no domain notes."""
        return Harness(
            family=self.name,
            system_prompt=(
                PromptSection("role", f"You are an operations assistant working on {self.title} tasks."),
                PromptSection(
                    "method",
                    "Use the tools to inspect the data, do what the task asks, then call finish. "
                    "Call one tool at a time unless calls are independent.",
                ),
            ),
            tools=(*self.baseline_tools(), FINISH_TOOL),
        )

    def reference_solve(self, instance: TaskInstance) -> tuple[Outcome, TaskEnv]:
        """Run the full-knowledge plan through the tools and check it."""
        env = self.make_env(instance)
        return self.solve_in(instance, env), env

    def solve_in(self, instance: TaskInstance, env: TaskEnv) -> Outcome:
        """Run the full-knowledge plan in a given environment (e.g. a browser family's Chromium one) and check it."""
        impl = {t.name: t.impl for t in env.tool_specs()}
        for step in self.plan(instance, self.full_knowledge()):
            result = env.call(impl.get(step.tool, step.tool), dict(step.args))
            if result.error:
                raise AssertionError(f"reference step {step.tool} failed on {instance.id}: {result.content}")
        return self.check(env)
