"""Role prompts that fit their model's context window.

A role (the proposer, the judge, the expert rewriter) builds its prompt from one JSON payload (the
evidence, the transcript, the prefix). `fit` shrinks that payload until the prompt fits the role
model's window minus the reply budget, by a fixed list of cut stages per role, and returns the
prompt with the record of what it cut. A prompt that fits as it is goes out unchanged, byte for byte.

**Window** (`Budget.window`, looked up by `coevolve.services.context_windows.lookup`, first hit wins): an
explicit setting (`COEVOLVE_CONTEXT_WINDOWS="vllm/smollm2=4096,*=32768"`), a synthetic model's
profile (`SyntheticProfile.context_window`), the vLLM server's model list (`/v1/models`:
`max_model_len`, or Ray Serve LLM's `metadata.max_request_context_length`, else the `max_model_len`
its `/tokenize` answers), litellm's model info (`max_input_tokens`, else `max_tokens`), else
`DEFAULT_WINDOW` (16,384 tokens).

**Reply budget**: `REPLY_TOKENS[role]` (proposer 2,048, expert 1,024, judge 512), at most a quarter
of the window. A role that may consult the handbook keeps a quarter of what is left free for its
look-ups (`TOOL_SHARE`); each handbook result is clipped to the room still free, and when none is
left the result says so and the model must answer.

**Counting**: with the model's tokenizer when one is at hand (the vLLM server's `/tokenize`, which
applies the served chat template and the tools; a tokenizer folder named in `COEVOLVE_TOKENIZERS`;
a synthetic model's own count), else `estimate_tokens`: every digit, punctuation mark, newline and
non-ASCII byte one token, a run of spaces one token, a run of ASCII letters one token per 4 letters,
plus 8 tokens per message and 120 for a tools block. On the 49 role prompts of the seven families
(3 failures each, judge, expert and proposer) it came to 1.30-1.78 times SmolLM2-135M's count with
its chat template (mean 1.62): a safety margin of at least 30% for a byte-level BPE tokenizer of
that size. A tokenizer with a tiny vocabulary (the 512-token test model's counts ~1.2 bytes per
token) is under-estimated: name it in `COEVOLVE_TOKENIZERS`. The search for what to cut runs on the
estimate, scaled to the tokenizer's count of the full prompt; the result is then counted by the
tokenizer and, if it is still over, the scale is taken again from the cut prompt (2% tighter) and the
search repeated (at most `ROUNDS` times).

**What is kept, what is cut** — the oldest and least needed first; each stage cuts only as much as
the prompt needs (binary search over how many of its units to cut), and the next stage runs only if
that stage's whole share was not enough:

- judge (locate, classify, score): kept are the task, the grader's report, the focus turn (locate:
  the rule-based guess; classify: the locus; score: the failing turn and the candidate) with its
  `NEIGHBOURS` turns either side and the rollout's last `NEIGHBOURS` turns. Stages: (1) clip the
  observations, text and arguments of the other turns to `CLIP` characters, oldest first; (2) drop
  those turns, oldest first; (3) clip the neighbourhood, farthest from the focus first; (4) clip the
  focus turn; (5) clip the grader's reasons; (6) clip tool descriptions; (7) clip the task.
- expert (rewrite): kept are the task, the harness's system message and the task message of the
  prefix, the prefix's last `NEIGHBOURS` turns, the failing turn and the judge's reason. Stages:
  (1) elide the tool results of older turns, oldest first (`[elided: N tokens, cut to fit ...]`, the
  executor's own marker, so a synthetic reader treats them as unseen); (2) drop those turns, oldest
  first, with one marker message after the task; (3) elide the neighbourhood's tool results; (4)
  clip the failing turn; (5) clip the prefix's assistant texts, (6) its tool-call arguments; (7)
  clip the harness's system message; (8) clip tool descriptions; (9) clip the task.
- proposer (evidence): kept are the current harness, the family, the newest failures (the first of
  the evidence's list, which the loop orders) and the grader's reports. Stages: (1) drop the oldest
  edit-history entries; (2) drop the oldest messages of the failures' transcript tails; (3) drop
  failures from the end of the list (at least one stays); (4) clip the failures' instruction,
  reasons and tool errors; (5) clip the harness description (its middle).

Every cut is marked inside the prompt — a clipped string carries `…[cut: N chars]…`, a dropped part
leaves a `[cut: ...]` line in the payload's `cut` list (or the expert's marker message), and the ask
says that parts were cut — and recorded (`Fitted.cuts`, one line per stage) for the role to return
with its answer: the judge and expert in their `RoleUsage` (hence the correction row's provenance),
the proposer in its `Proposal`s (hence the journal's proposal events). If even the last stage does
not make it fit, the role does not call the model and records an unknown answer (judge, expert) or a
failed proposal (proposer), as it does for a call that fails.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import Any

from coevolve.agents.context import ELIDED, approx_tokens

DEFAULT_WINDOW = 16_384
REPLY_TOKENS = {"proposer": 2048, "expert": 1024, "judge": 512}
TOOL_SHARE = 0.25  # of the prompt budget kept free for handbook look-ups
NEIGHBOURS = 2
CLIP = 200
ROUNDS = 6
MESSAGE_TOKENS = 8
TOOLS_TOKENS = 120
MIN_TOOL_ROOM = 64  # a handbook result with less room than this is replaced by a note
CUT_NOTE = "Parts of this input were cut to fit your context window; each cut is marked [cut: ...]."

_PIECE = re.compile(r"[A-Za-z]+|[ \t]+|\d|[^A-Za-z\d \t]")

Messages = list[dict[str, Any]]
Count = Callable[[Messages, list[dict[str, Any]]], "int | None"]


# ------------------------------------------------------------------------------------ counting
def estimate_tokens(text: str) -> int:
    """A conservative token count without a tokenizer (module doc: the rule and its margin)."""
    n = 0
    for piece in _PIECE.findall(text):
        c = piece[0]
        if c.isascii() and c.isalpha():
            n += math.ceil(len(piece) / 4)
        elif c in " \t" or c.isascii():
            n += 1
        else:
            n += len(c.encode())
    return n


def estimate_messages(messages: Messages, tools: Sequence[dict[str, Any]] = ()) -> int:
    n = 0
    for m in messages:
        n += MESSAGE_TOKENS + estimate_tokens(m.get("content") or "")
        for c in m.get("tool_calls") or ():
            fn = c.get("function") or {}
            n += MESSAGE_TOKENS + estimate_tokens(fn.get("name") or "") + estimate_tokens(fn.get("arguments") or "")
    if tools:
        n += TOOLS_TOKENS + estimate_tokens(json.dumps(list(tools), sort_keys=True))
    return n


def synthetic_count(messages: Messages, tools: Sequence[dict[str, Any]] = ()) -> int:
    """What a synthetic model counts (`coevolve.testbed.policy`: `message_tokens` of every message)."""
    from coevolve.agents.context import message_tokens

    return sum(message_tokens(m) for m in messages)


@dataclass(frozen=True)
class Budget:
    """A role model's context window and how its prompts are counted. `count` is the model's own
    tokenizer (None: `estimate_messages`); `source` says where the window came from."""

    model: str
    role: str
    window: int
    reply: int
    source: str
    count: Count | None = None
    counted_by: str = "estimate"

    @property
    def limit(self) -> int:
        """Prompt tokens the model takes (window minus the reply budget)."""
        return max(1, self.window - self.reply)

    def tokens(self, messages: Messages, tools: Sequence[dict[str, Any]] = ()) -> tuple[int, str]:
        """(the prompt's token count, what counted it): the tokenizer when it answers, else the estimate."""
        if self.count is not None:
            try:
                n = self.count(messages, list(tools))
            except Exception:  # noqa: BLE001 - a tokenizer that fails falls back to the estimate
                n = None
            if n is not None:
                return int(n), self.counted_by
        return estimate_messages(messages, tools), "estimate"

    def describe(self) -> str:
        return f"{self.model}: window {self.window} tokens ({self.source}), reply {self.reply}, counted by {self.counted_by}"


def reply_tokens(role: str, window: int) -> int:
    return min(REPLY_TOKENS[role], window // 4)


# ------------------------------------------------------------------------------------ the engine
@dataclass(frozen=True)
class Stage:
    """One kind of cut: `size(payload)` units can be cut; `cut(payload, n)` returns a new payload with
    the first n of them cut (never mutating its argument) and the line that records it."""

    name: str
    size: Callable[[dict[str, Any]], int]
    cut: Callable[[dict[str, Any], int], tuple[dict[str, Any], str]]


@dataclass(frozen=True)
class Fitted:
    messages: Messages
    payload: dict[str, Any]
    cuts: tuple[str, ...]
    tokens: int  # the prompt's count (by `counted_by`)
    counted_by: str
    limit: int

    @property
    def fits(self) -> bool:
        return self.tokens <= self.limit

    def record(self) -> list[str]:
        """Cuts as recorded with the role's answer (empty when nothing was cut)."""
        if not self.cuts:
            return []
        return [*self.cuts, f"prompt {self.tokens} tokens ({self.counted_by}) of {self.limit} allowed"]


def fit(
    payload: dict[str, Any],
    make: Callable[[dict[str, Any], bool], Messages],
    stages: Sequence[Stage],
    budget: Budget,
    tools: Sequence[dict[str, Any]] = (),
    limit: int | None = None,
) -> Fitted:
    """The prompt `make(payload, cut)` fitted to `limit` (default the budget's) by `stages`, in order;
    `make`'s second argument says whether anything was cut (the ask then says so)."""
    limit = budget.limit if limit is None else limit
    messages = make(payload, False)
    tokens, by = budget.tokens(messages, tools)
    best = Fitted(messages, payload, (), tokens, by, limit)
    if best.fits:
        return best
    scale = tokens / max(1, estimate_messages(messages, tools))
    for _ in range(ROUNDS):
        p, notes = _run_stages(payload, make, stages, tools, lambda n, s=scale: n * s <= limit)
        messages = make(p, bool(notes))
        tokens, by = budget.tokens(messages, tools)
        best = Fitted(messages, p, tuple(notes), tokens, by, limit)
        if best.fits:
            return best
        est = estimate_messages(messages, tools)
        if est * scale > limit:  # every stage was spent: nothing more to cut
            return best
        # the search met its target but the count did not: calibrate on the cut prompt, a little tighter
        scale = max(scale * 1.02, 1.02 * tokens / max(1, est))
    return best


def _run_stages(payload, make, stages, tools, ok: Callable[[int], bool]) -> tuple[dict[str, Any], list[str]]:
    def fits(p: dict[str, Any]) -> bool:
        return ok(estimate_messages(make(p, True), tools))

    p, notes = payload, []
    for stage in stages:
        if fits(p):
            break
        size = stage.size(p)
        if size <= 0:
            continue
        whole, note = stage.cut(p, size)
        if not fits(whole):
            p = whole
            notes.append(note)
            continue
        lo, hi = 1, size  # the fewest units that make it fit
        while lo < hi:
            mid = (lo + hi) // 2
            if fits(stage.cut(p, mid)[0]):
                hi = mid
            else:
                lo = mid + 1
        p, note = stage.cut(p, lo)
        notes.append(note)
        break
    return p, notes


def clip(text: str, n: int = CLIP) -> str:
    """`text` cut to about n characters, head and tail kept, with a marker saying how much was cut."""
    if not isinstance(text, str) or len(text) <= n + 24:
        return text
    return text[: n // 2] + f" …[cut: {len(text) - n} chars]… " + text[-(n - n // 2) :]


def clip_prefix(text: str, tokens: int) -> str:
    """The longest head of `text` whose estimate is within `tokens`, with a marker (for tool results)."""
    if estimate_tokens(text) <= tokens:
        return text
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimate_tokens(text[:mid]) + 16 <= tokens:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo] + f" …[cut: {len(text) - lo} chars to fit the context window]"


def _ranges(ids: Sequence[int]) -> str:
    runs = [[v for _, v in g] for _, g in groupby(enumerate(sorted(ids)), lambda iv: iv[1] - iv[0])]
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def _mark(p: dict[str, Any], line: str) -> dict[str, Any]:
    return {**p, "cut": [*p.get("cut", ()), line]}


# ------------------------------------------------------------------------------------ judge
def _clip_turn(t: dict[str, Any], n: int = CLIP) -> dict[str, Any]:
    return {
        **t,
        "assistant": clip(t.get("assistant") or "", n),
        "calls": [{**c, "arguments": clip(c.get("arguments") or "", n)} for c in t.get("calls", ())],
        "observations": [clip(o, n) for o in t.get("observations", ())],
    }


def _keep_zone(turns: list[dict[str, Any]], focus: int | None, keep_end: bool) -> set[int]:
    ids = [t["turn"] for t in turns]
    keep = set()
    if focus is not None:
        keep |= {i for i in ids if abs(i - focus) <= NEIGHBOURS}
    if keep_end:
        keep |= set(ids[-NEIGHBOURS:])
    return keep


def judge_stages(focus: int | None, keep_end: bool = True) -> list[Stage]:
    """Stages for a judge payload (`turns`, optional `failing_turn`, `grader_report`, `tools`, `task`)."""

    def outside(p: dict[str, Any]) -> list[int]:  # list positions, oldest first
        keep = _keep_zone(p["turns"], focus, keep_end)
        return [k for k, t in enumerate(p["turns"]) if t["turn"] not in keep]

    def near(p: dict[str, Any]) -> list[int]:  # the neighbourhood without the focus, farthest first
        keep = _keep_zone(p["turns"], focus, keep_end)
        pos = [k for k, t in enumerate(p["turns"]) if t["turn"] in keep and t["turn"] != focus]
        return sorted(pos, key=lambda k: -abs(p["turns"][k]["turn"] - (focus if focus is not None else p["turns"][-1]["turn"])))

    def clipper(pick: Callable[[dict[str, Any]], list[int]], what: str) -> Callable[..., tuple[dict[str, Any], str]]:
        def cut(p: dict[str, Any], n: int) -> tuple[dict[str, Any], str]:  # the first n positions `pick` gives
            chosen = set(pick(p)[:n])
            turns = [_clip_turn(t) if k in chosen else t for k, t in enumerate(p["turns"])]
            return {**p, "turns": turns}, what.format(_ranges([p["turns"][k]["turn"] for k in sorted(chosen)]))
        return cut

    def drop_old(p: dict[str, Any], n: int) -> tuple[dict[str, Any], str]:
        chosen = set(outside(p)[:n])
        ids = [p["turns"][k]["turn"] for k in sorted(chosen)]
        line = f"[cut: {len(ids)} earlier turns ({_ranges(ids)}) to fit the context window]"
        return _mark({**p, "turns": [t for k, t in enumerate(p["turns"]) if k not in chosen]}, line), line

    def clip_focus(p: dict[str, Any], n: int) -> tuple[dict[str, Any], str]:
        q = {**p, "turns": [_clip_turn(t, 4 * CLIP) if t["turn"] == focus else t for t in p["turns"]]}
        if "failing_turn" in q and n >= 1:
            q["failing_turn"] = _clip_turn(q["failing_turn"], 4 * CLIP)
        return q, f"the focus turn ({focus}) clipped to {4 * CLIP} chars"

    return [
        Stage("clip-old", lambda p: len(outside(p)),
              clipper(outside, f"turns {{}}: observations, text and arguments clipped to {CLIP} chars")),
        Stage("drop-old", lambda p: len(outside(p)), drop_old),
        Stage("clip-near", lambda p: len(near(p)), clipper(near, f"neighbouring turns {{}} clipped to {CLIP} chars")),
        Stage("clip-focus", lambda p: int("failing_turn" in p or any(t["turn"] == focus for t in p["turns"])), clip_focus),
        Stage("report", lambda p: int(bool(p.get("grader_report"))), _clip_report),
        Stage("tools", lambda p: int(bool(p.get("tools"))), _clip_tools),
        Stage("task", lambda p: int(len(p.get("task") or "") > 8 * CLIP), _clip_task),
    ]


def _clip_report(p: dict[str, Any], n: int) -> tuple[dict[str, Any], str]:
    report = [{**r, "reason": clip(str(r.get("reason", "")), CLIP)} for r in p["grader_report"]]
    return {**p, "grader_report": report}, f"the grader's reasons clipped to {CLIP} chars"


def _clip_tools(p: dict[str, Any], n: int) -> tuple[dict[str, Any], str]:
    tools = [{**t, "description": clip(t.get("description") or "", CLIP // 2)} for t in p["tools"]]
    return {**p, "tools": tools}, f"tool descriptions clipped to {CLIP // 2} chars"


def _clip_task(p: dict[str, Any], n: int) -> tuple[dict[str, Any], str]:
    return {**p, "task": clip(p["task"], 8 * CLIP)}, f"the task clipped to {8 * CLIP} chars"


# ------------------------------------------------------------------------------------ expert
def _prefix_turns(messages: Messages) -> tuple[int, list[tuple[int, int]]]:
    """(end of the head: the system and task messages; [(start, end)] of each turn, oldest first)."""
    starts = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    head = starts[0] if starts else len(messages)
    return head, [(s, (starts[k + 1] if k + 1 < len(starts) else len(messages))) for k, s in enumerate(starts)]


ELIDED_NOTE = f"{ELIDED}: 0000 tokens, cut to fit the context window]"


def _elided(m: dict[str, Any]) -> dict[str, Any]:
    content = m.get("content") or ""
    return {**m, "content": f"{ELIDED}: {approx_tokens(content)} tokens, cut to fit the context window]"}


def expert_stages() -> list[Stage]:
    """Stages for an expert payload (`prefix_messages`, `failing_turn`, `tools`, `task`)."""

    def tool_results(p: dict[str, Any], old: bool) -> list[int]:
        msgs = p["prefix_messages"]
        _, turns = _prefix_turns(msgs)
        cut_at = max(0, len(turns) - NEIGHBOURS)
        spans = turns[:cut_at] if old else turns[cut_at:]
        return [i for s, e in spans for i in range(s, e)  # results shorter than the marker stay
                if msgs[i].get("role") == "tool" and len(msgs[i].get("content") or "") > 2 * len(ELIDED_NOTE)
                and not (msgs[i].get("content") or "").startswith(ELIDED)]

    def elide(old: bool) -> Callable[[dict[str, Any], int], tuple[dict[str, Any], str]]:
        def cut(p: dict[str, Any], n: int) -> tuple[dict[str, Any], str]:
            chosen = set(tool_results(p, old)[:n])
            msgs = [_elided(m) if i in chosen else m for i, m in enumerate(p["prefix_messages"])]
            where = "earlier" if old else "the last"
            return {**p, "prefix_messages": msgs}, f"{len(chosen)} tool results of {where} turns elided"

        return cut

    def old_turns(p: dict[str, Any]) -> int:
        _, turns = _prefix_turns(p["prefix_messages"])
        return max(0, len(turns) - NEIGHBOURS)

    def drop_old(p: dict[str, Any], n: int) -> tuple[dict[str, Any], str]:
        msgs = p["prefix_messages"]
        head, turns = _prefix_turns(msgs)
        line = f"[cut: {n} earlier turns ({_ranges(range(n))}) to fit the context window]"
        rest = msgs[turns[n - 1][1] :] if n else msgs[head:]
        return {**p, "prefix_messages": [*msgs[:head], {"role": "user", "content": line}, *rest]}, line

    def clip_failing(p: dict[str, Any], n: int) -> tuple[dict[str, Any], str]:
        return {**p, "failing_turn": _clip_turn(p["failing_turn"], 4 * CLIP)}, f"the failing turn clipped to {4 * CLIP} chars"

    def assistant_texts(p: dict[str, Any]) -> int:
        return sum(1 for m in p["prefix_messages"] if m.get("role") == "assistant" and len(m.get("content") or "") > CLIP + 24)

    def clip_role(role: str, chars: int, what: str) -> Callable[[dict[str, Any], int], tuple[dict[str, Any], str]]:
        def cut(p: dict[str, Any], n: int) -> tuple[dict[str, Any], str]:
            msgs = [{**m, "content": clip(m.get("content") or "", chars)} if m.get("role") == role else m
                    for m in p["prefix_messages"]]
            return {**p, "prefix_messages": msgs}, f"{what} clipped to {chars} chars"

        return cut

    def long_args(p: dict[str, Any]) -> int:
        return sum(1 for m in p["prefix_messages"] for c in m.get("tool_calls") or ()
                   if len((c.get("function") or {}).get("arguments") or "") > CLIP + 24)

    def clip_args(p: dict[str, Any], n: int) -> tuple[dict[str, Any], str]:
        def short(c: dict[str, Any]) -> dict[str, Any]:
            fn = c.get("function") or {}
            return {**c, "function": {**fn, "arguments": clip(fn.get("arguments") or "", CLIP)}}

        msgs = [{**m, "tool_calls": [short(c) for c in m["tool_calls"]]} if m.get("tool_calls") else m
                for m in p["prefix_messages"]]
        return {**p, "prefix_messages": msgs}, f"the prefix's tool-call arguments clipped to {CLIP} chars"

    def system_size(p: dict[str, Any]) -> int:
        return int(any(m.get("role") == "system" and len(m.get("content") or "") > 10 * CLIP for m in p["prefix_messages"]))

    def clip_task(p: dict[str, Any], n: int) -> tuple[dict[str, Any], str]:
        head, _ = _prefix_turns(p["prefix_messages"])
        msgs = [{**m, "content": clip(m.get("content") or "", 8 * CLIP)} if i < head and m.get("role") == "user" else m
                for i, m in enumerate(p["prefix_messages"])]
        return {**p, "task": clip(p.get("task") or "", 8 * CLIP), "prefix_messages": msgs}, f"the task clipped to {8 * CLIP} chars"

    return [
        Stage("elide-old", lambda p: len(tool_results(p, True)), elide(True)),
        Stage("drop-old", old_turns, drop_old),
        Stage("elide-near", lambda p: len(tool_results(p, False)), elide(False)),
        Stage("clip-failing", lambda p: int("failing_turn" in p), clip_failing),
        Stage("clip-texts", lambda p: min(1, assistant_texts(p)), clip_role("assistant", CLIP, "the prefix's assistant texts")),
        Stage("clip-args", lambda p: min(1, long_args(p)), clip_args),
        Stage("clip-system", system_size, clip_role("system", 10 * CLIP, "the agent's system message")),
        Stage("tools", lambda p: int(bool(p.get("tools"))), _clip_tools),
        Stage("task", lambda p: 1, clip_task),
    ]


# ------------------------------------------------------------------------------------ proposer
def evidence_stages() -> list[Stage]:
    """Stages for the proposer's evidence (`coevolve.agents.meta.evidence.build_evidence`)."""

    def drop_history(p: dict[str, Any], n: int) -> tuple[dict[str, Any], str]:
        line = f"[cut: the {n} oldest entries of the edit history to fit the context window]"
        return _mark({**p, "history": p["history"][n:]}, line), line

    def tail_units(p: dict[str, Any]) -> list[tuple[int, int]]:
        """(failure, message) pairs: the oldest message of every tail first, the last failure first."""
        fs = p["failures"]
        longest = max((len(f.get("transcript_tail", ())) for f in fs), default=0)
        return [(j, i) for i in range(longest) for j in reversed(range(len(fs))) if i < len(fs[j].get("transcript_tail", ())) - 1]

    def drop_tails(p: dict[str, Any], n: int) -> tuple[dict[str, Any], str]:
        per = Counter(j for j, _ in tail_units(p)[:n])
        fs = [{**f, "transcript_tail": f["transcript_tail"][k:],
               "transcript_tail_cut": f"[cut: {k} earlier messages of this tail]"} if (k := per[j]) else f
              for j, f in enumerate(p["failures"])]
        return {**p, "failures": fs}, f"{n} of the oldest transcript-tail messages cut across {len(per)} failures"

    def drop_failures(p: dict[str, Any], n: int) -> tuple[dict[str, Any], str]:
        keep = len(p["failures"]) - n
        line = f"[cut: {n} of the {len(p['failures'])} failures shown, the last of the list, to fit the context window]"
        return _mark({**p, "failures": p["failures"][:keep]}, line), line

    def clip_failures(p: dict[str, Any], n: int) -> tuple[dict[str, Any], str]:
        fs = [
            {
                **f,
                "instruction": clip(f.get("instruction") or "", 2 * CLIP),
                "failed_requirements": [{**r, "reason": clip(r.get("reason") or "", CLIP)} for r in f.get("failed_requirements", ())],
                "tool_errors": [clip(e, CLIP // 2) for e in f.get("tool_errors", ())],
                "transcript_tail": [{**m, "content": clip(m.get("content") or "", CLIP)} for m in f.get("transcript_tail", ())],
            }
            for f in p["failures"]
        ]
        return {**p, "failures": fs}, f"the failures' instructions, reasons, errors and messages clipped to {2 * CLIP} chars or less"

    def clip_harness(p: dict[str, Any], n: int) -> tuple[dict[str, Any], str]:
        return {**p, "harness": clip(p["harness"], 20 * CLIP)}, f"the harness description clipped to {20 * CLIP} chars (its middle)"

    return [
        Stage("history", lambda p: len(p.get("history", ())), drop_history),
        Stage("tails", lambda p: len(tail_units(p)), drop_tails),
        Stage("failures", lambda p: max(0, len(p.get("failures", ())) - 1), drop_failures),
        Stage("clip-failures", lambda p: int(bool(p.get("failures"))), clip_failures),
        Stage("harness", lambda p: int(len(p.get("harness") or "") > 20 * CLIP + 24), clip_harness),
    ]


# ------------------------------------------------------------------------------------ tool rounds
def fit_tool_result(budget: Budget, messages: Messages, tools: Sequence[dict[str, Any]], result: str,
                    limit: int | None = None) -> tuple[str, str | None]:
    """A handbook result clipped to the room the conversation leaves (`messages` already holds the
    assistant's call); (the content, the cut recorded or None). With no room: a note instead."""
    limit = budget.limit if limit is None else limit
    used, _ = budget.tokens(messages, tools)
    room = limit - used - MESSAGE_TOKENS
    if estimate_tokens(result) <= room:
        return result, None
    if room < MIN_TOOL_ROOM:
        note = f"[cut: this result ({estimate_tokens(result)} tokens) — no room left in the context window; answer now]"
        return note, f"a handbook result of {len(result)} chars replaced by a note (no room left)"
    clipped = clip_prefix(result, room)
    return clipped, f"a handbook result clipped from {len(result)} to {len(clipped)} chars"


# ------------------------------------------------------------------------------------ notes for a run's end
def evolve_cut_note(proposal_events: Sequence[dict[str, Any]]) -> str | None:
    """One line for the end of an evolution: in how many iterations the proposer's evidence was cut,
    and the last iteration's cuts (the journal's proposal events hold them all)."""
    by_iteration: dict[Any, list[str]] = {}
    failed = set()
    for e in proposal_events:
        if e.get("context_cuts"):
            by_iteration[e.get("iteration")] = list(e["context_cuts"])
        if str(e.get("error") or "").startswith("proposer call failed"):
            failed.add(e.get("iteration"))
    iterations = {e.get("iteration") for e in proposal_events}
    parts = []
    if by_iteration:
        last = by_iteration[max(by_iteration, key=lambda i: (i is not None, i))]
        parts.append(f"the proposer's evidence was cut to fit its context window in {len(by_iteration)} of "
                     f"{len(iterations)} iterations (last: {'; '.join(last)})")
    if failed:
        parts.append(f"the proposer call failed in {len(failed)} iterations (recorded as failed proposals)")
    return "; ".join(parts) or None


def build_cut_note(manifest: dict[str, Any]) -> str | None:
    """One line for the end of a dataset build: role prompts cut, role calls failed, rows that say so."""
    usage = manifest.get("usage") or {}
    fitted = {r: int(u.get("fitted", 0)) for r, u in usage.items() if u.get("fitted")}
    failed = {r: int(u.get("failed_calls", 0)) for r, u in usage.items() if u.get("failed_calls")}
    parts = []
    if fitted:
        parts.append("prompts cut to fit the model's context window: "
                     + ", ".join(f"{r} {n} calls" for r, n in sorted(fitted.items()))
                     + (f" over {manifest['failures_with_context_cuts']} failures" if manifest.get("failures_with_context_cuts") else "")
                     + f"; {manifest.get('rows_with_context_cuts', 0)} rows record their cuts (provenance.context_cuts,"
                     " and the run's correction events)")
    if failed:
        parts.append("role calls that failed (recorded as unknown): " + ", ".join(f"{r} {n}" for r, n in sorted(failed.items())))
    return "; ".join(parts) or None
