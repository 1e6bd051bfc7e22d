"""tau2-bench telecom as a task family: a customer whose phone is broken, who acts on it with its own tools.

Telecom differs from airline and retail in three ways, each handled here as tau2 handles it:

- The initial state. A task's `initial_state` (`initialization_data`, `initialization_actions` on the agent
  side, e.g. `set_data_usage`, and on the user side, e.g. `turn_airplane_mode_on`, `unseat_sim_card`) is
  applied when the environment is made, as tau2's `Orchestrator.initialize` does
  (`Environment.set_state(initialization_data, initialization_actions, [])`, then `sync_tools`). A task
  with a `message_history` (none in tau2's splits) is refused with a clear error.
- The user's tools. The customer has tau2's user tools (`environment.get_user_tools()`: toggle airplane
  mode, check the status bar, run a speed test, ...); the agent never has them (the baseline harness and
  `tool_specs()` are the agent's domain tools only). As in tau2's orchestrator, a customer message with
  tool calls goes to the environment (`get_response`, requestor "user"; a failed call counts toward tau2's
  error limit), the results go back to the customer, and this repeats until the customer says something to
  the agent; every such message and batch of results is one of tau2's steps, and the limits are checked
  after a batch of results as after any message to the agent or the customer. The agent sees only the
  customer's words, never the user's tool calls or their results.
- User gold actions. Gold actions with requestor "user" are the customer's to perform; the reference plan
  asks for them in plain text (`ask`) and the reference customer (`ReferenceUser`) performs them.

The customer: tau2's LLM user simulator with tau2's user tools when `COEVOLVE_TAU2_USER_MODEL` names a
model (`SimulatedUser` with the user tools), else the offline `ScriptedUser` of the other domains, which has no device
tools and so cannot fix the phone (an offline stand-in for plumbing, not a measure of an agent here). The
policy is tau2's telecom policy (`data.policy("telecom")`: main policy and tech-support manual).
"""

from __future__ import annotations

import copy
import itertools
import json
from collections import Counter
from collections.abc import Callable
from typing import Any

from coevolve.tasks.base import Knowledge, PlanStep, TaskEnv
from coevolve.tasks.tau2 import Tau2Family
from coevolve.tasks.tau2.data import (
    paused_gc,
    raw_tasks,
    scenario,
    tau2,
    user_model,
)
from coevolve.tasks.tau2.env import TRANSFER_TOOL, Tau2Env, log_once
from coevolve.tasks.tau2.plan import FIRST_MESSAGE, TRANSFER_MESSAGE
from coevolve.tasks.tau2.users import (
    GREETING,
    STOP,
    TRANSFER,
    CustomerCall,
    ScriptedUser,
    SimulatedUser,
    is_stop,
)
from coevolve.values import TaskInstance

__all__ = ["ReferenceUser", "Tau2TelecomEnv", "Tau2TelecomFamily", "ask", "gold_actions", "render"]

ASK = "Please do this on your phone, in this order: {actions}."
MAX_REFERENCE_REPLIES = 60


# ------------------------------------------------------------------------------------------ gold actions
def gold_actions(raw: dict[str, Any]) -> list[dict[str, Any]]:
    """tau2's gold actions in tau2's order, each with its requestor ("assistant" or "user")."""
    crit = raw.get("evaluation_criteria") or {}
    return [
        {"name": a["name"], "arguments": copy.deepcopy(a.get("arguments") or {}), "requestor": a.get("requestor") or "assistant"}
        for a in crit.get("actions") or []
    ]


def render(action: dict[str, Any]) -> str:
    """A user action as the agent names it: `set_network_mode_preference(mode="4g_5g_preferred")`."""
    args = ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(action["arguments"].items()))
    return f"{action['name']}({args})"


def ask(run: list[dict[str, Any]]) -> str:
    """The agent's request that the customer perform a run of user actions."""
    return ASK.format(actions="; ".join(render(a) for a in run))


