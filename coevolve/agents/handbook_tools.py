"""The handbook as tools any role's model can call: `search_handbook` and `read_handbook`.

Proposers and the expert rewriter reach a family's domain documentation only through these (docs/ARCHITECTURE.md §5);
the executor's agent sees handbook text only when the harness includes it.
"""

from __future__ import annotations

import json
from typing import Any

from coevolve.agents.fit import Budget, fit_tool_result
from coevolve.tasks.handbook import Handbook
from coevolve.text import json_object

HANDBOOK_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "search_handbook",
            "description": "Search the task family's handbook (the company's domain documentation). "
            "Returns the best-matching sections with a snippet each.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "minLength": 1, "description": "keywords or a question"},
                    "k": {"type": "integer", "minimum": 1, "maximum": 10, "description": "sections to return (5)"},
                },
                "required": ["query"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "read_handbook",
            "description": "Read one handbook section in full, by the id that search_handbook returned.",
            "parameters": {
                "type": "object",
                "properties": {"section": {"type": "string", "minLength": 1}},
                "required": ["section"],
                "additionalProperties": False,
            },
        },
    },
]


def run_handbook_tool(handbook: Handbook, name: str, raw_args: str | dict[str, Any]) -> str:
    """Execute one handbook tool call; bad calls come back as `error: ...` observations."""
    try:
        args = json.loads(raw_args) if isinstance(raw_args, str) else raw_args
        if not isinstance(args, dict):
            return "error: arguments must be a JSON object"
        if name == "search_handbook":
            return json.dumps(handbook.search(str(args.get("query", "")), int(args.get("k", 5))))
        if name == "read_handbook":
            s = handbook.read(str(args.get("section", "")))
            return f"## {s.title} (id: {s.id})\n{s.text}"
        return f"error: unknown tool {name!r} (tools: search_handbook, read_handbook)"
    except (ValueError, TypeError, OverflowError, RecursionError) as e:  # e.g. "k": 1e400 is infinity
        return f"error: {e}"


def answer_handbook_calls(handbook: Handbook, message: dict[str, Any], messages: list[dict[str, Any]],
                          budget: Budget, tools: list[dict[str, Any]]) -> tuple[list[str], bool]:
    """Append a reply carrying tool calls and the calls' results to `messages`, each result clipped to
    the room the window leaves: (the cuts made, whether a result found no room, so the model must answer)."""
    calls = message["tool_calls"]
    messages.append({"role": "assistant", "content": message.get("content") or "", "tool_calls": calls})
    cuts, full = [], False
    for c in calls:
        fn = c.get("function") or {}
        result = run_handbook_tool(handbook, fn.get("name", ""), fn.get("arguments") or "{}")
        content, cut = fit_tool_result(budget, messages, tools, result)
        if cut:
            cuts.append(cut)
            full = full or content.startswith("[cut:")
        messages.append({"role": "tool", "tool_call_id": c.get("id", ""), "content": content})
    return cuts, full


# ------------------------------------------------------------------ a tool-using role's handbook rounds
# The offline roles (synthetic/meta, the synthetic expert rewriter) consult the handbook the way a
# tool-using model does: search, read the best sections, then answer from what they read.
HandbookCalls = dict[str, list[tuple[dict[str, Any], str]]]


def handbook_calls(messages: list[dict[str, Any]]) -> HandbookCalls:
    """The handbook calls made so far in a conversation and their results: tool name -> [(args, result)]."""
    results = {m.get("tool_call_id"): m.get("content") or "" for m in messages if m.get("role") == "tool"}
    out: HandbookCalls = {"search_handbook": [], "read_handbook": []}
    for m in messages:
        for c in m.get("tool_calls") or () if m.get("role") == "assistant" else ():
            fn = c.get("function") or {}
            args = json_object(fn.get("arguments")) or {}
            out.setdefault(fn.get("name", ""), []).append((args, results.get(c.get("id"), "")))
    return out


def _searched(searches: list[tuple[dict[str, Any], str]], known_text: str) -> list[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """Per `search_handbook` result that parses to a non-empty list: its hits, and those whose snippet the
    role does not already have in `known_text` (e.g. the harness)."""
    flat = " ".join(known_text.split())
    out = []
    for _, result in searches:
        try:
            hits = json.loads(result)
        except json.JSONDecodeError:
            continue
        if isinstance(hits, list) and hits:
            out.append((hits, [h for h in hits if not ((snippet := (h.get("snippet") or "")[:80]) and snippet in flat)]))
    return out


def rank_sections(searches: list[tuple[dict[str, Any], str]], known_text: str) -> list[str]:
    """Section ids by summed relative score over the searches, skipping sections whose snippet the
    role already has in `known_text` (e.g. the harness)."""
    score: dict[str, float] = {}
    for hits, new in _searched(searches, known_text):
        top = max(h.get("score", 0.0) for h in hits) or 1.0
        for h in new:
            score[h["id"]] = score.get(h["id"], 0.0) + h.get("score", 0.0) / top
    return [sid for sid, _ in sorted(score.items(), key=lambda kv: (-kv[1], kv[0]))]


def distinct_hits(searches: list[tuple[dict[str, Any], str]], known_text: str) -> list[str]:
    """Section ids by how clearly some search singled them out: a hit's score over the mean score of
    its search's hits, the best over the searches (ties by id), skipping sections whose snippet the
    role already has in `known_text`. Unlike `rank_sections`, a section that one specific search finds
    comes before one that many vague searches find."""
    best: dict[str, float] = {}
    for hits, new in _searched(searches, known_text):
        mean = sum(h.get("score", 0.0) for h in hits) / len(hits) or 1.0
        for h in new:
            best[h["id"]] = max(best.get(h["id"], 0.0), h.get("score", 0.0) / mean)
    return [sid for sid, _ in sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))]


def read_sections(reads: list[tuple[dict[str, Any], str]]) -> list[tuple[str, str]]:
    """(section id, text) of every successful `read_handbook` result, in reading order."""
    out = []
    for args, result in reads:
        if result.startswith("error"):
            continue
        body = result.split("\n", 1)[1] if "\n" in result else result
        out.append((str(args.get("section", "note")), body.strip()))
    return out


def handbook_call(name: str, args: dict[str, Any], i: int, prefix: str) -> dict[str, Any]:
    """One OpenAI tool call of a handbook tool, with a deterministic id."""
    return {"id": f"call_{prefix}_{name}_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
