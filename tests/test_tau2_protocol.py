"""tau2's conversation protocol through the project's executor (issue 19): the agent's plain text goes to
the customer, text sent with tool calls is recorded with them, only the customer or tau2's limits end the
conversation, and for every airline and retail task a scripted conversation gets the same reward through
the executor as through tau2's own `Orchestrator` (the same scripted agent, as a fake ModelClient on one
side and a tau2 `BaseAgent` on the other, and the same scripted user, as a tau2 `BaseUser`).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from coevolve.tasks.tau2.data import available
from tests.tau2_script import ScriptClient, step_of

pytestmark = pytest.mark.skipif(not available(), reason="tau2-bench is not installed (pip install -e '.[tau2]')")


@pytest.fixture(autouse=True)
def scripted_user(monkeypatch: Any) -> None:
    monkeypatch.delenv("COEVOLVE_TAU2_USER_MODEL", raising=False)
    monkeypatch.delenv("COEVOLVE_TAU2_USER_ARGS", raising=False)


# ------------------------------------------------------------------------------------ the scripted agent
def script(raw: dict[str, Any], mixed: bool) -> list[tuple[str | None, dict[str, Any] | None]]:
    """The gold conversation as agent messages (text, call): a first question, the gold calls, the
    communicate info as plain text (or, `mixed`, as the text of the last gold call before a transfer), the
    transfer and the policy's transfer message. After the script the agent asks a closing question."""
    from coevolve.tasks.tau2.env import TRANSFER_TOOL
    from coevolve.tasks.tau2.plan import FIRST_MESSAGE, TRANSFER_MESSAGE, gold_actions

    actions = gold_actions(raw)
    info = [str(i) for i in (raw.get("evaluation_criteria") or {}).get("communicate_info") or []]
    cut = next((i for i, a in enumerate(actions) if a["name"] == TRANSFER_TOOL), len(actions))
    out: list[tuple[str | None, dict[str, Any] | None]] = [(FIRST_MESSAGE, None)]
    out += [(None, a) for a in actions[:cut]]
    said = f"Here is what you asked for: {'; '.join(info)}." if info else None
    if said and mixed and cut:
        out[-1] = (said, out[-1][1])
    elif said:
        out.append((said, None))
    if cut < len(actions):
        out += [(None, a) for a in actions[cut:]] + [(TRANSFER_MESSAGE, None)]
    return out




def run_executor(inst: Any, client: Any, harness: Any = None) -> Any:
    from coevolve.agents.executor import Executor
    from coevolve.llm.contract import RetryPolicy
    from coevolve.tasks import get_family

    fam = get_family(inst.family)
    envs: list[Any] = []
    make_env = fam.make_env
    fam.make_env = lambda i: envs.append(make_env(i)) or envs[-1]  # type: ignore[method-assign]
    try:
        traj = asyncio.run(Executor(client, RetryPolicy(attempts=1), tool_threads=0).rollout(
            inst, harness or fam.baseline_harness(), "script/agent", seed=0
        ))
    finally:
        del fam.make_env
    return traj, envs[-1]


def tau2_reward(env: Any) -> float:
    from coevolve.tasks.tau2.data import tau2

    t = tau2()
    return t.evaluator.evaluate_simulation(
        env.simulation_run(), env.task, t.evaluator.EvaluationType.ALL, solo_mode=False, domain=env.domain
    ).reward


# ------------------------------------------------------------------------------------ the cases of the issue
class Insisting:
    """A customer who keeps insisting and never leaves (what tau2's LLM user does on airline task 26)."""

    kind, cost_usd = "scripted", 0.0

    def opening(self) -> str:
        return "Hi! I want to cancel my flights from MCO to CLT and get a refund."

    def reply(self, agent_text: str, transferred: bool = False) -> str:
        return "I insist: cancel it and refund me."


def test_refusal_then_insistence_runs_to_taus_step_limit_and_scores_zero(monkeypatch: Any) -> None:
    from coevolve.tasks import get_family
    from coevolve.tasks.tau2 import env as env_mod

    monkeypatch.setattr(env_mod, "_scripted_user", lambda sc, seed: Insisting())
    monkeypatch.setattr(env_mod, "ScriptedUser", Insisting)
    fam = get_family("tau2-airline")
    inst = fam.instance("tau2-airline/test/10")  # tau2 task 26: the database must not change
    refusal = "I'm sorry, this reservation cannot be refunded under our policy. ###STOP###"
    traj, env = run_executor(inst, ScriptClient([(refusal, None)] * 200))
    # the agent's ###STOP### ends nothing (tau2's LLMAgent.is_stop is False); only tau2's 200 steps do
    assert env.termination.value == "max_steps" and env.steps == env_mod.MAX_STEPS
    assert len(traj.turns) == 100 and all("to_user" in t.events for t in traj.turns)
    assert not any("no_tool_call" in t.events for t in traj.turns)
    assert traj.outcome.detail["tau2"]["reward"] == 0.0 == tau2_reward(env) and not traj.passed
    assert traj.outcome.detail["tau2"]["answered_customer"] and traj.outcome.detail["tau2"]["protocol"] == "tau2"
    # the same refusal under the tool protocol was passed: the agent's finish ended it
    refuse_then_finish = ScriptClient([(None, {"name": "message_user", "arguments": {"message": refusal}}),
                                       (None, {"name": "finish", "arguments": {}})])
    traj, env = run_executor(inst, refuse_then_finish, fam.tool_harness())
    assert env.termination.value == "agent_stop" and traj.passed and traj.outcome.detail["tau2"]["protocol"] == "tool"


