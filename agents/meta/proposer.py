"""The proposer: an expert model (any litellm model, or `synthetic/meta`) reads the evidence and
returns structured `HarnessEdit`s as JSON. Each proposed edit is parsed and applied on its own; one
that does not parse or does not apply is rejected with the reason and costs nothing else."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.executor import Completion
from harness_store.edits import EditError, apply_edit, edit_from_json
from harness_store.values import Harness, HarnessEdit

PROMPT = (Path(__file__).resolve().parent.parent / "prompts" / "proposer.md").read_text()
EVIDENCE_FENCE = "```json"
Complete = Callable[[str, list[dict[str, Any]], int], Completion]


@dataclass(frozen=True)
class Proposal:
    edit: HarnessEdit | None
    candidate: Harness | None
    error: str | None
    raw: dict[str, Any] | str


def proposer_messages(evidence: dict[str, Any], k: int) -> list[dict[str, Any]]:
    body = json.dumps(evidence, indent=1, sort_keys=True, default=str)
    return [
        {"role": "system", "content": PROMPT.format(k=k)},
        {"role": "user", "content": f"Evidence:\n{EVIDENCE_FENCE}\n{body}\n```\nPropose up to {k} edits."},
    ]


def evidence_from_messages(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The inverse of `proposer_messages` (used by the synthetic proposer)."""
    text = messages[-1].get("content") or ""
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
    def __init__(self, model: str, complete: Complete):
        self.model = model
        self.complete = complete

    def propose(self, evidence: dict[str, Any], harness: Harness, k: int, seed: int) -> tuple[list[Proposal], Completion]:
        comp = self.complete(self.model, proposer_messages(evidence, k), seed)
        return parse_response(comp.message.get("content") or "", harness)[:k], comp