def reference_plan(raw: dict[str, Any]) -> list[PlanStep]:
    """A first message, then the gold actions in tau2's order: the agent's as tool calls, each run of the
    user's as one request in plain text (`ask`); the communicate info, the transfer and the policy's
    transfer message as in the other domains' plan; then `finish` (dropped under tau2's protocol)."""
    actions = gold_actions(raw)
    info = [str(i) for i in (raw.get("evaluation_criteria") or {}).get("communicate_info") or []]
    cut = next((i for i, a in enumerate(actions) if a["name"] == TRANSFER_TOOL and a["requestor"] == "assistant"), len(actions))
    steps = [PlanStep("message_user", {"message": FIRST_MESSAGE})]

    def add(part: list[dict[str, Any]]) -> None:
        for requestor, group in itertools.groupby(part, key=lambda a: a["requestor"]):
            run = list(group)
            if requestor == "user":
                steps.append(PlanStep("message_user", {"message": ask(run)}))
            else:
                steps.extend(PlanStep(a["name"], a["arguments"]) for a in run)

    add(actions[:cut])
    if info:
        steps.append(PlanStep("message_user", {"message": f"Here is what you asked for: {'; '.join(info)}. Did I get everything?"}))
    if cut < len(actions):
        add(actions[cut:])
        steps.append(PlanStep("message_user", {"message": TRANSFER_MESSAGE}))
    steps.append(PlanStep("finish", {"summary": "resolved the customer's request"}))
    return steps


# ------------------------------------------------------------------------------------------ customers
class ReferenceUser:
    """The gold user side, replayed: for parity tests and the reference solver only, never a customer of an
    eval. Like the reference solver, it reads the task's gold actions (a real customer would not): it
    performs the gold user actions, in tau2's order, when the agent's text names them (`render`), one tool
    call per message (`batch=False`) or all the named ones in one message (`batch=True`), then says so;
    it answers a closing question with `###STOP###` (after a transfer: `###TRANSFER###`) once no gold user
    action is left, and anything else with a neutral line."""

    kind = "reference"
    model = None

    def __init__(self, task: Any, batch: bool = False):
        self.t = tau2()
        self.pending = [a for a in gold_actions(task.model_dump()) if a["requestor"] == "user"]
        self.batch = batch
        self.queue: list[dict[str, Any]] = []
        self.cost_usd = 0.0
        self.replies = 0
        self._ids = itertools.count()
        instructions = getattr(task.user_scenario, "instructions", None)
        self.reason = str(getattr(instructions, "reason_for_call", "") or "").strip()

    def _calls(self, actions: list[dict[str, Any]]) -> Any:
        M = self.t.message
        calls = [M.ToolCall(id=f"user_{next(self._ids)}", name=a["name"], arguments=copy.deepcopy(a["arguments"]),
                            requestor="user") for a in actions]
        return M.UserMessage(role="user", content=None, tool_calls=calls)

    def reply_message(self, message: Any) -> Any:
        """The customer's tau2 `UserMessage` answering an agent message or the results of its own calls."""
        M = self.t.message
        self.replies += 1
        if self.replies > MAX_REFERENCE_REPLIES:
            return M.UserMessage(role="user", content=f"I have to go now. {STOP}")
        if isinstance(message, M.AssistantMessage):
            text = message.content or ""
            asked = Counter({r: text.count(r) for r in {render(a) for a in self.pending}})
            while self.pending and asked[render(self.pending[0])] > 0:
                asked[render(self.pending[0])] -= 1
                self.queue.append(self.pending.pop(0))
            if self.queue:
                return self._next_calls()
            if message.content == GREETING:
                return M.UserMessage(role="user", content=f"Hi, I need help with my phone. {self.reason}".strip())
            if not self.pending and "TRANSFERRED" in text:
                return M.UserMessage(role="user", content=TRANSFER)
            if not self.pending and "anything else" in text.lower():
                return M.UserMessage(role="user", content=f"No, that's all. Thank you! {STOP}")
            return M.UserMessage(role="user", content="Okay.")
        if self.queue:  # the results of the previous call: the next named action
            return self._next_calls()
        return M.UserMessage(role="user", content="Done, I did that on my phone.")

    def _next_calls(self) -> Any:
        take = len(self.queue) if self.batch else 1
        actions, self.queue = self.queue[:take], self.queue[take:]
        return self._calls(actions)


