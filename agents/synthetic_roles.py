"""The judge and expert roles of the synthetic testbed, answering the same prompts an LLM gets
(`agents/prompts/judge_*.md`, `expert_rewrite.md`) from the same JSON payload.

- `synthetic/judge` works only from the payload: the rollout's turns (calls, observations, events)
  and the grader's report. It never reads the testbed's answer key. To locate a failure it reads the
  observable evidence a careful human judge would: an error observation the agent moved on from (the
  turn that moved on is where the data was lost), else the earliest call whose content the failed
  requirements are about (word overlap between the grader's words and the call).
- `synthetic/expert` as rewriter may know every fact, as a stronger model would: it replays the weak
  model's own conversation through a fully informed policy in the weak model's step-by-step style,
  keeps its first call, and states in one sentence the rules that call depends on. Its candidates are
  sampled (an occasional malformed call, an occasional missed specialist rule), so the quality judge
  has something to choose from.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import replace
from typing import Any

from agents.analysis import reads_only
from agents.context import approx_tokens, message_tokens
from agents.transcript import payload_from_messages

ROLE_HEADER = re.compile(r"^ROLE: ([a-z-]+)")
STOP = frozenset(["a", "an", "the", "of", "to", "in", "on", "at", "for", "and", "or", "is", "are", "be", "was", "not", "no", "any", "all", "each", "every", "its", "it", "this", "that", "with", "by", "as"])


def role_of(messages: list[dict[str, Any]]) -> str | None:
    system = next((m.get("content") or "" for m in messages if m.get("role") == "system"), "")
    match = ROLE_HEADER.match(system)
    return match.group(1) if match else None


def answer(role: str, messages: list[dict[str, Any]], profile_name: str, seed: int):
    from agents.synthetic import SyntheticReply

    payload = payload_from_messages(messages)
    if role == "judge-locate":
        out = locate(payload)
    elif role == "judge-score":
        out = score(payload)
    elif role == "judge-classify":
        out = classify(payload)
    elif role == "expert-rewrite":
        out = {"candidates": [rewrite(payload, seed * 1000 + i) for i in range(int(payload.get("k", 1)))]}
    else:
        raise ValueError(f"synthetic/{profile_name} does not play the role {role!r}")
    text = json.dumps(out)
    return SyntheticReply({"role": "assistant", "content": text}, sum(message_tokens(m) for m in messages), approx_tokens(text))


# ------------------------------------------------------------------ the judge
def _words(text: str) -> set[str]:
    import snowballstemmer

    stemmer = snowballstemmer.stemmer("english")
    return {w for w in stemmer.stemWords(re.findall(r"[a-z]{3,}", text.lower())) if w not in STOP}


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
    same = any(c["name"] == call["name"] and _loads(c.get("arguments")) == call["arguments"] for c in original)
    known_tool = any(t["name"] == call["name"] for t in payload["tools"])
    states_something = len(_words(cand.get("strategy", ""))) >= 4
    addresses = not same
    consistent = known_tool and states_something
    s = 0.2 + 0.4 * addresses + 0.2 * consistent + 0.2 * states_something
    return {"valid": True, "consistent": consistent, "addresses": addresses, "score": round(min(s, 1.0), 3),
            "why": "the call repeats the failing turn" if same else "a different call with a stated rule"}


def _loads(s: Any) -> Any:
    try:
        return json.loads(s) if isinstance(s, str) else s
    except json.JSONDecodeError:
        return s


# ------------------------------------------------------------------ the expert rewriter
def rewrite(payload: dict[str, Any], seed: int) -> dict[str, Any]:
    from agents.synthetic import PROFILES, SyntheticPolicy
    from tasks import get_family
    from tasks.base import Knowledge

    messages = payload["prefix_messages"]
    tools = [{"type": "function", "function": t} for t in payload["tools"]]
    expert = PROFILES["expert"]
    # the rewriter: every fact it knows, the weak model's pace, its own occasional slips
    profile = replace(expert, name="expert-rewriter", style="stepwise", planning_capacity=1)
    reply = SyntheticPolicy(profile).respond(messages, tools, seed, "synthetic/expert")
    calls = reply.message.get("tool_calls") or []
    if not calls:
        return {"strategy": "Finish the task.", "tool_call": {"name": "finish", "arguments": {}}}
    call = calls[0]["function"]
    # one sentence: the rules this call depends on, as the expert knows them
    from agents.synthetic import TASK_ID

    user = next(m.get("content") or "" for m in messages if m.get("role") == "user")
    family = get_family(TASK_ID.search(user).group(1).split("/")[0])
    instance = family.instance(TASK_ID.search(user).group(1))
    full = family.full_knowledge()
    plan = family.plan(instance, full)
    step = next((i for i, s in enumerate(plan) if s.tool == call["name"] and s.args == _loads(call["arguments"])), None)
    rules: list[str] = []
    if step is not None:
        for f in family.facts:
            if f.id in plan[step].facts:
                without = family.plan(instance, Knowledge(full.facts - {f.id}, full.constraints))
                if without[step].args != plan[step].args:
                    rules.append(f.statement)
        c = next((c for c in family.constraints if c.id == plan[step].constraint), None)
        if c and family.plan(instance, Knowledge(full.facts, full.constraints - {c.id}))[step].args != plan[step].args:
            rules.append(c.statement)
    rng = random.Random(seed)
    if rules:
        strategy = " ".join(rules)
    elif call["name"] == payload["failing_turn"]["calls"][0]["name"] if payload["failing_turn"]["calls"] else False:
        strategy = f"Call {call['name']} again with every required argument, checked against the tool's schema."
    else:
        strategy = rng.choice(
            [f"Before acting, get the data the next step needs with {call['name']}.",
             f"Do {call['name']} next and check its result before going on."]
        )
    return {"strategy": strategy, "tool_call": {"name": call["name"], "arguments": _loads(call["arguments"])}}
