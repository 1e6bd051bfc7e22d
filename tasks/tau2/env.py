"""One tau2 conversation: tau2's environment for the domain tools, a customer behind `message_user`.

Every tool call is executed by tau2 (`Environment.get_response`, which runs the tool, turns exceptions
into `Error: ...` observations and serialises the result as tau2 does) and recorded as tau2 messages
(`AssistantMessage` with the call, `ToolMessage` with the result; `AssistantMessage` text and the user's
`UserMessage` for `message_user`), so the conversation can be scored by tau2's evaluator unchanged.

Termination follows tau2's orchestrator: `finish` is the agent's stop (`###STOP###`, `AGENT_STOP`); a
customer reply with a stop token ends it from the other side (`USER_STOP`; after
`transfer_to_human_agents` the scripted customer answers `###TRANSFER###`, as tau2's user guidelines
ask); `MAX_ERRORS` failed tool calls end it with `TOO_MANY_ERRORS`; a run cut by the turn limit is
`MAX_STEPS`; a customer model that keeps failing is `USER_ERROR`. tau2 scores only agent/user stops.
"""

from __future__ import annotations

import copy
import itertools
import re
from typing import Any

import structlog

from harness_store.values import TaskInstance, ToolSpec
from tasks.base import MAX_ARG_CHARS, TaskEnv, ToolArgError, ToolResult
from tasks.tau2.data import new_environment, raw_tasks, scenario, task_model, tau2, tool_specs, user_model
from tasks.tau2.users import GREETING, STOP, ScriptedUser, SimulatedUser, is_stop

MAX_ERRORS = 10  # tau2's DEFAULT_MAX_ERRORS
TRANSFER_TOOL = "transfer_to_human_agents"

MESSAGE_USER = ToolSpec(
    name="message_user",
    description=(
        "Send a message to the customer and wait for the answer: the observation is the customer's reply. "
        "This is the only way to talk to the customer."
    ),
    parameters={
        "type": "object",
        "properties": {"message": {"type": "string", "description": "what you say to the customer"}},
        "required": ["message"],
        "additionalProperties": False,
    },
    impl="message_user",
)
FINISH = ToolSpec(
    name="finish",
    description=(
        "End the conversation, once the customer's requests are resolved, refused or transferred. "
        "The customer may also end it."
    ),
    parameters={
        "type": "object",
        "properties": {"summary": {"type": "string", "description": "one-line summary of what you did"}},
        "required": [],
        "additionalProperties": False,
    },
    impl="finish",
)

_logged_user = False


