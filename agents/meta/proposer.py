"""The proposer: an expert model (any litellm model, or `synthetic/meta`) reads the evidence, may
consult the family's handbook through tools, and returns structured `HarnessEdit`s as JSON. Each
proposed edit is parsed and applied on its own; one that does not parse or does not apply is rejected
with the reason and costs nothing else."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.executor import Completion
from agents.handbook_tools import HANDBOOK_TOOLS, run_handbook_tool
from harness_store.edits import EditError, apply_edit, edit_from_json
from harness_store.values import Harness, HarnessEdit
from tasks.handbook import Handbook

PROMPT = (Path(__file__).resolve().parent.parent / "prompts" / "proposer.md").read_text()
HANDBOOK_NOTE = (
    "You can consult the company's handbook for this task family with the tools search_handbook and "
    "read_handbook before you answer; domain rules the agent needs are often written there."
)
EVIDENCE_FENCE = "```json"
Complete = Callable[[str, list[dict[str, Any]], list[dict[str, Any]], int], Completion]


@dataclass(frozen=True)
class Proposal:
    edit: HarnessEdit | None
    candidate: Harness | None
    error: str | None
    raw: dict[str, Any] | str


def proposer_messages(evidence: dict[str, Any], k: int, handbook: bool = False) -> list[dict[str, Any]]:
    body = json.dumps(evidence, indent=1, sort_keys=True, default=str)
    system = PROMPT.format(k=k) + ("\n\n" + HANDBOOK_NOTE if handbook else "")
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": f"Evidence:\n{EVIDENCE_FENCE}\n{body}\n```\nPropose up to {k} edits."},
    ]


def evidence_from_messages(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The inverse of `proposer_messages` (used by the synthetic proposer)."""
    text = next(m.get("content") or "" for m in messages if m.get("role") == "user")
    start = text.index(EVIDENCE_FENCE) + len(EVIDENCE_FENCE)
    return json.loads(text[start : text.index("```", start)])


def parse_response(text: str, harness: Harness) -> list[Proposal]:
    """Proposals from a model answer: tolerant of code fences and prose around one JSON object."""
    match = re.search(r"\{.*\}", text or "", re.DOTALL)
    if not match:
        return [Proposal(None, None, "answer contains no JSON object", text or "")]
    try:
        obj = json.loads(match.group(0))
    except json.JSONDecodeError as e:
        return [Proposal(None, None, f"answer is not valid JSON: {e.msg}", text)]
    except (ValueError, RecursionError) as e:  # an integer past Python's digit limit, nesting too deep
        return [Proposal(None, None, f"answer is not usable JSON: {type(e).__name__}", text)]
    edits = obj.get("edits") if isinstance(obj, dict) else None
    if not isinstance(edits, list):
        return [Proposal(None, None, "answer has no 'edits' list", obj)]
    out = []
    for raw in edits:
        try:
            edit = edit_from_json(raw)
            out.append(Proposal(edit, apply_edit(harness, edit), None, raw))
        except EditError as e:
            out.append(Proposal(None, None, str(e), raw))
    return out


class LLMProposer:
    """`handbook`: the family's documentation, offered as tools (None: the proposer works from the
    evidence alone). At most `max_tool_rounds` rounds of tool calls, then the model must answer."""

    def __init__(self, model: str, complete: Complete, handbook: Handbook | None = None, max_tool_rounds: int = 4):
        self.model = model
        self.complete = complete
        self.handbook = handbook
        self.max_tool_rounds = max_tool_rounds

    def propose(self, evidence: dict[str, Any], harness: Harness, k: int, seed: int) -> tuple[list[Proposal], Completion]:
        messages = proposer_messages(evidence, k, handbook=self.handbook is not None)
        used = Completion({}, 0, 0, 0.0)
        for round_ in range(self.max_tool_rounds + 1):
            tools = HANDBOOK_TOOLS if self.handbook is not None and round_ < self.max_tool_rounds else []
            comp = self.complete(self.model, messages, tools, seed)
            used = Completion(
                comp.message,
                used.prompt_tokens + comp.prompt_tokens,
                used.completion_tokens + comp.completion_tokens,
                used.cost_usd + comp.cost_usd,
            )
            calls = comp.message.get("tool_calls") or []
            if not calls or not tools:
                break
            messages.append({"role": "assistant", "content": comp.message.get("content") or "", "tool_calls": calls})
            for c in calls:
                fn = c.get("function") or {}
                result = run_handbook_tool(self.handbook, fn.get("name", ""), fn.get("arguments") or "{}")
                messages.append({"role": "tool", "tool_call_id": c.get("id", ""), "content": result})
        return parse_response(used.message.get("content") or "", harness)[:k], used
