"""Synthetic agents (DESIGN §5): deterministic, seeded policies that react to the harness mechanically.

Each turn the policy rebuilds its state from the messages it can see, takes the next step of the
family's plan, and fails in one recorded way:

- implicit-knowledge: a fact the step needs is neither known nor stated in the visible harness text;
- tool-use: malformed arguments at the profile's error rate, repaired only when a validation hook
  answers (a plain environment error is shrugged off and the agent moves on);
- long-context: an observation the step reads is no longer visible in full;
- instruction-following: an instruction constraint is skipped unless the harness covers it;
- planning: a batched plan longer than the profile's capacity is cut short with a premature finish.

The true cause goes into the reply's metadata and from there into the trajectory. These are a
testbed, never evidence about real models.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from agents.context import approx_tokens, is_cut, message_tokens
from tasks import get_family
from tasks.base import Knowledge, PlanStep, TaskFamily

TASK_ID = re.compile(r"\(Task id: ([^)\s]+)\)")
HOOK_PREFIXES = ("[validate_args]", "[finish_checklist]", "[progress_reminder]")
STEPWISE_CUE = "one tool call per turn"


@dataclass(frozen=True)
class SyntheticProfile:
    name: str
    knows: str = "common"  # "common": the facts a family marks common; "all": every fact
    extra_facts: frozenset[str] = frozenset()  # learned from an adapter
    error_rate: float = 0.0
    context_window: int = 128_000
    planning_capacity: int = 12
    style: str = "stepwise"  # stepwise | batched
    follows_constraints: bool = True
    only_finish: bool = False  # the floor every checker must score 0
    # nominal $ per token, so that dollar budgets are exercised offline (not a real price)
    usd_per_input_token: float = 0.1e-6
    usd_per_output_token: float = 0.4e-6


PROFILES: dict[str, SyntheticProfile] = {
    "expert": SyntheticProfile(
        "expert",
        knows="all",
        error_rate=0.0,
        context_window=128_000,
        planning_capacity=12,
        style="batched",
        usd_per_input_token=2e-6,
        usd_per_output_token=8e-6,
    ),
    "weak": SyntheticProfile(
        "weak",
        knows="common",
        error_rate=0.15,
        context_window=8_000,
        planning_capacity=1,
        style="stepwise",
        follows_constraints=False,
    ),
    "finish-only": SyntheticProfile("finish-only", only_finish=True),
    # the offline proposer (agents/meta/synthetic_meta.py), priced like an expert
    "meta": SyntheticProfile("meta", knows="all", usd_per_input_token=2e-6, usd_per_output_token=8e-6),
}


@dataclass(frozen=True)
class SyntheticReply:
    message: dict[str, Any]
    prompt_tokens: int
    completion_tokens: int
    cause: dict[str, Any] | None = None
    cost_usd: float = 0.0
    relied_on: tuple[str, ...] = ()  # harness phrases the reply acted on (edit-usage tracking)


def profile_for(model: str, adapter: dict[str, Any] | None = None) -> SyntheticProfile:
    """`model` is the part after `synthetic/` (e.g. `weak`); `adapter` a learned synthetic adapter."""
    try:
        p = PROFILES[model]
    except KeyError:
        raise ValueError(f"unknown synthetic model {model!r} (models: {', '.join(PROFILES)})") from None
    if adapter:
        p = replace(
            p,
            extra_facts=p.extra_facts | frozenset(adapter.get("facts", ())),
            error_rate=float(adapter.get("error_rate", p.error_rate)),
            style=adapter.get("style", p.style),
        )
    return p


def _rng(*parts: Any) -> random.Random:
    return random.Random(int.from_bytes(hashlib.sha256("|".join(map(str, parts)).encode()).digest()[:8], "big"))


@dataclass
class _Call:
    name: str
    args: dict[str, Any] | None
    result: str | None
    result_index: int | None  # index of the tool message in `messages`


def _calls(messages: list[dict[str, Any]]) -> list[_Call]:
    results = {m.get("tool_call_id"): (i, m.get("content") or "") for i, m in enumerate(messages) if m.get("role") == "tool"}
    out = []
    for m in messages:
        if m.get("role") != "assistant":
            continue
        for c in m.get("tool_calls") or ():
            fn = c.get("function") or {}
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except json.JSONDecodeError:
                args = None
            idx, content = results.get(c.get("id"), (None, None))
            out.append(_Call(fn.get("name", ""), args if isinstance(args, dict) else None, content, idx))
    return out


def _is_error(content: str | None) -> bool:
    return content is None or content.startswith(("error", *HOOK_PREFIXES))


def _seen(messages: list[dict[str, Any]], window: int) -> set[int]:
    """Indices of the tool results the model reads in full: not cut by the context policy and, when
    the conversation exceeds the model's window, not among the oldest results that overflow it."""
    sizes = [message_tokens(m) for m in messages]
    total = sum(sizes)
    seen = set()
    tool_idx = [i for i, m in enumerate(messages) if m.get("role") == "tool"]
    for i in tool_idx:  # oldest first
        if total > window:
            total -= sizes[i]
            continue
        if not is_cut(messages[i].get("content") or ""):
            seen.add(i)
    return seen