# ------------------------------------------------------------------------------------------ the env
class Tau2TelecomEnv(Tau2Env):
    """One telecom conversation: `Tau2Env` with the task's initial state applied and the customer's tool loop.

    `customer`: a factory `(task, seed) -> user` set by the caller before the conversation opens (the
    reference solver and parity tests set `ReferenceUser`); None: the user `COEVOLVE_TAU2_USER_MODEL` picks.
    """

    def __init__(self, instance: TaskInstance, domain: str, task_id: str, customer: Callable[[Any, int], Any] | None = None):
        self.customer = customer
        super().__init__(instance, domain, task_id)

    def apply_initial_state(self) -> None:
        """tau2's `Orchestrator.initialize`: `set_state` with the task's initialization data and actions, then
        `sync_tools`."""
        init = self.task.initial_state
        if init is not None and init.message_history:
            raise NotImplementedError(f"tau2 {self.domain} task {self.task_id} starts from a message history; not supported")
        with paused_gc():
            if init is not None:
                self.env.set_state(
                    initialization_data=init.initialization_data,
                    initialization_actions=init.initialization_actions,
                    message_history=[],
                )
            self.env.sync_tools()

    def user_tool_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.env.get_user_tools())

    # ------------------------------------------------------------------ the conversation's start
    def open_conversation(self, seed: int = 0, channel: bool = True, call: CustomerCall | None = None) -> str:
        """As `Tau2Env.open_conversation`, with the telecom customer (its tools when it is tau2's LLM user);
        a first message with tool calls runs the customer's tool loop before the agent hears it."""
        if self.protocol is not None:
            raise RuntimeError("the conversation is already open")
        self.protocol = "tau2" if channel else "tool"
        self.seed = seed
        model, args = user_model()
        if self.customer is not None:
            self.user = self.customer(self.task, seed)
        elif model:
            self.user = SimulatedUser(self.task, model, dict(args), seed=seed, tools=self.env.get_user_tools(), call=call)
            if channel:
                self.blocking_user = True
            else:
                self.blocking_tools = frozenset({"message_user"})
        else:
            self.user = ScriptedUser(scenario(raw_tasks(self.domain)[self.task_id]), seed)
        log_once("tau2 telecom customer", user=self.user.kind, model=model,
                 note=None if model or self.user.kind != "scripted" else
                 "offline scripted user without device tools: set COEVOLVE_TAU2_USER_MODEL for tau2's LLM user")
        M = self.t.message
        greeting = M.AssistantMessage(role="assistant", content=GREETING)
        self.messages = [greeting]
        if isinstance(self.user, ScriptedUser):
            first = M.UserMessage(role="user", content=self.user.opening())
        else:
            first = self._reply(greeting)
        if first is None:  # the user could not be reached, or a limit ended its tool loop
            return ""
        self.messages.append(first)
        self.steps += 1
        self.opening = first.content or ""
        if is_stop(self.opening):
            self._end(self.t.simulation.TerminationReason.USER_STOP)
        return self.opening

    # ------------------------------------------------------------------ the customer's tool loop
    def _reply(self, said: Any) -> Any:
        """The customer's message to the agent answering `said`, after the customer's own tool calls (each
        call message and each batch of results recorded and counted as tau2's steps); None when the
        customer cannot be reached or a limit ends the conversation first."""
        msg = super()._reply(said)
        M = self.t.message
        while msg is not None and msg.is_tool_call():
            self.messages.append(msg)
            self.steps += 1  # to the environment: tau2 checks no limit here
            results = []
            for call in msg.tool_calls:
                result = self.env.get_response(call)
                self.errors += bool(result.error)
                results.append(result)
            self.messages.extend(results)
            self.steps += 1
            self.env.sync_tools()  # tau2's orchestrator syncs after every step
            if self.protocol == "tau2" and self._limits():
                return None
            back = results[0] if len(results) == 1 else M.MultiToolMessage(role="tool", tool_messages=results)
            msg = super()._reply(back)
        return msg


# ------------------------------------------------------------------------------------------ the family
class Tau2TelecomFamily(Tau2Family):
    name = "tau2-telecom"
    title = "tau2-bench telecom customer service"
    domain = "telecom"

    def make_env(self, instance: TaskInstance) -> TaskEnv:
        return Tau2TelecomEnv(instance, self.domain, self.task_id(instance))

    def plan(self, instance: TaskInstance, knowledge: Knowledge) -> list[PlanStep]:
        return reference_plan(self.world(0, instance.params))

    def reference_env(self, instance: TaskInstance) -> Tau2TelecomEnv:
        """The reference solver's conversation: `ReferenceUser` performs the gold user actions when the
        plan asks for them (a replay, not the CI customer)."""
        return Tau2TelecomEnv(instance, self.domain, self.task_id(instance), customer=lambda task, seed: ReferenceUser(task))

    def answer_key(self, instance: TaskInstance) -> dict[str, Any]:
        """tau2's gold actions, with their requestors, and required information (analysis code only)."""
        raw = self.world(0, instance.params)
        return {
            "tau2_task": self.task_id(instance),
            "gold_actions": gold_actions(raw),
            "communicate_info": list((raw.get("evaluation_criteria") or {}).get("communicate_info") or []),
            "env_assertions": list((raw.get("evaluation_criteria") or {}).get("env_assertions") or []),
        }