def test_a_plain_text_answer_reaches_the_customer_and_scores_as_tau2() -> None:
    from coevolve.tasks import get_family

    fam = get_family("tau2-airline")
    inst = fam.instance("tau2-airline/val/1")  # tau2 task 3: look up, then tell the customer "4"
    raw = fam.world(0, inst.params)
    traj, env = run_executor(inst, ScriptClient(script(raw, mixed=False)))
    said = [m for m in traj.messages if m["role"] == "assistant" and not m.get("tool_calls")]
    assert any("4" in (m["content"] or "") for m in said)
    # every plain-text turn got the customer's reply as a user message, never the nudge
    for i, m in enumerate(traj.messages[2:], 2):
        if m["role"] == "assistant" and not m.get("tool_calls"):
            assert traj.messages[i + 1]["role"] == "user" and "No tool was called" not in traj.messages[i + 1]["content"]
    assert traj.outcome.detail["tau2"]["reward"] == tau2_reward(env) == 1.0 and traj.passed


def test_text_sent_with_a_tool_call_counts_toward_communication() -> None:
    from coevolve.tasks import get_family

    fam = get_family("tau2-retail")
    inst = fam.instance("tau2-retail/test/12")  # tau2 task 40: change a payment, tell balance and card
    raw = fam.world(0, inst.params)
    steps = script(raw, mixed=True)
    assert any(text and call for text, call in steps)
    traj, env = run_executor(inst, ScriptClient(steps))
    mixed = [m for m in env.messages if getattr(m, "tool_calls", None) and m.has_text_content()]
    assert len(mixed) == 1 and "asked for" in mixed[0].content
    assert traj.outcome.detail["tau2"]["reward"] == tau2_reward(env) == 1.0
    # without that text nothing else communicates the info: the reward falls to 0, as in tau2
    bare = [(None if (t and c) else t, c) for t, c in steps]
    traj, env = run_executor(inst, ScriptClient(bare))
    assert traj.outcome.detail["tau2"]["reward"] == tau2_reward(env) == 0.0
    assert "communicated_required_info" in {r["id"] for r in traj.outcome.detail["requirements"] if not r["passed"]}


def test_every_failed_call_counts_toward_taus_error_limit() -> None:
    from coevolve.tasks import get_family
    from coevolve.tasks.tau2.env import MAX_ERRORS

    fam = get_family("tau2-retail")
    inst = fam.instance("tau2-retail/test/0")

    class Broken:
        async def acomplete(self, model: str, messages: list[dict[str, Any]], tools: Any, *, seed: int) -> Any:
            from coevolve.llm.contract import Completion

            k = sum(1 for m in messages if m.get("role") == "assistant")
            bad = [("no_such_tool", "{}"), ("get_order_details", "{not json"), ("get_order_details", "[1]"),
                   ("get_order_details", '{"order_id": "#nope"}')][k % 4]
            call = {"id": f"c{k}", "type": "function", "function": {"name": bad[0], "arguments": bad[1]}}
            return Completion({"role": "assistant", "content": None, "tool_calls": [call]}, 0, 0)

    traj, env = run_executor(inst, Broken())
    assert env.termination.value == "too_many_errors" and env.errors == MAX_ERRORS and len(traj.turns) == MAX_ERRORS
    assert traj.outcome.detail["tau2"]["reward"] == 0.0 == tau2_reward(env)
    # as tau2's orchestrator: the unknown name with object arguments is in the transcript with tau2's own
    # error result; unparseable or non-object arguments never reach it
    recorded = [c.name for m in env.messages if getattr(m, "role", "") == "assistant" for c in (m.tool_calls or [])]
    assert recorded.count("no_such_tool") == 3 and recorded.count("get_order_details") == 2  # calls 0, 4, 8 and 3, 7
    errors = [m for m in env.messages if getattr(m, "role", "") == "tool" and m.error]
    assert len(errors) == 5 and "not found" in errors[0].content


def test_an_unknown_tool_call_is_recorded_and_scored_as_taus_orchestrator_does() -> None:
    """A call of a name the agent does not have, in the middle of a passing script: both sides keep it in
    the transcript with tau2's error, count it, and give the same reward."""
    from coevolve.tasks import get_family
    from coevolve.tasks.tau2 import data

    fam = get_family("tau2-retail")
    inst = fam.instance("tau2-retail/test/0")
    task_id = fam.task_id(inst)
    steps = script(fam.world(0, inst.params), mixed=False)
    steps.insert(1, (None, {"name": "no_such_tool", "arguments": {"x": 1}}))
    traj, env = run_executor(inst, ScriptClient(steps))
    assert env.errors == 1
    assert any(c.name == "no_such_tool" for m in env.messages if getattr(m, "role", "") == "assistant"
               for c in (m.tool_calls or []))
    ours = traj.outcome.detail["tau2"]["reward"]
    assert ours == tau2_side("retail", task_id, steps, 0) == tau2_reward(env)
    assert data.splits("retail")["test"][0] == task_id


