"""Every value that crosses a process boundary (docs/ARCHITECTURE.md §3), as frozen dataclasses.

The store persists all of them, so they live here, beside the codec that encodes them
(`coevolve.codec`). Mutable containers never appear in a value: sequences are tuples and
JSON-like payloads (tool schemas, hook params, OpenAI messages) are plain dicts that no code
mutates after construction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, is_dataclass, replace
from functools import cached_property
from typing import Any

from coevolve.codec import OMIT_DEFAULT, content_id, register
from coevolve.errors import BadInput

HOOK_EVENTS: tuple[str, ...] = ("before_call", "after_call", "on_turn", "on_finish")

CONTEXT_STRATEGIES: tuple[str, ...] = ("keep-all", "truncate-middle", "summarise", "pin-notes")

TOOL_CALL_MODES: tuple[str, ...] = ("free", "constrained")


# --------------------------------------------------------------------------------------- harness
@dataclass(frozen=True)
class PromptSection:
    name: str
    text: str


@dataclass(frozen=True)
class ToolSpec:
    """A tool the model may call. `impl` names the environment tool that executes it, so an edit
    can rename or re-describe a tool without touching the environment."""

    name: str
    description: str
    parameters: dict[str, Any]
    impl: str


@dataclass(frozen=True)
class HookSpec:
    event: str
    kind: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ContextPolicy:
    strategy: str = "keep-all"
    token_budget: int = 32_000
    keep_last: int = 6  # messages always kept verbatim at the tail (truncate-middle, summarise)


@dataclass(frozen=True)
class Recipe:
    name: str
    text: str


@dataclass(frozen=True)
class DecodingPolicy:
    """How the model is asked to answer each turn (the gateway turns it into request parameters).

    - `tool_calls`: "free" — the model writes what it likes (text, any number of tool calls, which the
      server's tool parser reads); "constrained" — every reply is exactly one call of one of the offered
      tools whose arguments satisfy that tool's JSON schema (structured output over the union of the
      tools' schemas, turned into an OpenAI tool call by the gateway).
    - `temperature`: the sampling temperature; None sends none (the provider's default).
    - `max_tokens`: the reply's token cap; None sends none (the server's default).

    The defaults send nothing (the provider's own behaviour), and a harness holding them encodes (and so
    is identified) as a harness without a decoding policy.
    """

    tool_calls: str = "free"
    temperature: float | None = None
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        # 0 and 0.0 are one temperature: one encoding, one content id
        if isinstance(self.temperature, int) and not isinstance(self.temperature, bool):
            object.__setattr__(self, "temperature", float(self.temperature))

    @property
    def is_default(self) -> bool:
        return self == DecodingPolicy()

    def describe(self) -> str:
        temperature = "provider default" if self.temperature is None else f"{self.temperature:g}"
        cap = "server default" if self.max_tokens is None else str(self.max_tokens)
        return f"tool_calls={self.tool_calls} temperature={temperature} max_tokens={cap}"


@dataclass(frozen=True)
class Harness:
    family: str
    system_prompt: tuple[PromptSection, ...]
    tools: tuple[ToolSpec, ...]
    hooks: tuple[HookSpec, ...] = ()
    context: ContextPolicy = ContextPolicy()
    recipes: tuple[Recipe, ...] = ()
    max_turns: int = 24
    decoding: DecodingPolicy = field(default=DecodingPolicy(), metadata={OMIT_DEFAULT: True})

    @cached_property
    def id(self) -> str:
        """The sha256 of the canonical encoding (computed once: a harness is immutable)."""
        return content_id(self)

    def section(self, name: str) -> PromptSection | None:
        return next((s for s in self.system_prompt if s.name == name), None)

    def tool(self, name: str) -> ToolSpec | None:
        return next((t for t in self.tools if t.name == name), None)

    def describe(self) -> str:
        """A stable, readable rendering of every part (CLI show/diff, proposer prompts)."""
        lines = [f"family: {self.family}", f"max_turns: {self.max_turns}", "system_prompt:"]
        for s in self.system_prompt:
            lines.append(f"  [{s.name}]")
            lines += [f"    {line}" for line in s.text.splitlines()]
        lines.append("tools:")
        lines += [f"  {t.name} (impl {t.impl}): {t.description}" for t in self.tools]
        lines.append("hooks:")
        lines += [f"  {k.event}: {k.kind} {k.params}" for k in self.hooks] or ["  (none)"]
        c = self.context
        lines.append(f"context: {c.strategy} budget={c.token_budget} keep_last={c.keep_last}")
        lines.append("recipes:")
        lines += [f"  {r.name}: {r.text}" for r in self.recipes] or ["  (none)"]
        # Shown once it differs from the default, so that the readable form of every harness that
        # predates the policy (what `harness diff` compares and proposers read) is unchanged.
        if not self.decoding.is_default:
            lines.append(f"decoding: {self.decoding.describe()}")
        return "\n".join(lines)

    def render_system(self) -> str:
        """The system message the executor sends: sections in order, then the recipes."""
        parts = [s.text.strip() for s in self.system_prompt if s.text.strip()]
        if self.recipes:
            parts.append("Domain notes:\n" + "\n".join(f"- {r.name}: {r.text.strip()}" for r in self.recipes))
        return "\n\n".join(parts)


# ---------------------------------------------------------------------------------- harness edits
@dataclass(frozen=True)
class SetSection:
    name: str
    text: str


@dataclass(frozen=True)
class AppendSection:
    name: str
    text: str


@dataclass(frozen=True)
class RemoveSection:
    name: str


@dataclass(frozen=True)
class AddTool:
    tool: ToolSpec


@dataclass(frozen=True)
class AlterTool:
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


@dataclass(frozen=True)
class RemoveTool:
    name: str


@dataclass(frozen=True)
class AddHook:
    hook: HookSpec


@dataclass(frozen=True)
class RemoveHook:
    event: str
    kind: str


@dataclass(frozen=True)
class SetContextPolicy:
    policy: ContextPolicy


@dataclass(frozen=True)
class AddRecipe:
    recipe: Recipe


@dataclass(frozen=True)
class SetMaxTurns:
    max_turns: int


@dataclass(frozen=True)
class SetDecoding:
    policy: DecodingPolicy


EditOp = (
    SetSection
    | AppendSection
    | RemoveSection
    | AddTool
    | AlterTool
    | RemoveTool
    | AddHook
    | RemoveHook
    | SetContextPolicy
    | AddRecipe
    | SetMaxTurns
    | SetDecoding
)


@dataclass(frozen=True)
class HarnessEdit:
    ops: tuple[EditOp, ...]
    rationale: str = ""
    targets: str = ""  # the failure (category or trajectory id) the edit targets


# ----------------------------------------------------------------------------------- models, tasks
ADAPTER_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")


def check_adapter_id(adapter_id: str) -> str:
    """An adapter id is a name, never a path (the store keeps adapter `X` in `adapters/X`): letters, digits,
    '.', '_' and '-', at most 128 of them, no leading '.' and no '..'. Returns it; ValueError otherwise."""
    if not isinstance(adapter_id, str) or not ADAPTER_ID.fullmatch(adapter_id) or ".." in adapter_id:
        raise BadInput(f"adapter id {adapter_id!r} must be letters, digits, '.', '_' or '-' "
                       "(at most 128; no '/', no '..', not starting with '.')")
    return adapter_id


SYNTHETIC = "synthetic"  # the testbed's provider


@dataclass(frozen=True)
class ModelRef:
    """`provider/model[@adapter]`, e.g. `hosted_vllm/qwen3-coder@adapter-7`, `synthetic/weak`."""

    provider: str
    model: str
    adapter: str | None = None

    @classmethod
    def parse(cls, text: str) -> ModelRef:
        route, _, adapter = text.partition("@")
        provider, sep, model = route.partition("/")
        if not sep or not provider or not model or (_ and not adapter):
            raise BadInput(f"model ref {text!r} is not of the form provider/model[@adapter]")
        if adapter:
            check_adapter_id(adapter)
        return cls(provider, model, adapter or None)

    @property
    def is_synthetic(self) -> bool:
        """A testbed model (`synthetic/...`), whose outcomes the testbed's rules decide."""
        return self.provider == SYNTHETIC

    def __str__(self) -> str:
        return f"{self.provider}/{self.model}" + (f"@{self.adapter}" if self.adapter else "")


def with_adapter(model: str, adapter: str | None) -> str:
    """`model` served with `adapter` (`model@adapter`); `model` itself when there is none."""
    return f"{model}@{adapter}" if adapter else model


def is_synthetic(model: str) -> bool:
    """Whether a model reference (`provider/model[@adapter]`, unchecked) names a testbed model."""
    return str(model).partition("/")[0] == SYNTHETIC


@dataclass(frozen=True)
class TaskInstance:
    family: str
    id: str
    split: str
    seed: int
    instruction: str
    params: dict[str, Any] = field(default_factory=dict)  # difficulty/size knobs it was generated with


@dataclass(frozen=True)
class Outcome:
    passed: bool
    score: float
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TurnRecord:
    index: int
    tool_calls: tuple[dict[str, Any], ...]  # {"id", "name", "arguments"}
    tool_results: tuple[str, ...]
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    events: tuple[str, ...] = ()  # hook firings, context-policy actions, error observations


LOOP_DETAIL = "loop:"  # how a trajectory's error_detail starts when the executor ended it for looping


@dataclass(frozen=True)
class Trajectory:
    instance: TaskInstance
    harness_id: str
    model: str
    seed: int
    messages: tuple[dict[str, Any], ...]
    turns: tuple[TurnRecord, ...]
    outcome: Outcome | None
    error: str = "none"  # none / task / infra
    error_detail: str = ""
    cost_usd: float = 0.0
    # The testbed's answer key (docs/ARCHITECTURE.md §5): trap labels, what a synthetic model recorded per turn, and
    # for a failed synthetic rollout its deviations and decisive turn. Analysis code reads it; no role
    # (proposer, expert, judge) ever receives it — they get `public_view()`.
    ground_truth: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        """The content id of what happened: every field but the turns' wall-clock latencies, so a
        rollout replayed with the same instance, harness, model and seed has the same id in every run
        (correction rows cite it, and dataset and adapter ids are derived from those rows)."""
        return content_id(replace(self, turns=tuple(replace(t, latency_s=0.0) for t in self.turns)))

    def public_view(self) -> Trajectory:
        """The trajectory as a role may see it: everything but the ground truth."""
        return replace(self, ground_truth={})

    @property
    def passed(self) -> bool:
        return self.error == "none" and self.outcome is not None and self.outcome.passed

    @property
    def loop_ended(self) -> bool:
        """The executor ended it for repeating one call (`coevolve.agents.executor.looping`)."""
        return self.error_detail.startswith(LOOP_DETAIL)

    @property
    def tokens(self) -> int:
        return sum(t.prompt_tokens + t.completion_tokens for t in self.turns)



# ------------------------------------------------------------------------ correction and training
@dataclass(frozen=True)
class FailureLocus:
    trajectory_id: str
    turn_index: int
    reason: str


@dataclass(frozen=True)
class TrainingRow:
    messages: tuple[dict[str, Any], ...]  # assistant messages carry "train": bool
    tools: tuple[dict[str, Any], ...]
    provenance: dict[str, Any]  # {"kind": corrected/self-pass/expert-full, sources...}

    def to_json(self) -> dict[str, Any]:
        """The JSONL form (docs/ARCHITECTURE.md §3): {"messages", "tools", "provenance"}."""
        return {"messages": list(self.messages), "tools": list(self.tools), "provenance": dict(self.provenance)}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> TrainingRow:
        return cls(tuple(obj["messages"]), tuple(obj.get("tools") or ()), dict(obj.get("provenance") or {}))


@dataclass(frozen=True)
class AdapterRef:
    id: str
    base_model: str
    path: str
    dataset_hash: str
    train_config: dict[str, Any]
    metrics: dict[str, Any] = field(default_factory=dict)
    # What the adapter was trained under, read from its rows' provenance (`coevolve.services.training`):
    # {"harnesses": [{"harness_id", "decoding": DecodingPolicy fields, "rows"}...], "rows_without_harness"}.
    # {} for an adapter registered from a folder (or recorded before the field existed).
    trained_under: dict[str, Any] = field(default_factory=dict, metadata={OMIT_DEFAULT: True})

    def decodings(self) -> list[DecodingPolicy]:
        """The decoding policies of the harnesses it was trained under (distinct, in record order)."""
        out: list[DecodingPolicy] = []
        for h in self.trained_under.get("harnesses") or ():
            policy = DecodingPolicy(**h.get("decoding", {}))
            if policy not in out:
                out.append(policy)
        return out


@dataclass(frozen=True)
class FailureLabel:
    category: str  # other / tool-use / instruction-following / implicit-knowledge / long-context / planning
    rationale: str


FAILURE_CATEGORIES: tuple[str, ...] = (
    "other",
    "tool-use",
    "instruction-following",
    "implicit-knowledge",
    "long-context",
    "planning",
)


# ------------------------------------------------------------------------------------ run records
@dataclass(frozen=True)
class EvalSummary:
    family: str
    split: str
    harness_id: str
    model: str
    seed: int
    n: int
    passed: int
    errors: dict[str, int]
    mean_turns: float
    total_tokens: int
    cost_usd: float
    loop_ended: int = 0  # rollouts the executor ended for repeating one call

    @property
    def pass_rate(self) -> float:
        scored = self.n - self.errors.get("infra", 0)
        return self.passed / scored if scored else 0.0


register(obj for obj in list(globals().values()) if isinstance(obj, type) and is_dataclass(obj)
         and obj.__module__ == __name__)
