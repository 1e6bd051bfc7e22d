"""A trajectory as the expert and the judge may read it (docs/ARCHITECTURE.md §5): the task, the tools, each turn's
assistant text, tool calls and observations, and the grader's report — built from
`Trajectory.public_view()`, so the testbed's answer key never enters a role's prompt.

Roles receive it as one JSON block (`payload_message`), which an LLM reads as well as a parser does;
the synthetic roles parse it back with `payload_from_messages`.
"""

from __future__ import annotations

import json
from typing import Any

from coevolve.agents.executor import assistant_positions
from coevolve.text import clipped
from coevolve.values import Trajectory

FENCE = "```json"
OBSERVATION_CHARS = 4000


def turn_records(traj: Trajectory, upto: int | None = None) -> list[dict[str, Any]]:
    """Turns 0..upto-1 (all when None): assistant text, calls, observations, hook/context events."""
    t = traj.public_view()
    positions = assistant_positions(t.messages)
    out = []
    for i, rec in enumerate(t.turns[: upto if upto is not None else len(t.turns)]):
        content = t.messages[positions[i]].get("content") or "" if i < len(positions) else ""
        out.append(
            {
                "turn": i,
                "assistant": content,
                "calls": [{"name": c["name"], "arguments": c["arguments"]} for c in rec.tool_calls],
                "observations": [clipped(r, OBSERVATION_CHARS) for r in rec.tool_results],
                "events": [e for e in rec.events if e.startswith(("hook:", "context:", "error:"))],
            }
        )
    return out


def grader_report(traj: Trajectory) -> list[dict[str, Any]]:
    if traj.outcome is None:
        return [{"id": "rollout", "passed": False, "reason": f"the rollout did not finish: {traj.error_detail}"}]
    return list(traj.outcome.detail.get("requirements", ()))


def tool_schemas(traj: Trajectory) -> list[dict[str, Any]]:
    """The tools the model was offered (from the harness, via the family). A family's helper tools
    (`coevolve.tasks.helpers`) are offered only by harnesses that add them: they are listed when the rollout
    called one, else left out (a trajectory does not carry its harness)."""
    from coevolve.tasks import get_family
    from coevolve.tasks.helpers import helper_specs

    family = get_family(traj.instance.family)
    helpers = {t.impl for t in helper_specs(family)}
    called = {c.get("function", {}).get("name") for m in traj.messages for c in m.get("tool_calls") or ()}
    return [
        {"name": s.name, "description": s.description, "parameters": s.parameters}
        for s in family.make_env(traj.instance).tool_specs()
        if s.impl not in helpers or s.name in called
    ]


def first_error_turn(traj: Trajectory) -> int | None:
    """The rule-based first guess: the first turn with an error observation (hook or environment)."""
    for i, rec in enumerate(traj.turns):
        if any(r.startswith(("error", "[validate_args]")) for r in rec.tool_results):
            return i
    return None


def payload_message(payload: dict[str, Any], ask: str) -> dict[str, Any]:
    body = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)  # compact: tokens cost money
    # A backtick can only stand inside a JSON string, where \u0060 means the same: a model's own ``` (real
    # models write markdown) must not close the fence early.
    body = body.replace("`", "\\u0060")
    return {"role": "user", "content": f"{FENCE}\n{body}\n```\n{ask}"}


def payload_from_messages(messages: list[dict[str, Any]]) -> dict[str, Any]:
    text = next(m.get("content") or "" for m in messages if m.get("role") == "user")
    start = text.index(FENCE) + len(FENCE)
    return json.loads(text[start : text.index("```", start)])


def answer_json(text: str) -> dict[str, Any] | None:
    """The first JSON object in a model's answer (tolerant of fences and prose), or None."""
    import re

    match = re.search(r"\{.*\}", text or "", re.DOTALL)
    if not match:
        return None
    try:
        obj = json.loads(match.group(0))
    except (ValueError, RecursionError):  # not JSON, an integer past Python's digit limit, nesting too deep
        return None
    return obj if isinstance(obj, dict) else None
