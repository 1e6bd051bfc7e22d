"""Condensed evidence for the proposer: failed rollouts and the edit history with outcomes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from harness_store.values import Harness, Trajectory

TAIL_MESSAGES = 6
MAX_CHARS = 600


def _clip(text: str, n: int = MAX_CHARS) -> str:
    return text if len(text) <= n else text[: n // 2] + f" …[{len(text) - n} chars]… " + text[-n // 2 :]


def describe_failure(t: Trajectory) -> dict[str, Any]:
    from agents.report import primary_cause

    tail = []
    for m in t.messages[-TAIL_MESSAGES:]:
        entry = {"role": m["role"], "content": _clip(m.get("content") or "")}
        if m.get("tool_calls"):
            entry["tool_calls"] = [
                {"name": c["function"]["name"], "arguments": _clip(c["function"]["arguments"], 300)}
                for c in m["tool_calls"]
            ]
        tail.append(entry)
    failure = {
        "instance": t.instance.id,
        "instruction": _clip(t.instance.instruction),
        "turns": len(t.turns),
        "ended": t.error_detail or "finished",
        "checker": {k: _clip(json.dumps(v, default=str), 300) for k, v in (t.outcome.detail if t.outcome else {}).items()},
        "transcript_tail": tail,
        "tool_errors": sum(1 for turn in t.turns for e in turn.events if e.startswith("error:")),
    }
    cause = primary_cause(t)
    if cause:
        failure["recorded_cause"] = cause  # synthetic models only
    return failure


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
