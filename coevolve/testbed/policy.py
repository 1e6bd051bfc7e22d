"""Synthetic agents (docs/ARCHITECTURE.md §5): seeded, stochastic policies that react to the harness mechanically.

Each turn the policy rebuilds its state from the messages it can see, takes the next step of the
family's plan, and can fail in one of five ways:

- implicit-knowledge: a fact the step needs is neither known nor stated in the visible harness text
  (stated = its concept is carried and not negated, see `coevolve.tasks.rules.Rule`); the policy then guesses
  it right only at its `guess_rate`, otherwise takes the plausible wrong branch. A fact the harness
  contradicts (its negation or a reversal stated) takes the wrong branch even when the profile knows
  it: the model follows its instructions, so a harness that states a wrong rule hurts;
- tool-use: malformed arguments at the profile's error rate; a validation hook's answer is always
  acted on, an environment error only at the `repair_rate`;
- long-context: an observation the step reads is no longer visible in full;
- instruction-following: an instruction constraint the harness does not state is heeded only at the
  `heed_rate`;
- planning: a batched plan longer than the profile's capacity is cut short with a premature finish.

Sampling: every draw comes from a generator seeded by (instance, model, seed, turn, what the model
sees), so one instance passes on some seeds and fails on others, and any change to the harness text
resamples — as with a real model sampled at a temperature. `temperature` sharpens (<1) or flattens
(>1) every probability; at 0 the policy takes the likelier branch every time. A request's temperature
(a harness's decoding policy) replaces the profile's.

Constrained decoding (`constrained=True`: the request asked for one schema-valid call): the policy
makes exactly one call a turn — a batched planner takes its plan one step at a time, as the grammar
admits one call — and never drops a required argument (a malformed call is what the schema masks
out). The provider (`coevolve.testbed.provider`) checks the reply against the requested schema and
answers with its JSON, as a server with structured output does.

What the policy did and why (its deviation from a fully informed action, the harness sentences it
relied on) goes into the reply's `testbed` metadata, which the executor stores in the trajectory's
ground-truth field for analysis code only. These agents are a testbed, never evidence about real
models.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import takewhile
from typing import Any

from coevolve.agents.context import approx_tokens, is_cut, message_tokens
from coevolve.errors import BadInput
from coevolve.tasks import get_family
from coevolve.tasks.base import Knowledge, PlanStep, TaskFamily
from coevolve.tasks.rules import Concept
from coevolve.text import json_object

TASK_ID = re.compile(r"\(Task id: ([^)\s]+)\)")
HOOK_PREFIXES = ("[validate_args]", "[finish_checklist]", "[progress_reminder]")
# A harness can ask a batched planner to go step by step; it counts when the text carries this concept.
STEPWISE = Concept(
    (
        ("one tool call", "one call", "a single tool call", "a single call", "one action", "one step", "one tool"),
        ("per turn", "each turn", "at a time", "per message", "every turn", "before the next"),
    ),
    unless=("unless", "except", "may batch", "can batch"),  # a conditional request leaves the style as it is
)


@dataclass(frozen=True)
class SyntheticProfile:
    name: str
    knows: str = "common"  # "common": the facts a family marks common; "all": all but its rare ones
    extra_facts: frozenset[str] = frozenset()  # learned from an adapter
    guess_rate: float = 0.2  # P(an unknown, unstated fact is applied anyway)
    heed_rate: float = 1.0  # P(an instruction constraint the harness does not state is heeded)
    error_rate: float = 0.0  # P(malformed arguments on a call with required arguments)
    repair_rate: float = 1.0  # P(redoing a call after an environment error)
    rereads: bool = False  # re-query data that is no longer visible instead of acting without it
    temperature: float = 1.0
    context_window: int = 128_000
    planning_capacity: int = 12
    style: str = "stepwise"  # stepwise | batched: the profile's own pace
    batch_rate: float | None = None  # P(batching at a turn); None: 1 for batched, 0 for stepwise (adapters set it)
    explains: bool = False  # says in its message which rules a step applies (experts reason aloud)
    only_finish: bool = False  # the floor every checker must score 0
    # nominal $ per token, so that dollar budgets are exercised offline (not a real price)
    usd_per_input_token: float = 0.1e-6
    usd_per_output_token: float = 0.4e-6


PROFILES: dict[str, SyntheticProfile] = {
    "expert": SyntheticProfile(
        "expert",
        knows="all",
        guess_rate=0.4,
        heed_rate=0.92,
        error_rate=0.02,
        repair_rate=0.95,
        rereads=True,
        planning_capacity=12,
        style="batched",
        explains=True,
        usd_per_input_token=2e-6,
        usd_per_output_token=8e-6,
    ),
    "weak": SyntheticProfile(
        "weak",
        knows="common",
        guess_rate=0.25,
        heed_rate=0.2,
        error_rate=0.15,
        repair_rate=0.4,
        context_window=8_000,
        planning_capacity=1,
        style="stepwise",
    ),
    "finish-only": SyntheticProfile("finish-only", only_finish=True),
    # the offline proposer (coevolve/testbed/meta.py), priced like an expert, and its control that
    # proposes generic edits only
    "meta": SyntheticProfile("meta", usd_per_input_token=2e-6, usd_per_output_token=8e-6),
    "meta-generic": SyntheticProfile("meta-generic", usd_per_input_token=2e-6, usd_per_output_token=8e-6),
    # the judge (coevolve/testbed/roles.py): locates failures and scores rewrites from what it is shown
    "judge": SyntheticProfile("judge", usd_per_input_token=2e-6, usd_per_output_token=8e-6),
}
# Fully informed, error-free policies: the "right action for this state" that counterfactual replay
# substitutes for one turn of a failed rollout (the testbed's answer key, never a role).
ORACLES: dict[str, SyntheticProfile] = {
    f"oracle-{style}": SyntheticProfile(
        f"oracle-{style}", knows="oracle", heed_rate=1.0, repair_rate=1.0, rereads=True, temperature=0.0,
        planning_capacity=99, style=style,
    )
    for style in ("stepwise", "batched")
}


@dataclass(frozen=True)
class SyntheticReply:
    message: dict[str, Any]
    prompt_tokens: int
    completion_tokens: int
    testbed: dict[str, Any] | None = None  # ground truth for analysis code (see module doc)
    cost_usd: float = 0.0


def profile_for(model: str, adapter: dict[str, Any] | None = None) -> SyntheticProfile:
    """`model` is the part after `synthetic/` (e.g. `weak`); `adapter` a learned synthetic adapter."""
    p = PROFILES.get(model) or ORACLES.get(model)
    if p is None:
        raise BadInput(f"unknown synthetic model {model!r} (models: {', '.join(PROFILES)})")
    if adapter:
        p = replace(
            p,
            extra_facts=p.extra_facts | frozenset(adapter.get("facts", ())),
            error_rate=float(adapter.get("error_rate", p.error_rate)),
            style=adapter.get("style", p.style),
            batch_rate=adapter.get("batch_rate", p.batch_rate),
        )
    return p


def _seeded(*parts: Any) -> random.Random:
    return random.Random(int.from_bytes(hashlib.sha256("|".join(map(str, parts)).encode()).digest()[:8], "big"))


def sharpen(p: float, temperature: float) -> float:
    """A Bernoulli probability at a sampling temperature (the logits log p, log 1-p divided by T)."""
    if p <= 0.0 or p >= 1.0:
        return min(1.0, max(0.0, p))
    if temperature <= 0:
        return 1.0 if p > 0.5 else 0.0
    a, b = p ** (1 / temperature), (1 - p) ** (1 / temperature)
    return a / (a + b)


@dataclass
class _Call:
    name: str
    args: dict[str, Any] | None
    result: str | None
    result_index: int | None  # index of the tool message in `messages`
    turn: int  # index of the assistant message among assistant messages


def _calls(messages: list[dict[str, Any]]) -> list[_Call]:
    results = {m.get("tool_call_id"): (i, m.get("content") or "") for i, m in enumerate(messages) if m.get("role") == "tool"}
    out = []
    turn = -1
    for m in messages:
        if m.get("role") != "assistant":
            continue
        turn += 1
        for c in m.get("tool_calls") or ():
            fn = c.get("function") or {}
            idx, content = results.get(c.get("id"), (None, None))
            out.append(_Call(fn.get("name", ""), json_object(fn.get("arguments")), content, idx, turn))
    return out


def _is_error(content: str | None) -> bool:
    return content is None or content.startswith(("error", *HOOK_PREFIXES))


def _hook_answer(content: str | None) -> bool:
    return (content or "").startswith(HOOK_PREFIXES)


def _seen(messages: list[dict[str, Any]], window: int) -> set[int]:
    """Indices of the tool results the model reads in full: not cut by the context policy and, when
    the conversation exceeds the model's window, not among the oldest results that overflow it."""
    sizes = [message_tokens(m) for m in messages]
    total = sum(sizes)
    seen = set()
    for i in (i for i, m in enumerate(messages) if m.get("role") == "tool"):  # oldest first
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


