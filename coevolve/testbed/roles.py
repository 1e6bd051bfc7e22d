"""The judge and expert roles of the synthetic testbed, answering the same prompts an LLM gets
(`agents/prompts/judge_*.md`, `expert_rewrite.md`) from the same JSON payload.

- `synthetic/judge` works only from the payload: the rollout's turns (calls, observations, events)
  and the grader's report. It never reads the testbed's answer key. To locate a failure it reads the
  observable evidence a careful human judge would: an error observation the agent moved on from (the
  turn that moved on is where the data was lost), else the earliest call whose content the failed
  requirements are about (word overlap between the grader's words and the call).
- `synthetic/expert` as rewriter works from its inputs only (docs/ARCHITECTURE.md §5): the task, the tools, the
  weak model's prefix, the failing turn and the judge's reason, its own profile's knowledge, and the
  handbook, which it consults through the same `search_handbook`/`read_handbook` tools as a proposer
  (queries: the task's sentences, the terms that stand out in the data the agent has read, the
  failing action with the judge's reason; then it reads the best sections). Its corrected call is the
  expert policy's next call for the weak model's state, in the weak model's step-by-step pace, with
  the sections it read in view; its strategy cites, in the handbook's words, the read passages that
  bear on that call and state a rule the agent has not seen, else says in its own words what to do.
  It never reads the family's fact list, nor the instance's world, plan or traps (beyond the
  executor policy's documented simplification, computing a call's arguments for the state it sees),
  so a rare fact reaches a strategy only when the rewriter found it in the handbook. Its candidates
  are sampled (an occasional malformed call, an occasional lucky guess), so the quality judge has
  something to choose from.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from coevolve.agents.context import approx_tokens, message_tokens
from coevolve.agents.handbook_tools import handbook_call, handbook_calls, rank_sections, read_sections
from coevolve.agents.transcript import payload_from_messages
from coevolve.analysis.rollouts import decoded, reads_only
from coevolve.errors import BadInput
from coevolve.tasks.handbook import stem_words
from coevolve.testbed.policy import PROFILES, SyntheticPolicy, SyntheticReply

ROLE_HEADER = re.compile(r"^ROLE: ([a-z-]+)")
STOP = frozenset(["a", "an", "the", "of", "to", "in", "on", "at", "for", "and", "or", "is", "are", "be", "was", "not", "no", "any", "all", "each", "every", "its", "it", "this", "that", "with", "by", "as"])


def role_of(messages: list[dict[str, Any]]) -> str | None:
    system = next((m.get("content") or "" for m in messages if m.get("role") == "system"), "")
    match = ROLE_HEADER.match(system)
    return match.group(1) if match else None


def answer(role: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]], profile_name: str, seed: int):

    payload = payload_from_messages(messages)
    if role == "expert-rewrite":
        return rewrite_reply(messages, tools, seed)
    judge = {"judge-locate": locate, "judge-score": score, "judge-classify": classify}.get(role)
    if judge is None:
        raise BadInput(f"synthetic/{profile_name} does not play the role {role!r}")
    text = json.dumps(judge(payload))
    return SyntheticReply({"role": "assistant", "content": text}, sum(message_tokens(m) for m in messages), approx_tokens(text))


# ------------------------------------------------------------------ the judge
def _words(text: str) -> set[str]:
    return {w for w in stem_words(re.findall(r"[a-z]{3,}", text.lower())) if w not in STOP}


def _call_words(call: dict[str, Any]) -> set[str]:
    """What a call is about: its tool name and the keys of its arguments (at any depth)."""
    words = _words(call["name"].replace("_", " "))
    try:
        args = json.loads(call.get("arguments") or "{}")
    except json.JSONDecodeError:
        return words

    def keys(v: Any) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                words.update(_words(str(k).replace("_", " ")))
                keys(x)
        elif isinstance(v, list):
            for x in v[:5]:
                keys(x)
        elif isinstance(v, str) and len(v) < 40 and not v.strip().startswith(("[", "{")):
            words.update(_words(v))

    keys(args)
    return words


def locate(payload: dict[str, Any]) -> dict[str, Any]:
    turns = payload["turns"]
    tools = {t["name"]: t for t in payload.get("tools", ())}
    failed = [r for r in payload.get("grader_report", ()) if not r.get("passed")]
    about = _words(" ".join(f"{r.get('id', '').replace('_', ' ')} {r.get('reason', '')}" for r in failed))
    # 1. a call that came back with an error and was never made again: the agent went on without it
    for t in turns:
        for call, obs in zip(t["calls"], t["observations"]):
            if not obs.startswith(("error", "[validate_args]")) or call["name"] == "finish":
                continue
            if not any(c["name"] == call["name"] for later in turns[t["turn"] + 1 :] for c in later["calls"]):
                return {"turn": t["turn"], "reason": f"{call['name']} failed at turn {t['turn']} and was never made again"}
    # 2. the earliest state-changing call whose content the failed requirements are about
    writes = [(t["turn"], c) for t in turns for c in t["calls"]
              if c["name"] != "finish" and not reads_only(c["name"], tools.get(c["name"], {}).get("description", ""))]
    best, best_overlap = None, 0
    for turn, call in writes:  # the tool's own name says most about what the call is for
        overlap = 2 * len(about & _words(call["name"].replace("_", " "))) + len(about & _call_words(call))
        if overlap > best_overlap:
            best, best_overlap = turn, overlap
    if best is not None:
        return {"turn": best, "reason": f"turn {best} produced what the grader found wrong ({', '.join(r['id'] for r in failed)})"}
    # 3. the last state-changing call
    if writes:
        turn = writes[-1][0]
        return {"turn": turn, "reason": f"turn {turn} is the last change the agent made before finishing"}
    guess = payload.get("rule_based_guess") or {"turn": max(0, len(turns) - 2)}
    return {"turn": guess["turn"], "reason": "no call changed anything; taking the first guess"}


LONG_OBSERVATIONS = 6000  # tokens observed before the failing turn that make lost context plausible


def classify(payload: dict[str, Any]) -> dict[str, Any]:
    """The taxonomy from the rule-based evidence and the turns, checked in order of specificity."""
    ev = payload["evidence"]
    turns = payload["turns"]
    locus = ev["failure_locus"]["turn"]
    at = turns[locus] if 0 <= locus < len(turns) else {"calls": [], "observations": []}
    if any(m["turn"] == locus for m in ev["malformed_calls"]) or any(o.startswith("error") for o in at["observations"]):
        return {"category": "tool-use", "rationale": f"the call at turn {locus} came back with an error"}
    if len(at["calls"]) > 1:
        return {"category": "planning", "rationale": f"turn {locus} tried {len(at['calls'])} steps at once and stopped short"}
    if ev["context_cut_at_locus"] or ev["observation_tokens_before_locus"] > LONG_OBSERVATIONS:
        return {"category": "long-context", "rationale": "much of what the agent read was out of view by the failing turn"}
    failed = [f"{r.get('id', '')} {r.get('reason', '')}".lower() for r in payload.get("grader_report", ()) if not r.get("passed")]
    items = [x for x in ev["instruction_items_missing"] if any(x.lower() in f for f in failed)]
    if items and all(any(x.lower() in f for x in items) for f in failed):
        return {"category": "instruction-following",
                "rationale": f"the task spelled out {', '.join(items[:3])}; no call used it and that is all the grader faults"}
    if any(not r.get("passed") for r in payload.get("grader_report", ())):
        return {"category": "implicit-knowledge", "rationale": "the output is wrong although the task's explicit requirements were met"}
    return {"category": "other", "rationale": "nothing observable explains the failure"}


def score(payload: dict[str, Any]) -> dict[str, Any]:
    """Observable checks: the schema (done before asking, so a candidate here is valid), whether the
    call's tool was one the failing turn or the turns before used or could use, and whether it differs
    from what the agent did."""
    cand = payload["candidate"]
    call = cand["tool_call"]
    original = payload["failing_turn"]["calls"]
    same = any(c["name"] == call["name"] and decoded(c.get("arguments")) == call["arguments"] for c in original)
    known_tool = any(t["name"] == call["name"] for t in payload["tools"])
    states_something = len(_words(cand.get("strategy", ""))) >= 4
    addresses = not same
    consistent = known_tool and states_something
    s = 0.2 + 0.4 * addresses + 0.2 * consistent + 0.2 * states_something
    return {"valid": True, "consistent": consistent, "addresses": addresses, "score": round(min(s, 1.0), 3),
            "why": "the call repeats the failing turn" if same else "a different call with a stated rule"}


# ------------------------------------------------------------------ the expert rewriter
REWRITE_QUERIES = 4
REWRITE_SEARCH_K = 4  # sections each search returns
REWRITE_READS = 5
OBSERVED_TERMS = 8
STRATEGY_SECTIONS = 2  # handbook passages a strategy may cite
STRATEGY_WINDOW = 2  # adjacent sentences a cited passage spans
MIN_OVERLAP = 2  # words a passage must share with what the call and the task are about
# words by which a passage states a rule rather than describes (a strategy states the rule missed)
RULE_WORDS = re.compile(r"\b(only|never|always|must|not|no|instead|counts?|unless|except|rather|same|each|every)\b")


def rewrite_reply(messages: list[dict[str, Any]], tools: list[dict[str, Any]], seed: int):
    """One reply of the synthetic expert rewriter: handbook look-ups while they are offered, then the
    JSON answer with `k` candidates. It works from its inputs only: the payload (task, tools, the weak
    model's prefix, the failing turn, the judge's reason), its own profile's knowledge and the handbook
    sections it read; it never rebuilds the instance's world, plan or traps and never reads the
    family's fact list (the one documented simplification: the executor policy that computes a call's
    arguments for the state it sees, as every synthetic model does)."""

    payload = payload_from_messages(messages)
    offered = {t["function"]["name"] for t in tools or ()}
    done = handbook_calls(messages)
    prompt = sum(message_tokens(m) for m in messages)
    calls: list[dict[str, Any]] = []
    if "search_handbook" in offered and not done["search_handbook"]:
        calls = [handbook_call("search_handbook", {"query": q, "k": REWRITE_SEARCH_K}, i, "expert")
                 for i, q in enumerate(_rewrite_queries(payload))]
    elif "read_handbook" in offered and done["search_handbook"] and not done["read_handbook"]:
        ranked = rank_sections(done["search_handbook"], _system_text(payload["prefix_messages"]))
        calls = [handbook_call("read_handbook", {"section": s}, i, "expert") for i, s in enumerate(ranked[:REWRITE_READS])]
    if calls:
        return SyntheticReply({"role": "assistant", "content": "Let me check the handbook.", "tool_calls": calls},
                              prompt, approx_tokens(json.dumps(calls)))
    read = [text for _, text in read_sections(done["read_handbook"])]
    out = {"candidates": [rewrite(payload, seed * 1000 + i, read) for i in range(int(payload.get("k", 1)))]}
    text = json.dumps(out)
    return SyntheticReply({"role": "assistant", "content": text}, prompt, approx_tokens(text))


def _system_text(messages: list[dict[str, Any]]) -> str:
    return next((m.get("content") or "" for m in messages if m.get("role") == "system"), "")


def _rewrite_queries(payload: dict[str, Any]) -> list[str]:
    """What an expert looks up: each sentence of the task (what it asks turns on the domain's rules),
    the terms that stand out in the data the agent has read so far (how the domain treats what it sees
    there), and the failing action with the judge's reason."""
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", payload.get("task", "")) if len(s.split()) > 3]
    failing = " ".join(c["name"].replace("_", " ") for c in payload.get("failing_turn", {}).get("calls", ()))
    queries = [*sentences[: REWRITE_QUERIES - 2], " ".join(_observed_terms(payload["prefix_messages"])),
               f"{failing} {payload.get('judge_reason', '')}".strip()]
    return [q for q in dict.fromkeys(queries) if q.strip()]


def _observed_terms(messages: list[dict[str, Any]], n: int = OBSERVED_TERMS) -> list[str]:
    """The most frequent words of the tool results the agent has seen (no numbers, no stop words)."""
    counts: Counter[str] = Counter()
    for m in messages:
        if m.get("role") == "tool":
            counts.update(w for w in re.findall(r"[a-z]{3,}", (m.get("content") or "").lower()) if w not in STOP)
    return [w for w, _ in counts.most_common(n)]


def rewrite(payload: dict[str, Any], seed: int, handbook_text: Sequence[str] = ()) -> dict[str, Any]:
    """One candidate: the corrected call is the expert policy's next call for the weak model's state,
    with the handbook sections it read in view (as a model applies what it just read); the strategy
    cites the read passages that bear on that call and the task, in the handbook's words, else says in
    the rewriter's own words what to do."""

    messages = [dict(m) for m in payload["prefix_messages"]]
    if handbook_text:
        for m in messages:
            if m.get("role") == "system":
                m["content"] = (m.get("content") or "") + "\n\nHandbook, as read:\n" + "\n".join(handbook_text)
                break
    tools = [{"type": "function", "function": t} for t in payload["tools"]]
    # the rewriter: what the expert knows, the weak model's pace, its own occasional slips
    profile = replace(PROFILES["expert"], name="expert-rewriter", style="stepwise", planning_capacity=1, explains=False)
    reply = SyntheticPolicy(profile).respond(messages, tools, seed, "synthetic/expert")
    calls = reply.message.get("tool_calls") or []
    if not calls:
        return {"strategy": "Finish the task.", "tool_call": {"name": "finish", "arguments": {}}}
    call = calls[0]["function"]
    call = {"name": call["name"], "arguments": decoded(call["arguments"])}
    passages = _cited_passages(handbook_text, call, payload)
    failing = payload.get("failing_turn", {}).get("calls") or [{}]
    if passages:
        strategy = " ".join(passages)
    elif call["name"] == failing[0].get("name"):
        strategy = f"Call {call['name']} again with every required argument, checked against the tool's schema."
    else:
        strategy = random.Random(seed).choice(
            [f"Before acting, get the data the next step needs with {call['name']}.",
             f"Do {call['name']} next and check its result before going on."]
        )
    return {"strategy": strategy, "tool_call": call}


def _cited_passages(sections: Sequence[str], call: dict[str, Any], payload: dict[str, Any]) -> list[str]:
    """Up to `STRATEGY_SECTIONS` passages (runs of adjacent sentences, at most one per read section) that
    bear on the corrected call, state a rule and tell the agent something new: scored by the words
    they share with the call, the task and the judge's reason, times one plus their rule words (only,
    never, must, instead ...), times the share of their words the agent's conversation so far does
    not contain (a passage that restates the task teaches nothing). Best first."""
    about = _call_words({"name": call["name"], "arguments": json.dumps(call["arguments"])})
    about |= _words(payload.get("task", "")) | _words(payload.get("judge_reason", ""))
    seen = _words(" ".join(m.get("content") or "" for m in payload["prefix_messages"]))
    scored = []
    for order, text in enumerate(sections):
        sentences = [" ".join(s.split()) for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]
        for i in range(max(1, len(sentences) - STRATEGY_WINDOW + 1)):
            window = " ".join(sentences[i : i + STRATEGY_WINDOW])
            words = _words(window)
            relevance = len(about & words)
            if relevance < MIN_OVERLAP or not words:
                continue
            rule = 1 + len(RULE_WORDS.findall(window.lower()))
            scored.append((-relevance * rule * len(words - seen) / len(words), order, i, window))
    cited: list[str] = []
    used: set[int] = set()
    for _, order, _, window in sorted(scored):
        if order not in used and len(cited) < STRATEGY_SECTIONS:
            cited.append(window)
            used.add(order)
    return cited
