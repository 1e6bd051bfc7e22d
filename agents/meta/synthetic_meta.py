"""`synthetic/meta`: an offline proposer that answers the proposer prompt mechanically.

It reads the evidence block, counts the recorded causes of the failures it is shown, and proposes one
edit per frequent cause — a domain fact only when failures show it missing. A seeded share of its
proposals is useless or harmful (and a few do not parse), so that acceptance is exercised."""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from typing import Any

from tasks import get_family

USELESS = [
    {"op": "set_section", "name": "tone", "text": "Be polite, concise and professional in every message."},
    {"op": "append_section", "name": "role", "text": "You are proud of careful work."},
    {"op": "add_hook", "kind": "progress_reminder", "params": {"after_turns": 6}},
]
HARMFUL = [
    {"op": "set_max_turns", "max_turns": 2},
    {"op": "set_context_policy", "strategy": "truncate-middle", "token_budget": 500, "keep_last": 1},
]
USELESS_SHARE = 0.2
HARMFUL_SHARE = 0.1
BROKEN_SHARE = 0.05


def propose(messages: list[dict[str, Any]], seed: int) -> str:
    from agents.meta.proposer import evidence_from_messages

    evidence = evidence_from_messages(messages)
    k = _asked_k(messages)
    family = get_family(evidence["family"])
    # edits already tried on this very harness (an edit rejected earlier may pay off after others)
    tried = {
        json.dumps(h.get("ops"), sort_keys=True)
        for h in evidence.get("history", ())
        if h.get("base") == evidence.get("harness_id")
    }
    harness_text = evidence.get("harness", "")
    rng = random.Random(int(hashlib.sha256(f"{seed}|{messages[-1]['content']}".encode()).hexdigest()[:16], 16))

    causes = [f.get("recorded_cause") or {} for f in evidence.get("failures", ())]
    counts = Counter(c.get("category", "other") for c in causes)
    missing_facts = Counter(fid for c in causes if c.get("category") == "implicit-knowledge" for fid in c.get("facts", ()))
    by_cause: dict[str, list[dict[str, Any]]] = {}  # candidate edits per failure category
    facts = [f for fid, _ in missing_facts.most_common() for f in family.facts if f.id == fid]
    recipes = [{"op": "add_recipe", "name": f.id, "text": f.statement} for f in facts]
    knowledge = by_cause.setdefault("implicit-knowledge", [])
    if len(recipes) > 1:  # every fact the failures show missing, as one edit
        knowledge.append(_edit(recipes, "failures show the agent lacks these domain facts", "implicit-knowledge"))
    for f, op in zip(facts, recipes):
        knowledge.append(_edit([op], f"failures show the agent does not know: {f.statement}", "implicit-knowledge"))
    if "validate_args" not in harness_text:
        by_cause["tool-use"] = [_edit([{"op": "add_hook", "kind": "validate_args", "params": {}}],
                                      "tool calls with malformed arguments went through unchecked", "tool-use")]
    rules = by_cause.setdefault("instruction-following", [])
    if "finish_checklist" not in harness_text:
        rules.append(_edit([{"op": "add_hook", "kind": "finish_checklist", "params": {}}],
                           "the agent finished without meeting every instruction", "instruction-following"))
    for c in family.constraints:
        rules.append(_edit([{"op": "set_section", "name": f"rule_{c.id}", "text": c.statement}],
                           "state the instruction constraint the agent skipped", "instruction-following"))
    by_cause["long-context"] = [_edit([{"op": "set_context_policy", "strategy": "pin-notes", "token_budget": 6000, "keep_last": 4}],
                                      "the data a step needed had scrolled out of the agent's view", "long-context")]
    by_cause["planning"] = [_edit([{"op": "set_section", "name": "planning", "text": "Make one tool call per turn and check each result before the next step."}],
                                  "batched plans broke down", "planning")]
    # most frequent cause first; one edit per cause before any cause gets a second one
    ranked = [cat for cat, _ in counts.most_common() if by_cause.get(cat)]
    candidates = [by_cause[cat][i] for i in range(max(map(len, by_cause.values()))) for cat in ranked if i < len(by_cause[cat])]
    candidates = [c for c in candidates if json.dumps(c["ops"], sort_keys=True) not in tried]

    out: list[dict[str, Any] | str] = []
    for cand in candidates[:k]:
        roll = rng.random()
        if roll < BROKEN_SHARE:
            out.append({"rationale": "broken", "ops": [{"op": "add_recipe", "name": cand["ops"][0].get("name", "x")}]})
        elif roll < BROKEN_SHARE + HARMFUL_SHARE:
            out.append(_edit([rng.choice(HARMFUL)], "tighten the agent's budget", "other"))
        elif roll < BROKEN_SHARE + HARMFUL_SHARE + USELESS_SHARE:
            out.append(_edit([rng.choice(USELESS)], "general guidance", "other"))
        else:
            out.append(cand)
    if not out:  # nothing specific to fix: still propose something, as a real proposer would
        out.append(_edit([rng.choice(USELESS)], "general guidance", "other"))
    return json.dumps({"edits": out})


def _edit(ops: list[dict[str, Any]], rationale: str, targets: str) -> dict[str, Any]:
    return {"rationale": rationale, "targets": targets, "ops": ops}


def _asked_k(messages: list[dict[str, Any]]) -> int:
    tail = (messages[-1].get("content") or "").rsplit("Propose up to ", 1)
    try:
        return max(1, int(tail[1].split()[0]))
    except (IndexError, ValueError):
        return 3
