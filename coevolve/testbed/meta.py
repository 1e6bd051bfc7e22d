"""`synthetic/meta`: an offline proposer that answers the proposer prompt mechanically, from what a
real proposer would see (docs/ARCHITECTURE.md §5): the failed transcripts, the grader's failed requirements, the
harness, the edit history and — through the `search_handbook`/`read_handbook` tools, when offered —
the family's handbook. It never reads fact lists, recorded causes, trap labels or expected answers.

It works in the three rounds a tool-using model would:
1. search the handbook with the grader's failed requirements and the task's instruction as queries;
2. read the best-scoring sections the harness does not already contain;
3. answer with edits: the read sections as recipes (all together, then one by one), a finish
   checklist made of the grader's failure reasons, and generic edits for observable symptoms — a
   validation hook when calls came back with errors, a context policy when observations were large, a
   step-by-step section when the agent batched several calls into one turn, and — last, once the
   others are proposed or tried — constrained decoding (one schema-valid call a turn) when calls broke
   their tool's signature (the environment answered "bad arguments"; first, when most failures had errors on at least half
   their turns);
   and, first, once the harness constrains calls, the environment's computation tools the prompt
   lists as not yet in the harness, in one edit (a model that needs its calls constrained is not
   trusted with the computation either; under free calls they are not proposed).

`synthetic/meta-generic` is the control that proposes the generic edits only (no text taken from
the evidence or the handbook). A seeded share of proposals is useless or harmful (and a few do not
parse), so that acceptance is exercised."""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections import Counter
from typing import Any

from coevolve.agents.context import approx_tokens, message_tokens
from coevolve.agents.handbook_tools import distinct_hits, handbook_call, handbook_calls, read_sections
from coevolve.agents.transcript import payload_from_messages
from coevolve.testbed.policy import SyntheticReply

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
MAX_QUERIES = 8
MAX_READS = 6
SEARCH_K = 5
BAD_ARGUMENTS = "bad arguments"  # what an environment answers a call that breaks its tool's signature
CONSTRAINED_MARK = "tool_calls=constrained"  # how the harness text shows constrained decoding
LARGE_OBSERVATIONS = 5000  # tokens of tool output in one rollout that make a context policy worth trying
CHECKLIST_ITEMS = 4


def propose(messages: list[dict[str, Any]], tools: list[dict[str, Any]], seed: int, generic_only: bool = False):
    """One reply of the synthetic proposer: handbook tool calls, or the final JSON answer."""
    evidence = payload_from_messages(messages)
    offered = {t["function"]["name"] for t in tools or ()}
    done = handbook_calls(messages)
    prompt = sum(message_tokens(m) for m in messages)
    calls: list[dict[str, Any]] = []
    if not generic_only and "search_handbook" in offered and not done["search_handbook"]:
        calls = [handbook_call("search_handbook", {"query": q, "k": SEARCH_K}, i, "meta") for i, q in enumerate(_queries(evidence))]
    elif not generic_only and "read_handbook" in offered and done["search_handbook"] and not done["read_handbook"]:
        ranked = distinct_hits(done["search_handbook"], evidence.get("harness", ""))
        calls = [handbook_call("read_handbook", {"section": s}, i, "meta") for i, s in enumerate(ranked[:MAX_READS])]
    if calls:
        content = "Let me check the handbook."
        return SyntheticReply({"role": "assistant", "content": content, "tool_calls": calls}, prompt, approx_tokens(json.dumps(calls)))
    text = _answer(evidence, done["read_handbook"], messages, seed, generic_only)
    return SyntheticReply({"role": "assistant", "content": text}, prompt, approx_tokens(text))


