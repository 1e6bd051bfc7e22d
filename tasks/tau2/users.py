"""The customer on the other end of `message_user`.

Two users, chosen per rollout by the environment variable `COEVOLVE_TAU2_USER_MODEL`:

- set (any litellm model, e.g. `gemini/gemini-2.5-flash`, `gpt-4.1`): tau2's own LLM user simulator
  (`tau2.user.user_simulator.UserSimulator`, tau2's guidelines and the task's `user_scenario`), called
  through tau2's `generate` (litellm), temperature 0 unless `COEVOLVE_TAU2_USER_ARGS` says otherwise.
  This is the user tau2's published numbers use;
- unset: `ScriptedUser`, an offline stand-in that answers from the task's scenario by fixed rules and
  never calls a model. It does not role-play the scenario's conditional instructions: it exists so the
  families run in CI and under the reference solver, not to measure a real agent.

Both begin from the same opening message (`opening_message`, the instance's instruction: the executor
sends it as the first user message), so instance ids and instructions do not depend on the user; the LLM
user continues a conversation in which tau2's default greeting was answered by that opening.
Stop semantics are tau2's: a reply containing `###STOP###`, `###TRANSFER###` or `###OUT-OF-SCOPE###`
ends the conversation (tau2's `USER_STOP`).
"""

from __future__ import annotations

import re
import time
from typing import Any

from tasks.tau2.data import Scenario

STOP, TRANSFER, OUT_OF_SCOPE = "###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###"
GREETING = "Hi! How can I help you today?"  # tau2's DEFAULT_FIRST_AGENT_MESSAGE
MAX_SCRIPTED_REPLIES = 30


def is_stop(text: str) -> bool:
    return any(tok in (text or "") for tok in (STOP, TRANSFER, OUT_OF_SCOPE))


# ---------------------------------------------------------------------------------- first person
_OBJECT_BEFORE = (
    r"to|for|with|tell|tells|told|give|gives|gave|ask|asks|asked|help|helps|about|than|from|let|lets|offer|"
    r"offers|offered|send|sends|sent|show|shows|call|calls|contact|contacts|of|at|on|by|charge|charged|"
    r"refund|refunded|remind|reminds|assure|assures|inform|informs|informed|transfer|transfers|upgrade|deny"
)
_RULES = [
    (r"\byou are\b", "I am"),
    (r"\byou were\b", "I was"),
    (r"\byou're\b", "I'm"),
    (r"\byou've\b", "I've"),
    (r"\byou'd\b", "I'd"),
    (r"\byou'll\b", "I'll"),
    (r"\byourself\b", "myself"),
    (r"\byours\b", "mine"),
    (r"\byour\b", "my"),
    (rf"\b({_OBJECT_BEFORE})\s+you\b", r"\1 me"),
    (r"\byou\b", "I"),
]


def first_person(text: str) -> str:
    """The scenario's second-person text as the customer would say it ("You want to cancel your
    flight" -> "I want to cancel my flight"); a mechanical rewrite, good enough for a stand-in."""
    out = " ".join(text.split())
    for pattern, repl in _RULES:
        out = re.sub(pattern, repl, out, flags=re.IGNORECASE)
    out = re.sub(r"\bi\b", "I", out)
    return re.sub(r"(^|[.!?]\s+)([a-z])", lambda m: m.group(1) + m.group(2).upper(), out)


def sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+|\n+", text or "") if s.strip() and s.strip() != "."]


def opening_message(sc: Scenario) -> str:
    """The customer's first message: the first sentence of tau2's reason for calling, first person."""
    first = sentences(sc.reason_for_call)[:1] or ["I need some help."]
    return "Hi! " + first_person(first[0])


# ---------------------------------------------------------------------------------- scripted user
_IDENTITY = ("user id", "your name", "full name", "zip", "email", "verify", "authenticat", "identif", "identity",
             "look up your", "locate your", "your account", "your profile", "reservation id", "order id")
_CLOSING = ("anything else", "is there anything", "goodbye", "good bye", "have a great", "have a nice", "take care")
_CONFIRM = ("confirm", "proceed", "shall i", "should i", "would you like", "do you want", "go ahead", "yes/no",
            "(yes)", "is that correct", "is this correct", "correct?", "okay?", "ok?")


class ScriptedUser:
    """Deterministic replies from the scenario, by the agent's last message:
    after a transfer -> `###TRANSFER###`; identity asked and not yet given -> the known info (and what the
    customer does not know); a closing question or a plain statement -> the next sentence of the reason
    for calling not yet said (sentences that talk about the agent or about what not to reveal are never
    said), else "that's all" with `###STOP###`; a confirmation question -> "Yes, please go ahead."
    """

    kind = "scripted"

    def __init__(self, sc: Scenario):
        self.scenario = sc
        self.identity_given = False
        self.pending = [
            s for s in sentences(sc.reason_for_call)[1:] if not re.search(r"\bagent\b|reveal|^if\b", s, re.IGNORECASE)
        ]
        self.replies = 0
        self.cost_usd = 0.0

    def _identity(self) -> str:
        self.identity_given = True
        parts = [first_person(s) for s in sentences(self.scenario.known_info)]
        parts += [first_person(s) for s in sentences(self.scenario.unknown_info)]
        return " ".join(parts) or "I don't have any account details at hand."

    def reply(self, agent_text: str, transferred: bool = False) -> str:
        self.replies += 1
        text = (agent_text or "").lower()
        if transferred:
            return TRANSFER
        if self.replies > MAX_SCRIPTED_REPLIES:
            return f"I have to go now. {STOP}"
        if not self.identity_given and any(k in text for k in _IDENTITY):
            return self._identity()
        if any(k in text for k in _CLOSING):
            return first_person(self.pending.pop(0)) if self.pending else f"No, that's all. Thank you! {STOP}"
        if any(k in text for k in _CONFIRM) or text.rstrip().endswith("?"):
            if not self.identity_given:
                return self._identity()
            return "Yes, please go ahead."
        if self.pending:
            return first_person(self.pending.pop(0))
        return f"Thank you, that's all I needed. {STOP}"


# ---------------------------------------------------------------------------------- LLM user
class SimulatedUser:
    """tau2's LLM user simulator, continuing from the opening message."""

    kind = "llm"

    def __init__(self, task: Any, opening: str, model: str, llm_args: dict[str, Any], attempts: int = 4):
        from tasks.tau2.data import tau2

        t = tau2()
        self.model = model
        self.attempts = attempts
        self.sim = t.user_simulator.UserSimulator(
            tools=None, instructions=str(task.user_scenario), llm=model, llm_args=dict(llm_args)
        )
        self.state = self.sim.get_init_state(
            message_history=[
                t.message.AssistantMessage(role="assistant", content=GREETING),
                t.message.UserMessage(role="user", content=opening),
            ]
        )
        self.cost_usd = 0.0

    def reply_message(self, assistant_message: Any) -> Any:
        """The user's tau2 `UserMessage` answering `assistant_message`; model errors are retried, then raised."""
        last: Exception | None = None
        for attempt in range(self.attempts):
            snapshot = self.state.model_copy(deep=True)
            try:
                msg, self.state = self.sim.generate_next_message(assistant_message, self.state)
                self.cost_usd += float(msg.cost or 0.0)
                return msg
            except Exception as e:  # noqa: BLE001 — transport/provider errors: retried, then reported
                last = e
                self.state = snapshot
                if attempt + 1 < self.attempts:
                    time.sleep(min(4.0, 0.5 * 2**attempt))
        raise RuntimeError(f"user model {self.model} failed {self.attempts} times: {type(last).__name__}: {last}")
