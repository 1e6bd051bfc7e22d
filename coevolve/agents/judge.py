"""The judge (docs/ARCHITECTURE.md §4): locates the failing turn of a rollout, scores candidate rewrites and
classifies failures into the six categories of `FAILURE_CATEGORIES`. A plain class: any model the gateway reaches (or
`synthetic/judge`) plays the role through its `RoleClient` (`coevolve.llm.contract`: a reply, and the window to fit).

Each answer is parsed and validated from the model's JSON; an unparseable or invalid answer is
retried (with a different seed), then recorded as unknown: `locate` falls back to the rule-based first
guess and says so in the reason, `score` gives 0. The judge sees only `Trajectory.public_view()` and
the grader's report — never the testbed's answer key.

Every prompt is fitted to the judge model's context window (`coevolve.agents.fit`: the task, the grader's
report and the focus turn with its neighbourhood are kept, older turns are clipped, then cut, each cut
marked in the prompt and recorded in the call's `RoleUsage.cuts`). A call that still fails — the
window exceeded once more after a refit at 3/4 of the budget, or the model unavailable after the
gateway's retries — or a prompt that cannot be made to fit is recorded like an unparseable answer:
an unknown locus (the rule-based guess), a skipped candidate (score 0, not valid), category `other`.
Never an exception out of the judge.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jsonschema import Draft7Validator

from coevolve.agents.fit import CUT_NOTE, Budget, Stage, fit, judge_stages
from coevolve.agents.transcript import (
    answer_json,
    first_error_turn,
    grader_report,
    payload_message,
    tool_schemas,
    turn_records,
)
from coevolve.llm.contract import Completion, ContextWindowExceeded, ModelUnavailable, RoleClient
from coevolve.values import FAILURE_CATEGORIES, FailureLabel, FailureLocus, Trajectory

PROMPTS = Path(__file__).resolve().parent / "prompts"
UNKNOWN = "unknown"
MAX_CUT_LINES = 1000


@dataclass
class RoleUsage:
    """Tokens and dollars a role's model spent (recorded per arm of a dataset build)."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    usd: float = 0.0
    unparseable: int = 0
    fitted: int = 0  # calls whose prompt was cut to fit the model's context window
    failed_calls: int = 0  # calls that raised (window exceeded, model unavailable) or were not made
    cuts: list[str] = field(default_factory=list)  # what was cut, one line per cut

    def add(self, comp: Completion) -> None:
        self.calls += 1
        self.prompt_tokens += comp.prompt_tokens
        self.completion_tokens += comp.completion_tokens
        self.usd += comp.cost_usd

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def record_cuts(self, role: str, lines: list[str]) -> None:
        """Count a fitted prompt and keep its cut lines (the first `MAX_CUT_LINES` of a long-lived total)."""
        if lines:
            self.fitted += 1
            self.cuts += [f"{role}: {line}" for line in lines][: max(0, MAX_CUT_LINES - len(self.cuts))]

    def as_json(self) -> dict[str, Any]:
        """The counts; `fitted`, `failed_calls` and `cuts` only when there are any."""
        out: dict[str, Any] = {"calls": self.calls, "tokens": self.tokens, "prompt_tokens": self.prompt_tokens,
                               "completion_tokens": self.completion_tokens, "usd": round(self.usd, 6),
                               "unparseable": self.unparseable}
        if self.fitted:
            out["fitted"] = self.fitted
        if self.failed_calls:
            out["failed_calls"] = self.failed_calls
        if self.cuts:
            out["cuts"] = list(self.cuts)
        return out


def rule_based_guess(traj: Trajectory) -> tuple[int, str]:
    """The first error observation, else the last turn before the final finish."""
    first = first_error_turn(traj)
    if first is not None:
        return first, f"turn {first} is the first with an error observation"
    last = max(0, len(traj.turns) - 2) if len(traj.turns) > 1 else 0
    return last, f"no error observation; turn {last} is the last action before finishing"


