"""Condensed evidence for the proposer: failed rollouts as a grader and a reader of the transcript
would see them, and the edit history with outcomes.

Information boundary (docs/ARCHITECTURE.md §5): evidence is built from `Trajectory.public_view()` only — the
messages, the turn records (tool calls, observations, events) and the checker's report. The testbed's
answer key (`Trajectory.ground_truth`: recorded causes, trap labels, decisive turns) never enters it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from coevolve.agents.context import approx_tokens
from coevolve.text import clipped
from coevolve.values import Harness, Trajectory

TAIL_MESSAGES = 6
MAX_CHARS = 600


def failed_requirements(t: Trajectory) -> list[dict[str, str]]:
    """The checker's failed requirement lines ({id, reason})."""
    if t.outcome is None:
        return []
    return [
        {"id": str(r.get("id", "")), "reason": str(r.get("reason", ""))}
        for r in t.outcome.detail.get("requirements", ())
        if not r.get("passed")
    ]


def describe_failure(t: Trajectory) -> dict[str, Any]:
    t = t.public_view()
    tail = []
    for m in t.messages[-TAIL_MESSAGES:]:
        entry = {"role": m["role"], "content": clipped(m.get("content") or "", MAX_CHARS)}
        if m.get("tool_calls"):
            entry["tool_calls"] = [
                {"name": c["function"]["name"], "arguments": clipped(c["function"]["arguments"], 300)}
                for c in m["tool_calls"]
            ]
        tail.append(entry)
    observations = [r for turn in t.turns for r in turn.tool_results]
    return {
        "instance": t.instance.id,
        "instruction": clipped(t.instance.instruction, MAX_CHARS),
        "turns": len(t.turns),
        "ended": t.error_detail or "finished",
        "failed_requirements": [{**r, "reason": clipped(r["reason"], 300)} for r in failed_requirements(t)],
        "transcript_tail": tail,
        "tool_errors": [clipped(r, 200) for r in observations if r.startswith("error")][:5],
        "tool_error_count": sum(1 for r in observations if r.startswith("error")),
        "calls_per_turn_max": max((len(turn.tool_calls) for turn in t.turns), default=0),
        "observation_tokens": sum(approx_tokens(r) for r in observations),
        "context_events": sorted({e.split(":")[1] for turn in t.turns for e in turn.events if e.startswith("context:")}),
    }


def build_evidence(
    family: str, harness: Harness, failures: Sequence[Trajectory], history: Sequence[dict[str, Any]], limit: int
) -> dict[str, Any]:
    return {
        "family": family,
        "harness_id": harness.id[:12],
        "harness": harness.describe(),
        "failures": [describe_failure(t) for t in failures[:limit]],
        "failures_total": len(failures),
        "history": list(history),
    }
