"""Summaries of a batch of trajectories (pure; used by the CLI, the meta-agent and the benches)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from coevolve.values import EvalSummary, Trajectory, is_synthetic

TESTBED_NOTICE = (
    "synthetic/* models are the project's offline testbed: their results test the machinery and "
    "the method's mechanics, they are not evidence about real models"
)
# Beside the notice wherever a table shows synthetic imitation/correction arms (docs/ARCHITECTURE.md §5): the rules of
# `coevolve.testbed.policy.learn_adapter` decide those arms by construction.
SYNTHETIC_ADAPTER_RULES = (
    "synthetic adapters decide the imitation and correction arms by construction (docs/ARCHITECTURE.md §5): facts stated "
    "in loss-bearing turns become known; the share of loss-bearing turns that batch several calls becomes "
    "the adapted model's batching rate, without raising planning capacity; well-formed loss-bearing tool "
    "calls lower the argument error rate"
)


def synthetic_adapters(model: str, backend: str | None = None) -> bool:
    """Whether adapters of `model` (trained with `backend`, when known) are synthetic ones, whose
    outcome `SYNTHETIC_ADAPTER_RULES` decide: a synthetic model's, or any trained by the synthetic backend."""
    return backend == "synthetic" or (backend is None and is_synthetic(model))


def testbed_notice(*models: str) -> dict[str, str]:
    """`{"notice": TESTBED_NOTICE}` when any of `models` is a testbed model, else `{}`: merged into a
    result so that every number the testbed decided says so."""
    return {"notice": TESTBED_NOTICE} if any(is_synthetic(m) for m in models) else {}


def summarise(trajectories: Sequence[Trajectory], *, split: str = "", seed: int = 0) -> EvalSummary:
    if not trajectories:
        raise ValueError("no trajectories to summarise")
    first = trajectories[0]
    errors = Counter(t.error for t in trajectories if t.error != "none")
    return EvalSummary(
        family=first.instance.family,
        split=split or first.instance.split,
        harness_id=first.harness_id,
        model=first.model,
        seed=seed,
        n=len(trajectories),
        passed=sum(t.passed for t in trajectories),
        errors=dict(errors),
        mean_turns=round(sum(len(t.turns) for t in trajectories) / len(trajectories), 3),
        total_tokens=sum(t.tokens for t in trajectories),
        cost_usd=round(sum(t.cost_usd for t in trajectories), 6),
        loop_ended=sum(t.loop_ended for t in trajectories),
    )


# ------------------------------------------------------------------ the testbed's answer key
# Analysis code only: these read `Trajectory.ground_truth`, which no role ever receives. The decisive
# turn is there only once the counterfactual has been merged in (`coevolve.testbed.counterfactual`): a rollout
# records the per-turn causes, not the counterfactual.


def recorded_causes(t: Trajectory) -> list[dict[str, Any]]:
    """The failure causes a synthetic model recorded, turn by turn (with the turn index)."""
    return [{**c["cause"], "turn": i} for i, c in enumerate(t.ground_truth.get("turns") or ()) if c and c.get("cause")]


def primary_cause(t: Trajectory) -> dict[str, Any] | None:
    """The cause of a failed rollout: the one recorded at its decisive turn when the trajectory carries
    its counterfactual and replay found one (`coevolve.testbed.counterfactual.with_counterfactuals`), else the
    first recorded cause that was not repaired on the spot (a malformed call that a validation hook
    bounced was repaired). Real models record none."""
    causes = recorded_causes(t)
    decisive = t.ground_truth.get("decisive_turn")
    at_decisive = [c for c in causes if c["turn"] == decisive]
    if at_decisive:
        return at_decisive[0]
    for c in causes:
        repaired = c.get("category") == "tool-use" and "hook:validate_args" in t.turns[c["turn"]].events
        if not repaired:
            return c
    return None


def failure_causes(trajectories: Sequence[Trajectory]) -> dict[str, int]:
    """The primary cause of each failed trajectory, by category (decisive-turn causes for trajectories
    that carry their counterfactual, the first unrepaired cause for the others: see `primary_cause`)."""
    out: Counter[str] = Counter()
    for t in trajectories:
        if t.passed or t.error == "infra":
            continue
        cause = primary_cause(t)
        out[cause.get("category", "other") if cause else "unrecorded"] += 1
    return dict(out)