def _mutate(args: dict[str, Any], schema: dict[str, Any], rng: random.Random) -> tuple[dict[str, Any], str] | None:
    """Drop one required argument (a malformed call a schema check catches); None when there is none."""
    required = [r for r in schema.get("required", ()) if r in args]
    if not required:
        return None
    victim = rng.choice(sorted(required))
    return {k: v for k, v in args.items() if k != victim}, f"dropped required argument {victim!r}"


class SyntheticPolicy:
    def __init__(self, profile: SyntheticProfile):
        self.profile = profile

    def known_facts(self, family: TaskFamily) -> frozenset[str]:
        if self.profile.knows == "all":
            return frozenset(f.id for f in family.facts)
        return frozenset(f.id for f in family.facts if f.common) | self.profile.extra_facts

    def respond(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], seed: int, model: str) -> SyntheticReply:
        prompt_tokens = sum(message_tokens(m) for m in messages)
        user = next((m.get("content") or "" for m in messages if m.get("role") == "user"), "")
        match = TASK_ID.search(user)
        if not match:
            return self._say("I cannot find a task id in the conversation.", prompt_tokens, {"category": "other", "detail": "no task id"})
        if self.profile.only_finish:
            call = {"id": "call_finish", "type": "function", "function": {"name": "finish", "arguments": "{}"}}
            return SyntheticReply({"role": "assistant", "content": "Done.", "tool_calls": [call]}, prompt_tokens, 2)
        family = get_family(match.group(1).split("/")[0])
        instance = family.instance(match.group(1))
        schemas = {t["function"]["name"]: t["function"].get("parameters", {}) for t in tools}

        # What the agent knows: its own facts plus whatever visible harness text states.
        seen = _seen(messages, self.profile.context_window)
        text = "\n".join(
            (m.get("content") or "")
            for i, m in enumerate(messages)
            if m.get("role") == "system"
            or (m.get("role") == "user" and (m.get("content") or "").startswith(HOOK_PREFIXES))
            or (i in seen and (m.get("content") or "").startswith(HOOK_PREFIXES))
        )
        facts = self.known_facts(family) | {f.id for f in family.facts if f.stated_in(text)}
        if self.profile.follows_constraints:
            constraints = frozenset(c.id for c in family.constraints)
        else:
            constraints = frozenset(c.id for c in family.constraints if c.stated_in(text))
        knowledge = Knowledge(frozenset(facts), constraints)
        full = family.full_knowledge()

        # Progress: walk the calls made so far against the plan.
        plan = family.plan(instance, knowledge)
        matched: dict[int, _Call] = {}
        attempts: dict[int, int] = {}
        p = 0
        for call in _calls(messages):
            if p < len(plan) and call.name == plan[p].tool:
                attempts[p] = attempts.get(p, 0) + 1
                matched[p] = call
                if not (call.result or "").startswith(HOOK_PREFIXES):
                    p += 1
                continue
            for j in range(p - 1, -1, -1):  # a redo of an earlier step replaces its record
                if plan[j].tool == call.name:
                    attempts[j] = attempts.get(j, 0) + 1
                    matched[j] = call
                    break
        # Redo a step once the harness has made its constraint visible and the done call misses it.
        for j in range(min(p, len(plan))):
            step = plan[j]
            if step.constraint and step.constraint in constraints and matched[j].args != step.args:
                p = j
                break
        if p >= len(plan):
            p = len(plan) - 1  # everything done: finish (again)

        def available(u: int) -> bool:
            c = matched.get(u)
            return c is not None and c.result_index in seen and not _is_error(c.result)

        def plan_for(n: int) -> tuple[list[PlanStep], Knowledge]:
            k = replace(knowledge, cut=frozenset(u for u in plan[n].uses if not available(u)))
            return family.plan(instance, k), k

        batch = [p]
        stepwise_asked = STEPWISE_CUE in text.lower()  # a harness can ask a batched planner to go stepwise
        if self.profile.style == "batched" and not stepwise_asked:
            n = p + 1
            while n < len(plan) and all(u < p for u in plan[n].uses):
                batch.append(n)
                n += 1
        cause = None
        if len(batch) > self.profile.planning_capacity:
            batch = batch[: self.profile.planning_capacity] + [len(plan) - 1]
            cause = {"category": "planning", "detail": f"batched {len(plan) - p} steps, capacity {self.profile.planning_capacity}"}

        calls = []
        relied_on: list[str] = []
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        full_plan = family.plan(instance, full)
        for n in batch:
            steps, k = plan_for(n)
            step = steps[n]
            args = dict(step.args)
            if cause is None and args != full_plan[n].args:
                cause = self._attribute(family, instance, n, step, k, matched)
            relied_on += self._relied_on(family, instance, n, step, k, text)
            rng = _rng(instance.id, model, seed, n, attempts.get(n, 0))
            mutated = _mutate(args, schemas.get(step.tool, {}), rng) if rng.random() < self.profile.error_rate else None
            if mutated:
                args, what = mutated
                cause = cause or {"category": "tool-use", "detail": f"{step.tool}: {what}", "step": n}
            calls.append(
                {
                    "id": f"call_{turn}_{len(calls)}",
                    "type": "function",
                    "function": {"name": step.tool, "arguments": json.dumps(args, sort_keys=True)},
                }
            )
        content = "Next: " + ", ".join(c["function"]["name"] for c in calls) + "."
        message = {"role": "assistant", "content": content, "tool_calls": calls}
        completion = approx_tokens(content) + sum(approx_tokens(c["function"]["arguments"]) for c in calls)
        return SyntheticReply(message, prompt_tokens, completion, cause, relied_on=tuple(dict.fromkeys(relied_on)))

    def _relied_on(
        self, family: TaskFamily, instance: Any, n: int, step: PlanStep, k: Knowledge, text: str
    ) -> list[str]:
        """The harness phrases this step acted on: facts or constraints stated in the visible harness
        text that this step's arguments depend on (without them the arguments would differ)."""
        low = text.lower()
        out = []
        for f in family.facts:
            stated = [c for c in f.cues if c.lower() in low]
            matters = stated and f.id in step.facts and f.id in k.facts
            if matters and family.plan(instance, replace(k, facts=k.facts - {f.id}))[n].args != step.args:
                out.append(stated[0])
        c = next((c for c in family.constraints if c.id == step.constraint), None)
        stated = [cue for cue in c.cues if cue.lower() in low] if c else []
        matters = stated and c.id in k.constraints
        if matters and family.plan(instance, replace(k, constraints=k.constraints - {c.id}))[n].args != step.args:
            out.append(stated[0])
        return out

    def _attribute(
        self, family: TaskFamily, instance: Any, n: int, step: PlanStep, k: Knowledge, matched: dict[int, _Call]
    ) -> dict[str, Any]:
        all_facts = frozenset(f.id for f in family.facts)
        missing = [f for f in step.facts if f not in k.facts]
        if missing and family.plan(instance, replace(k, facts=all_facts))[n].args != step.args:
            mattering = [
                f for f in missing if family.plan(instance, replace(k, facts=k.facts | {f}))[n].args != step.args
            ]
            return {"category": "implicit-knowledge", "facts": mattering or missing, "step": n}
        if step.constraint and step.constraint not in k.constraints:
            return {"category": "instruction-following", "constraint": step.constraint, "step": n}
        failed = [u for u in sorted(k.cut) if u in matched and _is_error(matched[u].result)]
        if failed:
            return {"category": "tool-use", "detail": f"acted without the data of failed step(s) {failed}", "step": n}
        if k.cut:
            return {"category": "long-context", "cut": sorted(k.cut), "step": n}
        return {"category": "other", "step": n}

    @staticmethod
    def _say(text: str, prompt_tokens: int, cause: dict[str, Any]) -> SyntheticReply:
        return SyntheticReply({"role": "assistant", "content": text}, prompt_tokens, approx_tokens(text), cause)