# ------------------------------------------------------------------ reading the evidence
def _queries(evidence: dict[str, Any]) -> list[str]:
    """Search queries from what the grader and the task say: each failed requirement (most frequent
    first) as its name and the general part of its reason, followed by the kinds of error the grader
    named in that requirement's listings (e.g. "wrong rate" from "E776 2026-07-20 (wrong_rate)", most
    frequent first); then the headings of the tables the failed rollouts last read, most frequent first;
    then the task's first sentence."""
    reasons: dict[str, str] = {}
    counts: Counter[str] = Counter()
    kinds: dict[str, Counter[str]] = {}
    for f in evidence.get("failures", ()):
        for r in f.get("failed_requirements", ()):
            counts[r["id"]] += 1
            reason = r.get("reason", "")
            reasons.setdefault(r["id"], _general(reason))
            kinds.setdefault(r["id"], Counter()).update(dict.fromkeys(_kinds(reason), 1))
    queries = []
    for rid, _ in counts.most_common():
        queries.append(f"{rid.replace('_', ' ')} {reasons[rid]}".strip())
        queries += [k for k, _ in kinds[rid].most_common()]
    seen: Counter[str] = Counter()
    for f in evidence.get("failures", ()):
        seen.update(dict.fromkeys(_headings(f.get("transcript_tail", ())), 1))
    queries += [h for h, _ in seen.most_common()]
    instruction = next((f.get("instruction", "") for f in evidence.get("failures", ())), "")
    first = re.split(r"(?<=[.!?])\s", instruction, maxsplit=1)[0]
    if first:
        queries.append(first)
    return [q for q in dict.fromkeys(queries) if q][:MAX_QUERIES]


def _headings(tail: Any) -> list[str]:
    """What the agent last looked at, in its own terms: the first line of each tool result in a
    failure's transcript tail that reads as a table heading (column names, no digits), e.g.
    "department | posted_balance_usd | posted_at"."""
    out = []
    for m in tail:
        first = (m.get("content") or "").split("\n", 1)[0] if m.get("role") == "tool" else ""
        if "|" in first and not re.search(r"\d", first):
            out.append(" ".join(w.replace("_", " ") for w in re.findall(r"[A-Za-z_]+", first)))
    return out


def _kinds(reason: str) -> list[str]:
    """The kinds of error a grader's reason names for its listed items: the snake_case words in
    parentheses after the first ':' or ';' (e.g. "(rejected as insufficient_budget)" -> "insufficient
    budget")."""
    parts = re.split(r"[:;]", reason, maxsplit=1)
    if len(parts) < 2:
        return []
    words = re.findall(r"\(([^()]*)\)", parts[1])
    return list(dict.fromkeys(w.replace("_", " ") for inner in words for w in re.findall(r"\b[a-z]+(?:_[a-z]+)+\b", inner)))


def _general(reason: str) -> str:
    """The general part of a grader's reason: before any listing of items (after ':' or ';')."""
    return re.split(r"[:;]", reason, maxsplit=1)[0].strip()