def harness_text(messages: list[dict[str, Any]], seen: set[int]) -> str:
    """What the harness says that the model can see: the system prompt and hook messages."""
    return "\n".join(
        (m.get("content") or "")
        for i, m in enumerate(messages)
        if m.get("role") == "system"
        or (m.get("role") == "user" and _hook_answer(m.get("content")))
        or (i in seen and _hook_answer(m.get("content")))
    )


class SyntheticPolicy:
    def __init__(self, profile: SyntheticProfile):
        self.profile = profile

    def known_facts(self, family: TaskFamily) -> frozenset[str]:
        if self.profile.knows == "oracle":
            return frozenset(f.id for f in family.facts)
        if self.profile.knows == "all":
            return frozenset(f.id for f in family.facts if not f.rare) | self.profile.extra_facts
        return frozenset(f.id for f in family.facts if f.common) | self.profile.extra_facts

    def respond(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], seed: int, model: str, constrained: bool = False
    ) -> SyntheticReply:
        prompt_tokens = sum(message_tokens(m) for m in messages)
        user = next((m.get("content") or "" for m in messages if m.get("role") == "user"), "")
        match = TASK_ID.search(user)
        if not match:
            say = "I cannot find a task id in the conversation."
            return SyntheticReply({"role": "assistant", "content": say}, prompt_tokens, approx_tokens(say))
        if self.profile.only_finish:
            call = {"id": "call_finish", "type": "function", "function": {"name": "finish", "arguments": "{}"}}
            return SyntheticReply({"role": "assistant", "content": "Done.", "tool_calls": [call]}, prompt_tokens, 2)
        family = get_family(match.group(1).split("/")[0])
        instance = family.instance(match.group(1))
        schemas = {t["function"]["name"]: t["function"].get("parameters", {}) for t in tools}
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        seen_digest = hashlib.sha256(json.dumps(messages, sort_keys=True, default=str).encode()).hexdigest()[:16]
        rng = _seeded(instance.id, model, seed, turn, seen_digest)
        T = self.profile.temperature

        def draw(p: float) -> bool:
            q = sharpen(p, T)
            return q >= 1.0 or (q > 0.0 and rng.random() < q)  # certain outcomes use no randomness

        # What the agent knows this turn: its own facts, what the visible harness text states, and lucky guesses.
        # The model follows its instructions: a rule the visible harness text contradicts (states the wrong
        # rule, or denies the right one) is dropped even when the profile knows it, and is never guessed;
        # where the text both states and contradicts a rule, the later statement wins (`Rule.stance`).
        seen = _seen(messages, self.profile.context_window)
        text = harness_text(messages, seen)
        own = self.known_facts(family)
        fact_stance = {f.id: f.stance(text) for f in family.facts}
        stated = {i for i, s in fact_stance.items() if s is True}
        contradicted = {i for i, s in fact_stance.items() if s is False}
        unknown = [f.id for f in family.facts if f.id not in own | stated | contradicted]
        guessed = {i for i in unknown if draw(self.profile.guess_rate)}
        facts = (own | stated | guessed) - contradicted
        constraint_stance = {c.id: c.stance(text) for c in family.constraints}
        stated_constraints = {i for i, s in constraint_stance.items() if s is True}
        defied = {i for i, s in constraint_stance.items() if s is False}
        heeded = stated_constraints | {
            c.id
            for c in family.constraints
            if c.id not in stated_constraints | defied and draw(self.profile.heed_rate)
        }
        knowledge = Knowledge(frozenset(facts), frozenset(heeded))
        full = family.full_knowledge()

        # Progress: walk the calls made so far against the plan.
        plan = family.plan(instance, knowledge)
        calls = _calls(messages)
        matched: dict[int, _Call] = {}
        p = 0
        for call in calls:
            if p < len(plan) and call.name == plan[p].tool:
                matched[p] = call
                p += not _hook_answer(call.result)
                continue
            for j in range(p - 1, -1, -1):  # a redo of an earlier step replaces its record
                if plan[j].tool == call.name:
                    matched[j] = call
                    break
        # React to an environment error in the last turn: redo that step (at the repair rate).
        last_turn = calls[-1].turn if calls else -1
        failed_last = sorted(j for j, c in matched.items() if c.turn == last_turn and _is_error(c.result) and not _hook_answer(c.result))
        if failed_last and draw(self.profile.repair_rate):
            p = min(p, failed_last[0])
        # Redo a step once the harness has made its constraint visible and the done call misses it.
        for j in range(min(p, len(plan))):
            step = plan[j]
            if step.constraint and step.constraint in stated_constraints and matched[j].args != step.args:
                p = j
                break

        def available(u: int) -> bool:
            c = matched.get(u)
            return c is not None and c.result_index in seen and not _is_error(c.result)

        # A careful agent re-reads data it can no longer see before acting on it.
        if self.profile.rereads and p < len(plan):
            p = next((u for u in plan[p].uses if not available(u)), p)
        p = min(p, len(plan) - 1)  # everything done: finish (again)

        def plan_for(n: int) -> tuple[list[PlanStep], Knowledge]:
            k = replace(knowledge, cut=frozenset(u for u in plan[n].uses if not available(u)))
            return family.plan(instance, k), k

        batch = [p]
        rate = self.profile.batch_rate if self.profile.batch_rate is not None else float(self.profile.style == "batched")
        batching = not constrained and not STEPWISE.stated_in(text) and draw(rate)
        if batching:
            batch += takewhile(lambda n: all(u < p for u in plan[n].uses), range(p + 1, len(plan)))
        cause = None
        if len(batch) > self.profile.planning_capacity:
            batch = batch[: self.profile.planning_capacity] + [len(plan) - 1]
            cause = {"category": "planning", "detail": f"batched {len(plan) - p} steps, capacity {self.profile.planning_capacity}"}

        out_calls = []
        relied_on: list[str] = []
        full_plan = family.plan(instance, full)
        for n in batch:
            steps, k = plan_for(n)
            step = steps[n]
            args = dict(step.args)
            if cause is None and args != full_plan[n].args:
                cause = self._attribute(family, instance, n, step, k, matched, own)
            relied_on += self._relied_on(family, instance, n, step, k, text, own)
            slip = not constrained and draw(self.profile.error_rate)
            mutated = _mutate(args, schemas.get(step.tool, {}), rng) if slip else None
            if mutated:
                args, what = mutated
                cause = cause or {"category": "tool-use", "detail": f"{step.tool}: {what}", "step": n}
            out_calls.append(
                {
                    "id": f"call_{turn}_{len(out_calls)}",
                    "type": "function",
                    "function": {"name": step.tool, "arguments": json.dumps(args, sort_keys=True)},
                }
            )
        content = "Next: " + ", ".join(c["function"]["name"] for c in out_calls) + "."
        if self.profile.explains:
            content += "".join(f" {r}" for r in self._reasons(family, instance, batch, knowledge, plan_for))
        message = {"role": "assistant", "content": content, "tool_calls": out_calls}
        completion = approx_tokens(content) + sum(approx_tokens(c["function"]["arguments"]) for c in out_calls)
        testbed = {
            "cause": cause,
            "relied_on": list(dict.fromkeys(relied_on)),
            "oracle": f"synthetic/oracle-{'batched' if batching else 'stepwise'}",
        }
        return SyntheticReply(message, prompt_tokens, completion, testbed)

    @staticmethod
    def _reasons(family: TaskFamily, instance: Any, batch: list[int], knowledge: Knowledge, plan_for: Any) -> list[str]:
        """The rules (facts and constraints) the batch's arguments depend on, as this model states them."""
        out: list[str] = []
        for n in batch:
            steps, k = plan_for(n)
            for f in family.facts:
                if f.id in steps[n].facts and f.id in k.facts:
                    without = family.plan(instance, replace(k, facts=k.facts - {f.id}))
                    if without[n].args != steps[n].args and f.statement not in out:
                        out.append(f.statement)
            c = next((c for c in family.constraints if c.id == steps[n].constraint and c.id in k.constraints), None)
            if c and family.plan(instance, replace(k, constraints=k.constraints - {c.id}))[n].args != steps[n].args:
                out.append(c.statement)
        return out

    def _relied_on(
        self, family: TaskFamily, instance: Any, n: int, step: PlanStep, k: Knowledge, text: str, own: frozenset[str]
    ) -> list[str]:
        """The harness sentences this step acted on: facts or constraints the visible harness text
        states (and the policy did not know anyway) that this step's arguments depend on."""
        out = []
        for f in family.facts:
            if f.id not in step.facts or f.id not in k.facts or f.id in own:
                continue
            where = f.concept.where(text)
            if where and family.plan(instance, replace(k, facts=k.facts - {f.id}))[n].args != step.args:
                out.append(where)
        c = next((c for c in family.constraints if c.id == step.constraint), None)
        where = c.concept.where(text) if c else None
        without = replace(k, constraints=k.constraints - {c.id}) if c else k
        if where and c.id in k.constraints and family.plan(instance, without)[n].args != step.args:
            out.append(where)
        return out

    def _attribute(
        self,
        family: TaskFamily,
        instance: Any,
        n: int,
        step: PlanStep,
        k: Knowledge,
        matched: dict[int, _Call],
        own: frozenset[str],
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


def learn_adapter(rows: Sequence[Any], base_model: str) -> dict[str, Any]:
    """A synthetic adapter learned from training rows (docs/ARCHITECTURE.md §5), through the same job interface as
    LoRA: facts stated (and not contradicted) in loss-bearing turns become known; the share of
    loss-bearing turns that batch several tool calls becomes the rate at which the adapted model
    batches (SFT matches its data's distribution), without raising planning capacity; loss-bearing
    well-formed tool calls lower the argument error rate."""
    from coevolve.tasks import family_names

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
            # a turn that contradicts a fact (anywhere in it) does not teach it
            learned |= {f.id for f in facts if f.stated_in(text) and not f.contradicted_in(text)}
            tool_calls += sum(json_object(c["function"].get("arguments")) is not None for c in calls)
    name = base_model.split("/", 1)[-1].split("@")[0]
    base = PROFILES.get(name, PROFILES["weak"])
    return {
        "base_model": base_model,
        "facts": sorted(learned),
        "style": "batched" if turns and batched / turns > 0.5 else base.style,
        "batch_rate": round(batched / turns, 4) if turns else (1.0 if base.style == "batched" else 0.0),
        "error_rate": round(base.error_rate / (1 + tool_calls / 100), 4),
        "rows": len(rows),
        "trained_turns": turns,
    }