def respond(
    model: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    seed: int = 0,
    adapter: dict[str, Any] | None = None,
) -> SyntheticReply:
    profile = profile_for(model, adapter)
    if profile.name == "meta":
        from agents.meta.synthetic_meta import propose

        text = propose(messages, seed)
        prompt = sum(message_tokens(m) for m in messages)
        reply = SyntheticReply({"role": "assistant", "content": text}, prompt, approx_tokens(text))
    else:
        reply = SyntheticPolicy(profile).respond(messages, tools, seed, model)
    cost = reply.prompt_tokens * profile.usd_per_input_token + reply.completion_tokens * profile.usd_per_output_token
    return replace(reply, cost_usd=cost)


def learn_adapter(rows: Sequence[Any], base_model: str) -> dict[str, Any]:
    """A synthetic adapter learned from training rows (DESIGN §5), through the same job interface as
    LoRA: facts stated in loss-bearing turns become known; a majority of loss-bearing batched turns
    (several tool calls at once) shifts the style to batched without raising planning capacity;
    loss-bearing well-formed tool calls lower the argument error rate."""
    from tasks import family_names

    facts = [f for name in family_names() for f in get_family(name).facts]
    learned: set[str] = set()
    turns = batched = tool_calls = 0
    for row in rows:
        messages = row.messages if hasattr(row, "messages") else row["messages"]
        for m in messages:
            if m.get("role") != "assistant" or not m.get("train"):
                continue
            turns += 1
            calls = m.get("tool_calls") or []
            batched += len(calls) > 1
            text = (m.get("content") or "") + " " + " ".join(c["function"].get("arguments") or "" for c in calls)
            learned |= {f.id for f in facts if f.stated_in(text)}
            for c in calls:
                try:
                    tool_calls += isinstance(json.loads(c["function"].get("arguments") or "{}"), dict)
                except json.JSONDecodeError:
                    pass
    name = base_model.split("/", 1)[-1].split("@")[0]
    base = PROFILES.get(name, PROFILES["weak"])
    return {
        "base_model": base_model,
        "facts": sorted(learned),
        "style": "batched" if turns and batched / turns > 0.5 else base.style,
        "error_rate": round(base.error_rate / (1 + tool_calls / 100), 4),
        "rows": len(rows),
        "trained_turns": turns,
    }
