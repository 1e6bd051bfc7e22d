"""The proposer: an expert model (any litellm model, or `synthetic/meta`) reads the evidence, may
consult the family's handbook through tools, and returns structured `HarnessEdit`s as JSON. Each
proposed edit is parsed and applied on its own; one that does not parse or does not apply is rejected
with the reason and costs nothing else.

The evidence is fitted to the proposer model's context window (`coevolve.agents.fit`: the current harness and
the first failures are kept; the oldest history entries, then the oldest transcript messages, then
the last failures are cut, each cut marked in the prompt); what was cut goes with every `Proposal`
(`cuts`), hence into the journal's proposal events. A quarter of the budget stays free for handbook
look-ups, whose results are clipped to the room left. A call that fails — the window exceeded once
more after a refit at 3/4, the model unavailable after the gateway's retries — or evidence that
cannot be made to fit is one failed proposal with the reason, never an exception out of `propose`."""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from coevolve.agents.fit import CUT_NOTE, TOOL_SHARE, Budget, evidence_stages, fit
from coevolve.agents.handbook_tools import HANDBOOK_TOOLS, answer_handbook_calls
from coevolve.agents.transcript import FENCE
from coevolve.edits import EditError, apply_edit, edit_from_json
from coevolve.llm.contract import Completion, ContextWindowExceeded, ModelUnavailable, RoleClient
from coevolve.tasks.handbook import Handbook
from coevolve.values import Harness, HarnessEdit

PROMPT = (Path(__file__).resolve().parent.parent / "prompts" / "proposer.md").read_text()
HANDBOOK_NOTE = (
    "You can consult the company's handbook for this task family with the tools search_handbook and "
    "read_handbook before you answer; domain rules the agent needs are often written there."
)
CALL_FAILED = "proposer call failed"  # how a proposal that never reached (or came back from) the model begins
log = structlog.get_logger(role="proposer")


@dataclass(frozen=True)
class Proposal:
    edit: HarnessEdit | None
    candidate: Harness | None
    error: str | None
    raw: dict[str, Any] | str
    cuts: tuple[str, ...] = ()  # what was cut from the evidence to fit the model's window


CATALOGUE_NOTE = (
    "The environment also implements these tools, which the harness does not offer the agent yet (add one "
    "with add_tool, copying its fields):"
)


def tool_catalogue(family: str, harness: Harness) -> list[dict[str, Any]]:
    """The environment's optional tools (coevolve.tasks.helpers) that `harness` does not offer: what a proposer
    may add with `add_tool`. Empty for a family without a catalogue or an unknown family."""
    from coevolve.tasks import family_names
    from coevolve.tasks.helpers import optional_tools

    if family not in family_names():
        return []
    offered = {t.name for t in harness.tools}
    return [t for t in optional_tools(family) if t["name"] not in offered]


def proposer_messages(evidence: dict[str, Any], k: int, handbook: bool = False, cut: bool = False,
                      catalogue: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    body = json.dumps(evidence, indent=1, sort_keys=True, default=str)
    system = PROMPT.format(k=k) + ("\n\n" + HANDBOOK_NOTE if handbook else "")
    if catalogue:
        system += f"\n\n{CATALOGUE_NOTE}\n{FENCE}\n{json.dumps(catalogue, sort_keys=True, separators=(',', ':'))}\n```"
    ask = f"{CUT_NOTE}\nPropose up to {k} edits." if cut else f"Propose up to {k} edits."
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": f"Evidence:\n{FENCE}\n{body}\n```\n{ask}"},
    ]


def catalogue_from_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tool catalogue the system prompt lists ([] when none), as `proposer_messages` wrote it."""
    text = next((m.get("content") or "" for m in messages if m.get("role") == "system"), "")
    at = text.find(CATALOGUE_NOTE)
    if at < 0:
        return []
    start = text.index(FENCE, at) + len(FENCE)
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

    def __init__(self, model: str, client: RoleClient, handbook: Handbook | None = None, max_tool_rounds: int = 4,
                 budget: Budget | None = None):
        """`budget`: the model's context window (None: the client's, on the first proposal)."""
        self.model = model
        self.client = client
        self.handbook = handbook
        self.max_tool_rounds = max_tool_rounds
        self.budget = budget

    def _budget(self) -> Budget:
        if self.budget is None:
            self.budget = self.client.budget(self.model, "proposer")
        return self.budget

    def propose(self, evidence: dict[str, Any], harness: Harness, k: int, seed: int) -> tuple[list[Proposal], Completion]:
        handbook = self.handbook is not None and self.max_tool_rounds > 0
        budget = self._budget()
        tools0 = HANDBOOK_TOOLS if handbook else []
        limit = budget.limit - (int(budget.limit * TOOL_SHARE) if handbook else 0)

        catalogue = tool_catalogue(str(evidence.get("family", "")), harness)

        def make(p: dict[str, Any], cut: bool) -> list[dict[str, Any]]:
            return proposer_messages(p, k, handbook=self.handbook is not None, cut=cut, catalogue=catalogue)

        fitted = fit(evidence, make, evidence_stages(), budget, tools0, limit=limit)
        if not fitted.fits and catalogue:  # the tool catalogue goes before the evidence does
            dropped, catalogue = len(catalogue), []
            fitted = fit(evidence, make, evidence_stages(), budget, tools0, limit=limit)
            fitted_note = [f"the catalogue of {dropped} environment tools left out to fit the context window"]
        else:
            fitted_note = []
        cuts = fitted_note + list(fitted.record())
        used = Completion({}, 0, 0, 0.0)

        def failed(why: str) -> tuple[list[Proposal], Completion]:
            log.warning("proposal failed", model=self.model, why=why[:300], cuts=cuts)
            return [Proposal(None, None, f"{CALL_FAILED}: {why}", "", tuple(cuts))], used

        if not fitted.fits:
            return failed(f"the evidence does not fit the model's window even after cuts ({fitted.tokens} tokens, "
                          f"{fitted.limit} allowed; {budget.describe()})")
        if cuts:
            log.warning("evidence cut to fit the proposer's context window", model=self.model, window=budget.window,
                        source=budget.source, cuts=cuts)
        refitted = False
        messages = fitted.messages
        full = False
        round_ = 0
        while round_ <= self.max_tool_rounds:
            tools = HANDBOOK_TOOLS if self.handbook is not None and round_ < self.max_tool_rounds and not full else []
            try:
                comp = self.client.complete(self.model, messages, tools, seed)
            except ContextWindowExceeded as e:
                if refitted or round_ > 0:
                    return failed(str(e)[:300])
                refitted = True  # counted too low: fit again to 3/4 of what was allowed
                fitted = fit(evidence, make, evidence_stages(), budget, tools0, limit=int(fitted.limit * 0.75))
                cuts += ["window exceeded: refitted to 3/4", *fitted.record()]
                if not fitted.fits:
                    return failed(str(e)[:300])
                messages = fitted.messages
                continue
            except ModelUnavailable as e:  # the gateway retried infra faults already
                return failed(str(e)[:300])
            used = Completion(
                comp.message,
                used.prompt_tokens + comp.prompt_tokens,
                used.completion_tokens + comp.completion_tokens,
                used.cost_usd + comp.cost_usd,
            )
            if not comp.message.get("tool_calls") or not tools:
                break
            round_cuts, filled = answer_handbook_calls(self.handbook, comp.message, messages, budget, tools)
            cuts += round_cuts
            full = full or filled
            round_ += 1
        proposals = parse_response(used.message.get("content") or "", harness)[:k]
        return [dataclasses.replace(p, cuts=tuple(cuts)) for p in proposals] if cuts else proposals, used