# ------------------------------------------------------------------------------------ parity with tau2
def tau2_side(domain: str, task_id: str, steps: list[Any], seed: int) -> float:
    """The scripted conversation driven by tau2's own Orchestrator, scored by evaluate_simulation."""
    from tau2.agent.base import BaseAgent
    from tau2.data_model.message import AssistantMessage, ToolCall, UserMessage
    from tau2.orchestrator.orchestrator import Orchestrator
    from tau2.user.base import BaseUser
    from tau2.user.user_simulator import UserSimulator

    from coevolve.tasks.tau2.data import new_environment, raw_tasks, scenario, task_model, tau2
    from coevolve.tasks.tau2.env import MAX_ERRORS, MAX_STEPS, TRANSFER_TOOL, _opening, _scripted_user

    t = tau2()
    task = task_model(domain, task_id)

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

    sc = scenario(raw_tasks(domain)[task_id])
    scripted = _scripted_user(sc, seed)
    orch: list[Any] = []

    class User(BaseUser):
        def get_init_state(self, message_history: Any = None) -> Any:
            return {"opened": False}

        def generate_next_message(self, message: Any, state: Any) -> Any:
            if not state["opened"]:
                state["opened"] = True
                return UserMessage(role="user", content=_opening(scripted, sc)), state
            transferred = any(getattr(m, "tool_calls", None) and any(c.name == TRANSFER_TOOL for c in m.tool_calls)
                              for m in orch[0].trajectory)
            return UserMessage(role="user", content=scripted.reply(message.content or "", transferred=transferred)), state

        @classmethod
        def is_stop(cls, message: Any) -> bool:
            return UserSimulator.is_stop(message)

        def set_seed(self, seed: int) -> None:
            pass

    o = Orchestrator(domain, Agent(), User(), new_environment(domain), task, max_steps=MAX_STEPS,
                     max_errors=MAX_ERRORS, seed=seed)
    orch.append(o)
    run = o.run()
    return t.evaluator.evaluate_simulation(run, task, t.evaluator.EvaluationType.ALL, solo_mode=False, domain=domain).reward


def test_the_limits_are_taus_defaults() -> None:
    from tau2 import config

    from coevolve.tasks.tau2.env import MAX_ERRORS, MAX_STEPS

    assert (MAX_STEPS, MAX_ERRORS) == (config.DEFAULT_MAX_STEPS, config.DEFAULT_MAX_ERRORS)


SAMPLE_STRIDE = 8  # make test: every 8th task of tasks.json (7 airline, 15 retail); make test-slow: all 164


@pytest.mark.parametrize(
    ("domain", "stride"),
    [("airline", SAMPLE_STRIDE), ("retail", SAMPLE_STRIDE),
     pytest.param("airline", 1, marks=pytest.mark.slow), pytest.param("retail", 1, marks=pytest.mark.slow)],
    ids=["airline-sample", "retail-sample", "airline-every-task", "retail-every-task"],
)
def test_tasks_get_the_same_reward_through_the_executor_and_taus_orchestrator(domain: str, stride: int) -> None:
    """The same scripted agent and customer through the project's executor and through tau2's own
    Orchestrator get the same reward, on every task (slow: ~3.5 min) or a fixed sample of them."""
    from coevolve.tasks import get_family
    from coevolve.tasks.tau2 import data

    fam = get_family(f"tau2-{domain}")
    ids = data.splits(domain)
    where = {tid: (split, i) for split in ("train", "val", "test") for i, tid in enumerate(ids[split])}
    rewards = []
    tasks = list(data.raw_tasks(domain))
    for n, task_id in enumerate(tasks):
        if n % stride:
            continue
        split, i = where[task_id]
        inst = fam.instance_at(split, i)
        raw = fam.world(0, inst.params)
        steps = script(raw, mixed=n % 2 == 1)
        calls = [k for k, (_, call) in enumerate(steps) if call]
        if n % 3 == 2 and calls:  # a third of the scripts leave out their last gold call: both sides must fail them alike
            del steps[calls[-1]]
        traj, env = run_executor(inst, ScriptClient(steps))
        ours = traj.outcome.detail["tau2"]["reward"]
        theirs = tau2_side(domain, task_id, steps, 0)
        assert ours == theirs == tau2_reward(env), (inst.id, ours, theirs, traj.outcome.detail["tau2"]["termination"])
        assert traj.passed == (ours == 1.0)
        rewards.append(ours)
    assert len(rewards) == len(range(0, len(tasks), stride))
    assert 0 < sum(r == 1.0 for r in rewards) < len(rewards)  # the scripts pass some tasks and fail others
    print(domain, "tasks", len(rewards), "reward 1:", sum(r == 1.0 for r in rewards))
