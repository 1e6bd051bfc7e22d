"""Summaries of a batch of trajectories (pure; used by the CLI, the meta-agent and the benches)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from harness_store.values import EvalSummary, Trajectory


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
    )


def failure_causes(trajectories: Sequence[Trajectory]) -> dict[str, int]:
    """The first recorded cause of each failed trajectory, by category (synthetic models record it)."""
    out: Counter[str] = Counter()
    for t in trajectories:
        if t.passed or t.error == "infra":
            continue
        causes = t.causes
        out[causes[0].get("category", "other") if causes else "unrecorded"] += 1
    return dict(out)
