"""The expert rewriter (docs/ARCHITECTURE.md §4): given a failed rollout of the weak model and its failure locus,
rewrite only that turn — one sentence of corrected strategy plus one corrected tool call — as k
candidates. A plain class: any model the gateway reaches (or `synthetic/expert`) plays the role.

The expert sees the task, the tools, the conversation exactly as the weak model saw it up to the
failing turn, that turn and the judge's reason; never the checker or the turns after it. It may
consult the family's handbook through the handbook tools. An unparseable answer is retried, then the
candidate is recorded as unknown (it scores 0 and is never kept).

The payload is fitted to the expert model's context window (`coevolve.agents.fit`: the task, the agent's
system and task messages, the last turns before the failing one, the failing turn and the judge's
reason are kept; older tool results are elided, then older turns cut, each cut marked in the prompt
and recorded in the call's `RoleUsage.cuts`); a quarter of the budget stays free for handbook
look-ups, whose results are clipped to the room left. A call that fails (the window exceeded, the
model unavailable after the gateway's retries) or a prompt that cannot be made to fit gives unknown
candidates, which are skipped — never an exception out of the rewriter.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coevolve.agents.executor import assistant_positions
from coevolve.agents.fit import CUT_NOTE, TOOL_SHARE, Budget, expert_stages, fit
from coevolve.agents.handbook_tools import HANDBOOK_TOOLS, answer_handbook_calls
from coevolve.agents.judge import RoleUsage
from coevolve.agents.transcript import answer_json, payload_message, tool_schemas, turn_records
from coevolve.llm.contract import ContextWindowExceeded, ModelUnavailable, RoleClient
from coevolve.tasks.handbook import Handbook
from coevolve.values import FailureLocus, Trajectory

PROMPT = Path(__file__).resolve().parent / "prompts" / "expert_rewrite.md"


def prefix_messages(traj: Trajectory, turn: int) -> list[dict[str, Any]]:
    """The weak model's conversation up to (not including) its assistant message of `turn`."""
    positions = assistant_positions(traj.messages)
    return [dict(m) for m in traj.messages[: positions[turn]]]


def corrected_message(candidate: dict[str, Any], turn: int) -> dict[str, Any]:
    """A candidate as the assistant message that replaces the failing turn."""
    call = candidate["tool_call"]
    return {
        "role": "assistant",
        "content": candidate["strategy"],
        "tool_calls": [
            {
                "id": f"call_{turn}_0",
                "type": "function",
                "function": {"name": call["name"], "arguments": json.dumps(call["arguments"], sort_keys=True)},
            }
        ],
    }


@dataclass
class ExpertRewriter:
    model: str
    client: RoleClient
    handbook: Handbook | None = None
    retries: int = 1
    max_tool_rounds: int = 3
    usage: RoleUsage = field(default_factory=RoleUsage)
    budget: Budget | None = None  # the model's context window; None: the client's, on first use

    def _budget(self) -> Budget:
        if self.budget is None:
            self.budget = self.client.budget(self.model, "expert")
        return self.budget

    def rewrite(
        self, traj: Trajectory, locus: FailureLocus, k: int = 3, seed: int = 0, usage: RoleUsage | None = None
    ) -> list[dict[str, Any]]:
        """k candidates {"strategy", "tool_call": {"name", "arguments"}}, or {"error": ...} when the
        model's answer could not be parsed. Model spend goes to `usage` when given, else `self.usage`."""
        usage = usage if usage is not None else self.usage
        if not 0 <= locus.turn_index < len(traj.turns):
            raise ValueError(f"locus turn {locus.turn_index} is outside the rollout's {len(traj.turns)} turns")
        t = traj.public_view()
        payload = {
            "task": t.instance.instruction,
            "tools": tool_schemas(t),
            "prefix_messages": prefix_messages(t, locus.turn_index),
            "failing_turn": turn_records(t)[locus.turn_index],
            "judge_reason": locus.reason,
            "k": k,
        }
        system, ask = PROMPT.read_text(), f"Rewrite the failing turn: {k} candidates."

        def make(p: dict[str, Any], cut: bool) -> list[dict[str, Any]]:
            return [{"role": "system", "content": system}, payload_message(p, f"{CUT_NOTE}\n{ask}" if cut else ask)]

        budget = self._budget()
        tools = HANDBOOK_TOOLS if self.handbook is not None and self.max_tool_rounds else []
        limit = budget.limit - (int(budget.limit * TOOL_SHARE) if tools else 0)
        fitted = fit(payload, make, expert_stages(), budget, tools, limit=limit)
        usage.record_cuts("expert", fitted.record())
        if not fitted.fits:
            usage.failed_calls += 1
            why = f"the prompt does not fit the expert model's window even after cuts ({fitted.tokens} tokens, {fitted.limit} allowed)"
            return [{"error": f"unknown: {why}"}] * k
        text = ""
        refitted, attempt = False, 0
        while attempt <= self.retries:  # one request for all k candidates: the prompt is paid once
            try:
                text = self._answer(list(fitted.messages), seed + 100 * attempt, usage)
            except ModelUnavailable as e:  # the gateway retried infra faults already
                usage.failed_calls += 1
                if isinstance(e, ContextWindowExceeded) and not refitted:
                    # counted too low: fit once more, to 3/4 of what was allowed, and ask again
                    refitted = True
                    fitted = fit(payload, make, expert_stages(), budget, tools, limit=int(fitted.limit * 0.75))
                    usage.record_cuts("expert", ["window exceeded: refitted to 3/4", *fitted.record()])
                    if fitted.fits:
                        continue
                return [{"error": f"unknown: the expert call failed: {str(e)[:300]}"}] * k
            obj = answer_json(text)
            raw = obj.get("candidates") if isinstance(obj, dict) else None
            if isinstance(raw, list):
                parsed = [_parse(c) if isinstance(c, dict) else None for c in raw[:k]]
                if any(parsed):
                    out = [c or {"error": "unknown: this candidate could not be parsed"} for c in parsed]
                    usage.unparseable += sum(c is None for c in parsed)
                    return out + [{"error": "unknown: the expert gave fewer candidates"}] * (k - len(out))
            usage.unparseable += 1
            attempt += 1
        return [{"error": "unknown: the expert's answer could not be parsed", "raw": text[:500]}] * k

    def _answer(self, messages: list[dict[str, Any]], seed: int, usage: RoleUsage) -> str:
        """One answer, after any handbook look-ups the model makes (each result clipped to the room the
        window leaves; with none left, the model is told so and must answer)."""
        budget = self._budget()
        full = False
        for round_ in range(self.max_tool_rounds + 1):
            tools = HANDBOOK_TOOLS if self.handbook is not None and round_ < self.max_tool_rounds and not full else []
            comp = self.client.complete(self.model, messages, tools, seed)
            usage.add(comp)
            if not comp.message.get("tool_calls") or not tools:
                return comp.message.get("content") or ""
            cuts, filled = answer_handbook_calls(self.handbook, comp.message, messages, budget, tools)
            for cut in cuts:
                usage.record_cuts("expert", [cut])
            full = full or filled
        return ""


def _parse(obj: dict[str, Any]) -> dict[str, Any] | None:
    strategy, call = obj.get("strategy"), obj.get("tool_call")
    if not isinstance(strategy, str) or not strategy.strip() or not isinstance(call, dict):
        return None
    name, args = call.get("name"), call.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    if not isinstance(name, str) or not isinstance(args, dict):
        return None
    return {"strategy": " ".join(strategy.split()), "tool_call": {"name": name, "arguments": args}}
