"""The task protocol every family implements (DESIGN §6) and the synthetic-agent contract (DESIGN §5).

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
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, ClassVar

from harness_store.values import Harness, Outcome, PromptSection, TaskInstance, ToolSpec
from tasks.handbook import Handbook

SPLITS = ("train", "val", "test")
MAX_ARG_CHARS = 100_000


_WINDOW = 2  # a concept must be carried within this many adjacent sentences


@lru_cache(maxsize=8192)
def sentence_windows(text: str) -> tuple[str, ...]:
    """Lower-cased single sentences, then runs of up to `_WINDOW` adjacent ones (lines and sentence
    ends split; whitespace normalised), so the smallest window that carries a concept is found first."""
    sentences = [" ".join(s.split()) for s in re.split(r"(?<=[.!?])\s+|\n+", text.lower()) if s.strip()]
    runs = [
        " ".join(sentences[i : i + w]) for w in range(2, _WINDOW + 1) for i in range(max(0, len(sentences) - w + 1))
    ]
    return tuple(sentences + runs)


@lru_cache(maxsize=4096)
def _term_pattern(terms: tuple[str, ...]) -> re.Pattern[str]:
    """Terms match at a word start, as prefixes ('consecutiv' matches 'consecutively'); a term that
    ends in a digit matches whole numbers only ('3' does not match '30')."""
    parts = [re.escape(t.lower()) + (r"(?!\d)" if t[-1:].isdigit() else "") for t in terms]
    return re.compile(r"(?<![a-z0-9])(?:" + "|".join(parts) + ")")


@dataclass(frozen=True)
class Concept:
    """What a text must say for an idea to count as stated: one term of *every* synonym group within
    two adjacent sentences. A paraphrase carries the concept; a lone keyword does not."""

    groups: tuple[tuple[str, ...], ...]
    unless: tuple[str, ...] = ()  # terms that negate it when they appear in the same window

    def __post_init__(self) -> None:
        if len(self.groups) < 2 or any(not g or any(not t.strip() for t in g) for g in self.groups):
            raise ValueError(f"a concept needs at least two non-empty synonym groups: {self.groups!r}")

    def where(self, text: str) -> str | None:
        """The sentence window that carries the concept, or None."""
        if not text:
            return None
        patterns = [_term_pattern(g) for g in self.groups]
        negation = _term_pattern(self.unless) if self.unless else None
        return next(
            (w for w in sentence_windows(text) if all(p.search(w) for p in patterns) and not (negation and negation.search(w))),
            None,
        )

    def stated_in(self, text: str) -> bool:
        return self.where(text) is not None


@dataclass(frozen=True)
class DomainFact:
    """A piece of domain knowledge; `statement` is the catalogue's wording, `concept` what counts as
    stating it."""

    id: str
    statement: str
    concept: Concept
    common: bool = False  # a weak model knows it without being told
    rare: bool = False  # specialist knowledge even a strong model may lack (the expert's gaps)

    def stated_in(self, text: str) -> bool:
        return self.concept.stated_in(text)


@dataclass(frozen=True)
class Constraint:
    """An instruction constraint a careless agent skips unless the harness reinforces it."""

    id: str
    statement: str
    concept: Concept

    def stated_in(self, text: str) -> bool:
        return self.concept.stated_in(text)


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
    detail = {"requirements": [{"id": r.id, "passed": r.passed, "reason": r.reason} for r in requirements]}
    return Outcome(passed, 1.0 if passed else round(min(score, 0.99), 4), detail)


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
            return ToolResult(f"error: bad arguments for {impl}: {_clean_type_error(e)}", error=True)
        except RecursionError:
            return ToolResult(f"error: arguments for {impl} are nested too deeply", error=True)
        if isinstance(out, ToolResult):
            if out.error and not out.content.startswith("error"):
                return ToolResult(f"error: {out.content}", error=True, finished=out.finished)
            return out
        return ToolResult(out if isinstance(out, str) else json.dumps(out, sort_keys=True))

    def tool_finish(self, summary: str = "") -> ToolResult:
        self.finished = True
        return ToolResult("finished", finished=True)


READ_ONLY_SQL = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, getattr(sqlite3, "SQLITE_RECURSIVE", 33)}
)


def read_only_authorizer(action: int, *_: Any) -> int:
    """For `sqlite3.Connection.set_authorizer`: plain reads only (no writes, no PRAGMA, no ATTACH)."""
    return sqlite3.SQLITE_OK if action in READ_ONLY_SQL else sqlite3.SQLITE_DENY


def _clean_type_error(e: TypeError) -> str:
    return re.sub(r"^\S*\(\)\s*", "", str(e))


FINISH_TOOL = ToolSpec(
    name="finish",
    description="Call when the task is complete. Ends the episode.",
    parameters={
        "type": "object",
        "properties": {"summary": {"type": "string", "description": "one-line summary of what you did"}},
        "required": [],
        "additionalProperties": False,
    },
    impl="finish",
)


@lru_cache(maxsize=1024)
def _cached_world(family: str, seed: int, params_json: str) -> Any:
    from tasks import get_family

    return get_family(family).build_world(seed, json.loads(params_json))


def instance_seed(family: str, split: str, index: int, params: dict[str, Any]) -> int:
    key = f"{family}|{split}|{index}|{json.dumps(params, sort_keys=True)}"
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")


class TaskFamily(ABC):
    """One enterprise task family. Subclasses define the class attributes and the abstract methods."""

    name: str
    title: str
    facts: tuple[DomainFact, ...] = ()
    constraints: tuple[Constraint, ...] = ()
    split_sizes: ClassVar[dict[str, int]] = {"train": 60, "val": 50, "test": 50}
    default_params: ClassVar[dict[str, Any]] = {"difficulty": 2, "size": 1}

    # ---------------------------------------------------------------- generation
    def generate(self, split: str, n: int | None = None, seed: int = 0, **params: Any) -> list[TaskInstance]:
        """`n` instances of the fixed split; seed 0 takes them in order, other seeds sample."""
        if split not in self.split_sizes:
            raise ValueError(f"unknown split {split!r} (splits: {sorted(self.split_sizes)})")
        size = self.split_sizes[split]
        n = size if n is None else n
        if not 0 < n <= size:
            raise ValueError(f"n must be in 1..{size} for split {split!r}, got {n}")
        unknown = set(params) - set(self.default_params)
        if unknown:
            raise ValueError(f"unknown parameters {sorted(unknown)} (known: {sorted(self.default_params)})")
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
            raise ValueError(f"bad instance id {instance_id!r} for family {self.name!r}") from e
        if split not in self.split_sizes:
            raise ValueError(f"bad instance id {instance_id!r}: unknown split {split!r} (splits: {sorted(self.split_sizes)})")
        if not 0 <= i < self.split_sizes[split]:
            raise ValueError(
                f"bad instance id {instance_id!r}: the {split} split of {self.name} has instances 0..{self.split_sizes[split] - 1}"
            )
        return self.instance_at(split, i, **params)

    # ---------------------------------------------------------------- per family
    def world(self, seed: int, params: dict[str, Any]) -> Any:
        """The instance's hidden data, a pure function of (seed, params), built once and cached."""
        return _cached_world(self.name, seed, json.dumps(params, sort_keys=True))

    @abstractmethod
    def build_world(self, seed: int, params: dict[str, Any]) -> Any:
        """Generate the world of one instance from its seed and knobs (called through `world`)."""

    @abstractmethod
    def instruction(self, world: Any, instance_id: str) -> str:
        """The task text the agent receives."""

    @abstractmethod
    def make_env(self, instance: TaskInstance) -> TaskEnv: ...

    @abstractmethod
    def check(self, env: TaskEnv) -> Outcome: ...

    @abstractmethod
    def plan(self, instance: TaskInstance, knowledge: Knowledge) -> list[PlanStep]: ...

    @abstractmethod
    def baseline_tools(self) -> tuple[ToolSpec, ...]: ...

    # ---------------------------------------------------------------- shared
    def answer_key(self, instance: TaskInstance) -> dict[str, Any]:
        """The testbed's ground truth for an instance (trap labels): analysis code only, never a role."""
        return {"traps": list(getattr(self.world(instance.seed, instance.params), "traps", ()))}

    @cached_property
    def handbook(self) -> Handbook:
        """The family's domain documentation (`handbook.md` beside the family's module)."""
        import sys

        return Handbook.load(Path(sys.modules[type(self).__module__].__file__).parent / "handbook.md")

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
        impl = {t.name: t.impl for t in env.tool_specs()}
        for step in self.plan(instance, self.full_knowledge()):
            result = env.call(impl.get(step.tool, step.tool), dict(step.args))
            if result.error:
                raise AssertionError(f"reference step {step.tool} failed on {instance.id}: {result.content}")
        return self.check(env), env