@dataclass
class Judge:
    """Each method adds its model spend to `usage` when given (per call, thread-safe for callers that
    keep their own), else to the judge's running total `self.usage`."""

    model: str
    client: RoleClient
    retries: int = 2
    usage: RoleUsage = field(default_factory=RoleUsage)
    budget: Budget | None = None  # the model's context window; None: the client's, on first use

    def _budget(self) -> Budget:
        if self.budget is None:
            self.budget = self.client.budget(self.model, "judge")
        return self.budget

    def _ask(
        self, prompt: str, payload: dict[str, Any], ask: str, seed: int, parse: Callable[[dict[str, Any]], Any],
        usage: RoleUsage | None, stages: list[Stage],
    ) -> tuple[Any, str]:
        """(the parsed answer, "") or (None, why there is none)."""
        usage = usage if usage is not None else self.usage
        system = (PROMPTS / prompt).read_text()

        def make(p: dict[str, Any], cut: bool) -> list[dict[str, Any]]:
            return [{"role": "system", "content": system}, payload_message(p, f"{CUT_NOTE}\n{ask}" if cut else ask)]

        budget = self._budget()
        fitted = fit(payload, make, stages, budget)
        usage.record_cuts(prompt.removesuffix(".md"), fitted.record())
        if not fitted.fits:
            usage.failed_calls += 1
            return None, (f"the prompt does not fit the judge model's window even after cuts "
                          f"({fitted.tokens} tokens, {fitted.limit} allowed)")
        refitted, attempt = False, 0
        while attempt <= self.retries:
            try:
                comp = self.client.complete(self.model, fitted.messages, [], seed + attempt)
            except ModelUnavailable as e:  # the gateway retried infra faults already
                usage.failed_calls += 1
                if isinstance(e, ContextWindowExceeded) and not refitted:
                    # counted too low: fit once more, to 3/4 of what was allowed, and ask again
                    refitted = True
                    fitted = fit(payload, make, stages, budget, limit=int(fitted.limit * 0.75))
                    usage.record_cuts(prompt.removesuffix(".md"), ["window exceeded: refitted to 3/4", *fitted.record()])
                    if fitted.fits:
                        continue
                return None, f"the judge call failed: {str(e)[:300]}"
            usage.add(comp)
            obj = answer_json(comp.message.get("content") or "")
            parsed = parse(obj) if obj is not None else None
            if parsed is not None:
                return parsed, ""
            usage.unparseable += 1
            attempt += 1
        return None, "the judge's answer could not be parsed"

    # ------------------------------------------------------------------ failure locus
    def locate(self, traj: Trajectory, seed: int = 0, usage: RoleUsage | None = None) -> FailureLocus:
        if traj.passed:
            raise ValueError(f"trajectory {traj.id[:12]} passed: there is no failure to locate")
        guess, why = rule_based_guess(traj)
        n = len(traj.turns)
        payload = {
            "task": traj.instance.instruction,
            "tools": tool_schemas(traj),
            "turns": turn_records(traj),
            "grader_report": grader_report(traj),
            "rule_based_guess": {"turn": guess, "reason": why},
        }

        def parse(obj: dict[str, Any]) -> tuple[int, str] | None:
            turn, reason = obj.get("turn"), obj.get("reason")
            if isinstance(turn, bool) or not isinstance(turn, int) or not 0 <= turn < n or not isinstance(reason, str):
                return None
            return turn, reason.strip() or "(no reason given)"

        found, failed = (
            self._ask("judge_locate.md", payload, "Locate the failure.", seed, parse, usage, judge_stages(guess))
            if n else (None, "the judge's answer could not be parsed")
        )
        if found is None:
            return FailureLocus(traj.id, guess, f"{UNKNOWN}: {failed}; rule-based guess: {why}")
        return FailureLocus(traj.id, found[0], found[1])

    # ------------------------------------------------------------------ candidate quality
    def score(
        self, traj: Trajectory, locus: FailureLocus, candidate: dict[str, Any], seed: int = 0, usage: RoleUsage | None = None
    ) -> dict[str, Any]:
        """{"score", "valid", "consistent", "addresses", "why"}; an invalid call scores 0 without asking."""
        tools = tool_schemas(traj)
        valid, problem = check_call(candidate.get("tool_call"), tools)
        if not valid:
            return {"score": 0.0, "valid": False, "consistent": False, "addresses": False, "why": problem}
        payload = {
            "task": traj.instance.instruction,
            "tools": tools,
            "turns": turn_records(traj, upto=locus.turn_index),
            "failing_turn": turn_records(traj)[locus.turn_index],
            "locus_reason": locus.reason,
            "candidate": candidate,
        }

        def parse(obj: dict[str, Any]) -> dict[str, Any] | None:
            s = obj.get("score")
            if isinstance(s, bool) or not isinstance(s, (int, float)) or not 0 <= s <= 1:
                return None
            return {
                "score": float(s),
                "valid": bool(obj.get("valid", True)),
                "consistent": bool(obj.get("consistent", True)),
                "addresses": bool(obj.get("addresses", True)),
                "why": str(obj.get("why", "")),
            }

        stages = judge_stages(locus.turn_index)
        scored, failed = self._ask("judge_score.md", payload, "Score the candidate.", seed, parse, usage, stages)
        if scored is None:
            unparsed = failed.startswith("the judge's answer")  # a call that failed skips the candidate
            return {"score": 0.0, "valid": unparsed, "consistent": False, "addresses": False, "why": f"{UNKNOWN}: {failed}"}
        return scored

    # ------------------------------------------------------------------ failure taxonomy
    def classify(
        self, traj: Trajectory, locus: FailureLocus | None = None, seed: int = 0, usage: RoleUsage | None = None
    ) -> FailureLabel:
        """One of the six categories (`coevolve.values.FAILURE_CATEGORIES`) with a rationale; an
        unparseable answer is recorded as category `other` with an `unknown:` rationale. Infra errors
        are not failures of the model and are refused."""
        if traj.passed or traj.error == "infra":
            raise ValueError(f"trajectory {traj.id[:12]} is not a task failure (passed or infra): nothing to classify")
        locus = locus or self.locate(traj, seed, usage)
        payload = {
            "task": traj.instance.instruction,
            "tools": tool_schemas(traj),
            "turns": turn_records(traj),
            "grader_report": grader_report(traj),
            "evidence": classification_evidence(traj, locus),
        }

        def parse(obj: dict[str, Any]) -> FailureLabel | None:
            cat, why = obj.get("category"), obj.get("rationale", "")
            if cat not in FAILURE_CATEGORIES or not isinstance(why, str):
                return None
            return FailureLabel(cat, why.strip() or "(no rationale given)")

        stages = judge_stages(locus.turn_index)
        label, failed = self._ask("judge_classify.md", payload, "Classify the failure.", seed, parse, usage, stages)
        return label or FailureLabel("other", f"{UNKNOWN}: {failed}")