# ------------------------------------------------------------------ the answer
def _answer(evidence: dict[str, Any], reads: list[tuple[dict[str, Any], str]], messages: list[dict[str, Any]], seed: int, generic_only: bool) -> str:
    from coevolve.agents.meta.proposer import catalogue_from_messages

    k = _asked_k(messages)
    failures = evidence.get("failures", ())
    harness = evidence.get("harness", "")
    tried = {json.dumps(h.get("ops"), sort_keys=True) for h in evidence.get("history", ()) if h.get("base") == evidence.get("harness_id")}
    rng = random.Random(int(hashlib.sha256(f"{seed}|{json.dumps(evidence, sort_keys=True)}".encode()).hexdigest()[:16], 16))

    knowledge: list[dict[str, Any]] = []
    checklist: list[dict[str, Any]] = []
    if not generic_only:
        sections = read_sections(reads)
        recipes = [{"op": "add_recipe", "name": _name(sid), "text": text} for sid, text in sections]
        if len(recipes) > 1:
            knowledge.append(_edit(recipes, "the handbook documents rules the failed rollouts break", "knowledge"))
        knowledge += [_edit([r], f"the handbook section {r['name']} bears on the failures", "knowledge") for r in recipes]
        items = _checklist_items(failures)
        if items and "finish_checklist" not in harness:
            checklist.append(_edit([{"op": "add_hook", "kind": "finish_checklist", "params": {"items": items}}],
                                   "the grader reports requirements the agent did not meet before finishing", "requirements"))
    symptoms: list[tuple[int, dict[str, Any]]] = []
    errors = sum(1 for f in failures if f.get("tool_error_count"))
    if errors and "validate_args" not in harness:
        symptoms.append((errors, _edit([{"op": "add_hook", "kind": "validate_args", "params": {}}],
                                       "tool calls came back with errors", "tool errors")))
    large = sum(1 for f in failures if f.get("observation_tokens", 0) > LARGE_OBSERVATIONS)
    if large and "pin-notes" not in harness:
        symptoms.append((large, _edit([{"op": "set_context_policy", "strategy": "pin-notes", "token_budget": 6000, "keep_last": 4}],
                                      "large observations crowd the agent's context", "context")))
    batched = sum(1 for f in failures if f.get("calls_per_turn_max", 0) > 1)
    if batched and "one tool call per turn" not in harness:
        symptoms.append((batched, _edit([{"op": "set_section", "name": "pacing", "text": "Make one tool call per turn and check each result before the next step."}],
                                        "the agent batched several calls into one turn and stopped short", "pacing")))
    generic = [e for _, e in sorted(symptoms, key=lambda s: -s[0])]
    # Constrained decoding changes how every reply is produced, so it comes after every edit of the
    # text (proposed once those are proposed or tried) -- unless most failures are mostly broken calls
    # (errors on at least half their turns, bad arguments among them): then no text edit can take effect
    # before the calls are fixed, and it comes first.
    malformed = sum(1 for f in failures if any(BAD_ARGUMENTS in e for e in f.get("tool_errors", ())))
    decoding = []
    if malformed and CONSTRAINED_MARK not in harness:
        decoding.append(_edit([{"op": "set_decoding", "tool_calls": "constrained"}],
                              "tool calls broke their tools' signatures; constrain every reply to one schema-valid call",
                              "tool errors"))
    # "most": most failures came back with errors on at least half their turns, bad arguments among them
    broken = sum(1 for f in failures if any(BAD_ARGUMENTS in e for e in f.get("tool_errors", ()))
                 and 2 * f.get("tool_error_count", 0) >= max(1, f.get("turns", 0)))
    first = decoding if 2 * broken > len(failures) else []
    # The environment's computation tools the harness leaves out (the catalogue the prompt lists), all in
    # one edit, for a model whose calls the harness already constrains: one that cannot be trusted with
    # the syntax of a call is not trusted with the computation either. Then they come first.
    tools = [] if generic_only or CONSTRAINED_MARK not in harness else catalogue_from_messages(messages)
    helpers = [_edit([{"op": "add_tool", **t} for t in tools],
                     "hand the computation the agent does by hand to the environment's own tools", "tools")] if tools else []
    ordered = first + helpers + knowledge[:1] + checklist + generic + knowledge[1:] + [d for d in decoding if d not in first]
    candidates = [c for c in ordered if json.dumps(c["ops"], sort_keys=True) not in tried]

    out: list[dict[str, Any]] = []
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


def _checklist_items(failures: Any) -> list[str]:
    counts: Counter[str] = Counter()
    for f in failures:
        for r in f.get("failed_requirements", ()):
            general = _general(r.get("reason", ""))
            if general:
                counts[general[0].upper() + general[1:]] += 1
    return [item for item, _ in counts.most_common(CHECKLIST_ITEMS)]


def _name(section_id: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", section_id.lower()).strip("_")[:60] or "note"


def _edit(ops: list[dict[str, Any]], rationale: str, targets: str) -> dict[str, Any]:
    return {"rationale": rationale, "targets": targets, "ops": ops}


def _asked_k(messages: list[dict[str, Any]]) -> int:
    user = next((m.get("content") or "" for m in messages if m.get("role") == "user"), "")
    tail = user.rsplit("Propose up to ", 1)
    try:
        return max(1, int(tail[1].split()[0]))
    except (IndexError, ValueError):
        return 3