class Tau2Env(TaskEnv):
    def __init__(self, instance: TaskInstance, domain: str, task_id: str):
        super().__init__(instance)
        t = tau2()
        self.t = t
        self.domain, self.task_id = domain, task_id
        self.task = task_model(domain, task_id)
        if self.task.initial_state is not None:
            raise NotImplementedError(f"tau2 {domain} task {task_id} has an initial state; not supported")
        self.env = new_environment(domain)
        self._domain_specs = tool_specs(domain)
        self._domain_tools = {s.impl for s in self._domain_specs}
        self.opening = instance.instruction
        model, args = user_model()
        self.user: ScriptedUser | SimulatedUser
        if model:
            self.user = SimulatedUser(self.task, self.opening, model, args)
            self.blocking_tools = frozenset({"message_user"})  # a synchronous call to the user's model
        else:
            self.user = ScriptedUser(scenario(raw_tasks(domain)[task_id]))
        _log_user_once(self.user, model)
        self.messages: list[Any] = [
            t.message.AssistantMessage(role="assistant", content=GREETING),
            t.message.UserMessage(role="user", content=self.opening),
        ]
        self.termination: Any = None
        self.transferred = False
        self.errors = 0
        self.user_error = ""
        self._ids = itertools.count()

    # ------------------------------------------------------------------ tools
    def tool_specs(self) -> tuple[ToolSpec, ...]:
        return (*self._domain_specs, MESSAGE_USER, FINISH)

    def call(self, impl: str, args: Any) -> ToolResult:
        if impl not in self._domain_tools:
            return super().call(impl, args)
        self.calls.append((impl, args if isinstance(args, dict) else {"_raw": args}))
        if self.termination is not None:
            return ToolResult("error: the conversation has ended", error=True)
        if not isinstance(args, dict):
            return ToolResult("error: arguments must be a JSON object", error=True)
        if any(isinstance(v, str) and len(v) > MAX_ARG_CHARS for v in args.values()):
            return ToolResult(f"error: an argument is longer than {MAX_ARG_CHARS} characters", error=True)
        return self._domain_call(impl, args)

    def _domain_call(self, name: str, args: dict[str, Any]) -> ToolResult:
        M = self.t.message
        call_id = f"call_{next(self._ids)}"
        recorded = M.ToolCall(id=call_id, name=name, arguments=copy.deepcopy(args), requestor="assistant")
        run = M.ToolCall(id=call_id, name=name, arguments=copy.deepcopy(args), requestor="assistant")
        result = self.env.get_response(run)
        self.messages += [M.AssistantMessage(role="assistant", tool_calls=[recorded]), result]
        if not result.error:
            self.transferred |= name == TRANSFER_TOOL
            return ToolResult(result.content)
        self.errors += 1
        content = "error: " + re.sub(r"^Error:\s*", "", result.content or "")
        if self.errors >= MAX_ERRORS:
            self.termination = self.t.simulation.TerminationReason.TOO_MANY_ERRORS
            self.finished = True
            return ToolResult(f"{content} ({MAX_ERRORS} failed tool calls: the conversation is over)", True, True)
        return ToolResult(content, error=True)

    def tool_message_user(self, message: str) -> ToolResult:
        if not isinstance(message, str) or not message.strip():
            raise ToolArgError("message must be a non-empty string")
        if self.termination is not None:
            return ToolResult("error: the conversation has ended", error=True)
        M = self.t.message
        said = M.AssistantMessage(role="assistant", content=message)
        self.messages.append(said)
        if isinstance(self.user, ScriptedUser):
            answer = M.UserMessage(role="user", content=self.user.reply(message, transferred=self.transferred))
        else:
            try:
                answer = self.user.reply_message(said)
            except RuntimeError as e:
                self.user_error = str(e)
                self.termination = self.t.simulation.TerminationReason.USER_ERROR
                self.finished = True
                return ToolResult(f"error: the customer could not be reached ({e})", True, True)
        self.messages.append(answer)
        text = answer.content or ""
        if is_stop(text):
            self.termination = self.t.simulation.TerminationReason.USER_STOP
            self.finished = True
            return ToolResult(f"The customer ended the conversation: {text}", finished=True)
        return ToolResult(text)

    def tool_finish(self, summary: str = "") -> ToolResult:
        if self.termination is None:
            self.messages.append(self.t.message.AssistantMessage(role="assistant", content=STOP))
            self.termination = self.t.simulation.TerminationReason.AGENT_STOP
        self.finished = True
        return ToolResult("finished", finished=True)

    # ------------------------------------------------------------------ the run, as tau2 sees it
    def termination_reason(self) -> Any:
        """How the conversation ended; a run that is still open was cut by the turn limit (MAX_STEPS)."""
        return self.termination or self.t.simulation.TerminationReason.MAX_STEPS

    def simulation_run(self) -> Any:
        """The conversation as tau2's `SimulationRun`, for `tau2.evaluator.evaluator.evaluate_simulation`."""
        from tau2.utils.utils import get_now

        now = get_now()
        return self.t.simulation.SimulationRun(
            id=f"{self.instance.id}#{id(self)}",
            task_id=self.task_id,
            start_time=now,
            end_time=now,
            duration=0.0,
            termination_reason=self.termination_reason(),
            messages=list(self.messages),
            user_cost=self.user.cost_usd or None,
        )


def _log_user_once(user: Any, model: str | None) -> None:
    global _logged_user
    if not _logged_user:
        _logged_user = True
        structlog.get_logger(role="tau2").info(
            "tau2 customer", user=user.kind, model=model,
            note=None if model else "offline scripted user: set COEVOLVE_TAU2_USER_MODEL for tau2's LLM user",
        )
