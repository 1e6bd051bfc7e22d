"""Edit-usage tracking: for each accepted edit, was it used in a rollout?

- a tool added or altered: the tool was called;
- a hook: it fired;
- a context policy: it elided or summarised something;
- a prompt section or recipe: the model acted on it — synthetic models report the harness sentences
  they acted on (in the trajectory's ground truth, which this analysis may read); for other models,
  a phrase of the text (its name, or a distinctive 4-word run) appears in what the assistant wrote.
Removals and turn limits are structural (they apply to every rollout) and are not rated.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from coevolve.tasks.rules import sentence_windows
from coevolve.values import (
    AddHook,
    AddRecipe,
    AddTool,
    AlterTool,
    AppendSection,
    HarnessEdit,
    SetContextPolicy,
    SetSection,
    Trajectory,
)


def _assistant_text(t: Trajectory) -> str:
    parts = []
    for m in t.messages:
        if m.get("role") == "assistant":
            parts.append(m.get("content") or "")
            parts += [c["function"].get("arguments") or "" for c in m.get("tool_calls") or ()]
    return " ".join(parts).lower()


def _text_used(text: str, name: str, t: Trajectory) -> bool:
    reports = [turn for turn in t.ground_truth.get("turns") or () if turn is not None]
    relied = [r.lower() for turn in reports for r in turn.get("relied_on") or ()]
    sentences = [s for s in sentence_windows(text) if len(s) >= 15]
    if any(s in r or r in s for r in relied for s in sentences):
        return True
    if reports:
        return False  # the model reports what it acted on, and this was not it
    said = _assistant_text(t)
    words = re.findall(r"[a-z0-9]+", text.lower())
    runs = {" ".join(words[i : i + 4]) for i in range(max(0, len(words) - 3))}
    return name.lower().replace("_", " ") in said or any(r in said for r in runs)


def op_used(op: Any, t: Trajectory) -> bool | None:
    """True/False, or None for structural operations that are not rated."""
    events = [e for turn in t.turns for e in turn.events]
    called = {c["name"] for turn in t.turns for c in turn.tool_calls}
    match op:
        case AddTool(tool=tool):
            return tool.name in called
        case AlterTool(name=name):
            return name in called
        case AddHook(hook=h):
            return f"hook:{h.kind}" in events
        case SetContextPolicy():
            return any(e.startswith("context:") for e in events)
        case AddRecipe(recipe=r):
            return _text_used(r.text, r.name, t)
        case SetSection(name=name, text=text) | AppendSection(name=name, text=text):
            return _text_used(text, name, t)
        case _:
            return None


def edit_used(edit: HarnessEdit, t: Trajectory) -> bool | None:
    verdicts = [v for v in (op_used(op, t) for op in edit.ops) if v is not None]
    return any(verdicts) if verdicts else None


def edit_usage(edits: Sequence[HarnessEdit], trajectories: Sequence[Trajectory]) -> list[dict[str, Any]]:
    """Usage rate of each edit over the rollouts (rated rollouts only)."""
    out = []
    for e in edits:
        verdicts = [v for v in (edit_used(e, t) for t in trajectories) if v is not None]
        out.append(
            {
                "ops": [type(op).__name__ for op in e.ops],
                "rationale": e.rationale,
                "used": sum(verdicts),
                "rollouts": len(verdicts),
                "rate": round(sum(verdicts) / len(verdicts), 4) if verdicts else None,
            }
        )
    return out