def classification_evidence(traj: Trajectory, locus: FailureLocus) -> dict[str, Any]:
    """Rule-based evidence handed to the judge for the taxonomy (all of it observable)."""
    import re

    malformed = [
        {"turn": i, "call": c["name"], "observation": r[:200]}
        for i, rec in enumerate(traj.turns)
        for c, r in zip(rec.tool_calls, rec.tool_results)
        if r.startswith(("error", "[validate_args]")) and re.search(r"argument|schema|json|required|missing", r, re.IGNORECASE)
    ]
    events = traj.turns[locus.turn_index].events if locus.turn_index < len(traj.turns) else ()
    # the instruction's explicit items (quoted or back-ticked literals, addresses) that no call of the
    # agent ever passed on: a sign it ignored something the task spelled out
    quoted = re.findall(r"`([^`]{2,80})`|'([^']{2,80})'|\"([^\"]{2,80})\"|([\w.+-]+@[\w-]+\.[\w.-]+)", traj.instance.instruction)
    items = list(dict.fromkeys(x for groups in quoted for x in groups if x))
    sent = " ".join(c["arguments"] for rec in traj.turns for c in rec.tool_calls)
    sent_plain = sent.replace('\\"', '"')
    missing = [x for x in items if x not in sent and x not in sent_plain]
    observed = sum(len(r) for rec in traj.turns[: locus.turn_index] for r in rec.tool_results) // 4
    return {
        "malformed_calls": malformed,
        "context_cut_at_locus": any(e.startswith("context:") for e in events),
        "observation_tokens_before_locus": observed,
        "instruction_items_missing": missing,
        "failure_locus": {"turn": locus.turn_index, "reason": locus.reason},
    }


def check_call(call: Any, tools: list[dict[str, Any]]) -> tuple[bool, str]:
    """Is `call` ({"name", "arguments": dict}) a call of one of `tools` that satisfies its schema?"""
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return False, "the candidate has no tool call"
    spec = next((t for t in tools if t["name"] == call["name"]), None)
    if spec is None:
        return False, f"unknown tool {call['name']!r}"
    args = call.get("arguments")
    if not isinstance(args, dict):
        return False, "arguments must be a JSON object"
    errors = list(Draft7Validator(spec["parameters"]).iter_errors(args))
    if errors:
        return False, f"arguments break the schema of {call['name']}: {errors[0].message}"
    return True, ""
