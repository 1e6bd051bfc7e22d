"""One tau2 conversation: tau2's environment for the domain tools, and a customer.

Two protocols, chosen by the harness (`PROTOCOLS`):

- `tau2` (tau2's own, the baseline's): the env declares a user channel (`user_channel`, the executor's
  general capability): the agent's plain assistant text is its message to the customer and the customer's
  reply comes back as a user message; text sent together with tool calls is recorded with those calls
  (tau2's communicate check reads it, as it reads tau2's own transcripts: tau2's orchestrator sends such a
  message to the environment and keeps its text). There is no `finish`: the conversation ends when the
  customer stops or transfers (`###STOP###`, `###TRANSFER###`: `USER_STOP`), at tau2's step limit
  (`MAX_STEPS`, the default of `tau2 run`: every agent message, every batch of tool results and every user
  message is a step, and the limits are checked, as tau2's orchestrator does, only when the next message
  goes to the agent or the user) or at tau2's error limit (`MAX_ERRORS` failed tool calls:
  `TOO_MANY_ERRORS`; an unknown tool name, unparseable or non-object arguments and an environment error
  all count). The agent's `###STOP###` text ends nothing: tau2's `LLMAgent.is_stop` is always False.
- `tool` (this project's earlier protocol, kept for experiments; not comparable with tau2): the agent talks
  through the `message_user` tool and may end with `finish` (`AGENT_STOP`); a harness that offers
  `message_user` runs it.

Every domain tool call is executed by tau2 (`Environment.get_response`, which runs the tool, turns
exceptions into `Error: ...` observations and serialises the result as tau2 does) and recorded as tau2
messages, so that tau2's evaluator scores the conversation unchanged. The customer is created when the
conversation opens (`open_conversation`), with the rollout's seed, and speaks first, after tau2's greeting.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
from typing import Any

import structlog

from coevolve.tasks.base import MAX_ARG_CHARS, TaskEnv, ToolArgError, ToolResult
from coevolve.tasks.tau2.data import (
    new_environment,
    raw_tasks,
    scenario,
    task_model,
    tau2,
    tool_specs,
    user_model,
)
from coevolve.tasks.tau2.users import GREETING, STOP, CustomerCall, ScriptedUser, SimulatedUser, is_stop
from coevolve.values import TaskInstance, ToolSpec

MAX_ERRORS = 10  # tau2's DEFAULT_MAX_ERRORS (checked against tau2.config at import in tests)
MAX_STEPS = 200  # tau2's DEFAULT_MAX_STEPS, the default of `tau2 run` (and of its RunConfig)
TRANSFER_TOOL = "transfer_to_human_agents"
PROTOCOLS = ("tau2", "tool")

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

_logged: set[str] = set()


class Tau2Env(TaskEnv):
    user_channel = True  # assistant text goes to the customer, unless the harness offers `user_tool`
    user_tool = MESSAGE_USER.impl
    blocking_user = False  # set when the customer is a model called synchronously

    def __init__(self, instance: TaskInstance, domain: str, task_id: str):
        super().__init__(instance)
        self.t = tau2()
        self.domain, self.task_id = domain, task_id
        self.task = task_model(domain, task_id)
        self.env = new_environment(domain)
        self._domain_specs = tool_specs(domain)
        self._domain_tools = {s.impl for s in self._domain_specs}
        self.user: ScriptedUser | SimulatedUser | None = None
        self.protocol: str | None = None
        self.opening = ""
        self.messages: list[Any] = []
        self.termination: Any = None
        self.transferred = False
        self.errors = 0
        self.steps = 0
        self.user_error = ""
        self.seed = 0
        self._turn: Any = None  # the agent's AssistantMessage of the open turn (tau2 protocol)
        self._turn_calls = 0
        self._ids = itertools.count()
        self.apply_initial_state()

    def apply_initial_state(self) -> None:
        """Airline and retail tasks start from the domain's database as it ships; a domain whose tasks carry
        an initial state (telecom) applies it here."""
        if self.task.initial_state is not None:
            raise NotImplementedError(f"tau2 {self.domain} task {self.task_id} has an initial state; not supported")

    # ------------------------------------------------------------------ the conversation's start
    def open_conversation(self, seed: int = 0, channel: bool = True, call: CustomerCall | None = None) -> str:
        """Create the customer for this rollout (seeded) and return its opening, the first user message.
        `channel`: tau2's protocol (assistant text to the customer); False: the `tool` protocol. `call`: how
        an LLM customer reaches its model (the executor's gateway); None: tau2's own litellm call."""
        if self.protocol is not None:
            raise RuntimeError("the conversation is already open")
        self.protocol = "tau2" if channel else "tool"
        self.seed = seed
        sc = scenario(raw_tasks(self.domain)[self.task_id])
        model, args = user_model()
        if model:
            self.user = SimulatedUser(self.task, model, dict(args), seed=seed, call=call)
            if channel:
                self.blocking_user = True  # a synchronous call to the user's model
            else:
                self.blocking_tools = frozenset({"message_user"})
        else:
            self.user = _scripted_user(sc, seed)
        log_once("tau2 customer", user=self.user.kind, model=model,
                 note=None if model else "offline scripted user: set COEVOLVE_TAU2_USER_MODEL for tau2's LLM user")
        M = self.t.message
        self.messages = [M.AssistantMessage(role="assistant", content=GREETING)]
        try:
            self.opening = _opening(self.user, sc)
        except RuntimeError as e:  # the LLM user could not be reached for its first message
            self.user_error = self.infra_error = f"the customer's model could not be reached: {e}"
            self._end(self.t.simulation.TerminationReason.USER_ERROR)
            return ""
        first = getattr(self.user, "first", None)  # the simulator's own UserMessage (cost, usage), if any
        self.messages.append(first if first is not None else M.UserMessage(role="user", content=self.opening))
        self.steps = 1  # tau2: the greeting is set up, the user's first message is the first step
        if is_stop(self.opening):
            self._end(self.t.simulation.TerminationReason.USER_STOP)
        return self.opening

    def _ensure_open(self) -> None:
        """A caller that drives the tools directly (the reference solver, tests) gets the tool protocol."""
        if self.protocol is None:
            self.open_conversation(0, channel=False)

    # ------------------------------------------------------------------ tools
    def tool_specs(self) -> tuple[ToolSpec, ...]:
        return (*self._domain_specs, MESSAGE_USER, FINISH)

    def call(self, impl: str, args: Any) -> ToolResult:
        self._ensure_open()
        if impl not in self._domain_tools and self.protocol != "tau2":
            return super().call(impl, args)
        self.calls.append((impl, args if isinstance(args, dict) else {"_raw": args}))
        if impl not in self._domain_tools:  # message_user or finish offered by a harness: not tau2's tools
            return self._failed(f"error: {impl} is not a tool of this conversation")
        if self.termination is not None:
            return ToolResult("error: the conversation has ended", error=True)
        if not isinstance(args, dict):
            return self._failed("error: arguments must be a JSON object")
        if any(isinstance(v, str) and len(v) > MAX_ARG_CHARS for v in args.values()):
            return self._failed(f"error: an argument is longer than {MAX_ARG_CHARS} characters")
        return self._domain_call(impl, args)

    def _failed(self, content: str) -> ToolResult:
        if self.protocol == "tau2":
            self.errors += 1
            self._turn_calls += 1
        return ToolResult(content, error=True)

    def _domain_call(self, name: str, args: dict[str, Any]) -> ToolResult:
        M = self.t.message
        call_id = f"call_{next(self._ids)}"
        recorded = M.ToolCall(id=call_id, name=name, arguments=copy.deepcopy(args), requestor="assistant")
        run = M.ToolCall(id=call_id, name=name, arguments=copy.deepcopy(args), requestor="assistant")
        result = self.env.get_response(run)
        if self.protocol == "tau2":
            if self._turn is None:
                self.begin_turn(None)
            self._turn.tool_calls = [*(self._turn.tool_calls or []), recorded]
            self.messages.append(result)
            self._turn_calls += 1
        else:
            self.messages += [M.AssistantMessage(role="assistant", tool_calls=[recorded]), result]
        if not result.error:
            self.transferred |= name == TRANSFER_TOOL
            return ToolResult(result.content)
        self.errors += 1
        content = "error: " + re.sub(r"^Error:\s*", "", result.content or "")
        if self.protocol == "tool" and self.errors >= MAX_ERRORS:
            self._end(self.t.simulation.TerminationReason.TOO_MANY_ERRORS)
            return ToolResult(f"{content} ({MAX_ERRORS} failed tool calls: the conversation is over)", True, True)
        return ToolResult(content, error=True)

    # ------------------------------------------------------------------ tau2's protocol (the user channel)
    def say(self, text: str) -> tuple[str | None, bool]:
        """The agent's plain text to the customer: (the customer's reply, the conversation ended). tau2's
        orchestrator: the agent's message is a step, checked against the limits before the user answers;
        the user's message is a step; a stop token ends it (USER_STOP), and the limits are checked after."""
        self._ensure_channel()
        if self.termination is not None:
            return None, True
        said = self.t.message.AssistantMessage(role="assistant", content=text)
        self.messages.append(said)
        self.steps += 1
        if self._limits():
            return None, True
        answer = self._reply(said)
        if answer is None:
            return None, True
        self.messages.append(answer)
        self.steps += 1
        reply = answer.content or ""
        if is_stop(reply):
            self.termination = self.t.simulation.TerminationReason.USER_STOP
        return reply, self._limits()

    def begin_turn(self, text: str | None) -> None:
        """An agent message with tool calls opens: its text (if any) is recorded with the calls that follow."""
        self._ensure_channel()
        self._turn = self.t.message.AssistantMessage(role="assistant", content=text or None, tool_calls=[])
        self._turn_calls = 0
        if self.termination is None:
            self.messages.append(self._turn)

    def call_failed(self, name: str, error: str, raw: Any = None) -> None:
        """A call of the open turn that never reached tau2's tools (an unknown tool name, arguments that are
        not JSON or not an object, an empty message): one more error toward tau2's limit. A call of a name
        that is none of the domain's agent tools, with object arguments, goes to tau2's environment as tau2's
        orchestrator sends it: recorded in the transcript with tau2's own error result ("Tool ... not
        found"), which tau2's action check reads (it ignores who made a call: an agent calling a telecom
        user tool by name can meet a gold user action there). A domain tool the harness left out is only
        counted: the agent was not offered it."""
        self._ensure_channel()
        try:
            args = json.loads(raw) if isinstance(raw, str) else raw
        except json.JSONDecodeError:
            args = None
        if name and isinstance(args, dict) and name not in self._domain_tools and self.termination is None:
            self.calls.append((name, args))
            self._domain_call(name, args)  # records the call and tau2's error, counts it toward the limit
            return
        self.errors += 1
        self._turn_calls += 1

    def end_turn(self) -> bool:
        """The open turn's calls are done: the agent's message and the tool results are tau2 steps, and the
        limits are checked. True when the conversation is over."""
        self._ensure_channel()
        turn, self._turn = self._turn, None
        if self.termination is not None:
            return True
        if turn is not None and not turn.tool_calls:
            turn.tool_calls = None  # tau2: `tool_calls is not None` makes a message a tool call
            if not turn.has_text_content():
                self.messages.remove(turn)
        self.steps += 1 + (self._turn_calls > 0)
        self._turn_calls = 0
        return self._limits()

    def _ensure_channel(self) -> None:
        if self.protocol is None:
            self.open_conversation(0, channel=True)
        if self.protocol != "tau2":
            raise RuntimeError("the user channel is tau2's protocol; this conversation runs the tool protocol")

    def _limits(self) -> bool:
        """tau2's orchestrator, after a step whose message goes to the agent or the user: the step limit,
        then the error limit (the later wins, as there)."""
        R = self.t.simulation.TerminationReason
        if self.steps >= MAX_STEPS:
            self.termination = R.MAX_STEPS
        if self.errors >= MAX_ERRORS:
            self.termination = R.TOO_MANY_ERRORS
        if self.termination is not None:
            self.finished = True
        return self.termination is not None

    def _end(self, reason: Any) -> None:
        self.termination = reason
        self.finished = True

    def _reply(self, said: Any) -> Any:
        """The customer's tau2 `UserMessage` answering `said`; None when the customer cannot be reached."""
        M = self.t.message
        if isinstance(self.user, ScriptedUser):
            return M.UserMessage(role="user", content=self.user.reply(said.content or "", transferred=self.transferred))
        try:
            return self.user.reply_message(said)
        except RuntimeError as e:
            self.user_error = self.infra_error = f"the customer's model could not be reached: {e}"
            self._end(self.t.simulation.TerminationReason.USER_ERROR)
            return None

    # ------------------------------------------------------------------ the tool protocol's own tools
    def tool_message_user(self, message: str) -> ToolResult:
        if self.protocol != "tool":
            return ToolResult("error: in this conversation your plain text is what the customer reads", error=True)
        if not isinstance(message, str) or not message.strip():
            raise ToolArgError("message must be a non-empty string")
        if self.termination is not None:
            return ToolResult("error: the conversation has ended", error=True)
        said = self.t.message.AssistantMessage(role="assistant", content=message)
        self.messages.append(said)
        answer = self._reply(said)
        if answer is None:
            return ToolResult(f"error: the customer could not be reached ({self.user_error})", True, True)
        self.messages.append(answer)
        text = answer.content or ""
        if is_stop(text):
            self._end(self.t.simulation.TerminationReason.USER_STOP)
            return ToolResult(f"The customer ended the conversation: {text}", finished=True)
        return ToolResult(text)

    def tool_finish(self, summary: str = "") -> ToolResult:
        if self.protocol != "tool":
            return ToolResult("error: there is no finish here: the conversation ends when the customer leaves", error=True)
        if self.termination is None:
            self.messages.append(self.t.message.AssistantMessage(role="assistant", content=STOP))
            self.termination = self.t.simulation.TerminationReason.AGENT_STOP
        self.finished = True
        return ToolResult("finished", finished=True)

    # ------------------------------------------------------------------ the run, as tau2 sees it
    def termination_reason(self) -> Any:
        """How the conversation ended. One still open when it is graded was ended on the agent's side: at
        tau2's step limit that is MAX_STEPS; before it, the agent stopped (its model failed, e.g. a context
        window overflow, or the harness's turn limit came first): tau2's AGENT_ERROR. Both score 0."""
        if self.termination is not None:
            return self.termination
        R = self.t.simulation.TerminationReason
        return R.MAX_STEPS if self.steps >= MAX_STEPS else R.AGENT_ERROR

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
            user_cost=(self.user.cost_usd if self.user else 0.0) or None,
        )


def _scripted_user(sc: Any, seed: int) -> ScriptedUser:
    """The offline customer: the scenario only (never the task's evaluation criteria) and the rollout's seed."""
    return ScriptedUser(sc, seed)


def _opening(user: Any, sc: Any = None) -> str:
    """The customer's first message, written by the customer itself (`user.opening()`)."""
    return user.opening()


def log_once(event: str, **fields: Any) -> None:
    """Log `event` the first time this process meets it (which customer the conversations have)."""
    if event not in _logged:
        _logged.add(event)
        structlog.get_logger(role="tau2").info(event, **fields)
