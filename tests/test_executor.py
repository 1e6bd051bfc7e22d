"""The rollout loop: determinism, error observations, infra retries, hooks, context policies."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from coevolve.agents.context import apply_policy
from coevolve.agents.executor import Executor
from coevolve.analysis.summary import recorded_causes
from coevolve.codec import encode
from coevolve.edits import apply_edit
from coevolve.llm.contract import RetryPolicy
from coevolve.services.gateway import Gateway
from coevolve.tasks import get_family
from coevolve.values import AddHook, ContextPolicy, HarnessEdit, HookSpec, SetContextPolicy, SetMaxTurns
from tests.rollouts import rollout_all

FAM = get_family("iot")
FAST_RETRY = RetryPolicy(attempts=3, backoff_s=0.01, backoff_max_s=0.02)


def run(executor, inst, harness, model="synthetic/weak", seed=0):
    return asyncio.run(executor.rollout(inst, harness, model, seed))


class Flaky:
    """Wraps the real gateway and injects transport failures into its first `fail` calls."""

    def __init__(self, fail: int, rewrite=None):
        self.gateway = Gateway()
        self.fail = fail
        self.calls = 0
        self.rewrite = rewrite

    async def acomplete(self, model, messages, tools, *, seed):
        self.calls += 1
        if self.calls <= self.fail:
            raise ConnectionError("injected transport failure")
        comp = await self.gateway.acomplete(model, messages, tools, seed=seed)
        return self.rewrite(comp, self.calls) if self.rewrite else comp


def test_same_seed_same_inputs_identical_trajectories():
    insts = FAM.generate("val", 20)
    h = FAM.baseline_harness()
    a = rollout_all(insts, h, "synthetic/weak", seed=7)
    b = rollout_all(insts, h, "synthetic/weak", seed=7)
    strip = [dataclasses.replace(t, turns=tuple(dataclasses.replace(r, latency_s=0) for r in t.turns)) for t in a]
    strip_b = [dataclasses.replace(t, turns=tuple(dataclasses.replace(r, latency_s=0) for r in t.turns)) for t in b]
    assert [encode(t) for t in strip] == [encode(t) for t in strip_b]
    assert [t.id for t in a] == [t.id for t in b]  # the id names what happened, not how long it took
    c = rollout_all(insts, h, "synthetic/weak", seed=8)
    assert [t.messages for t in a] != [t.messages for t in c]  # the seed matters


def test_transient_model_errors_are_retried():
    client = Flaky(fail=2)
    traj = run(Executor(client, FAST_RETRY), FAM.generate("val", 1)[0], FAM.baseline_harness(), "synthetic/expert")
    assert traj.error == "none" and traj.outcome is not None
    assert client.calls >= 3


def test_persistent_model_errors_make_an_infra_trajectory_not_a_failure():
    from coevolve.analysis.summary import summarise

    client = Flaky(fail=10**6)
    traj = run(Executor(client, FAST_RETRY), FAM.generate("val", 1)[0], FAM.baseline_harness(), "synthetic/expert")
    assert traj.error == "infra" and traj.outcome is None
    assert client.calls == FAST_RETRY.attempts
    ok = rollout_all(FAM.generate("val", 3), FAM.baseline_harness(), "synthetic/expert")
    s = summarise([traj, *ok])
    assert s.errors == {"infra": 1}
    assert s.pass_rate == sum(t.passed for t in ok) / 3  # infra is never counted as a task failure


def _rename_first_call(new_name=None, new_args=None):
    def rewrite(comp, n):
        if n != 1:
            return comp
        call = comp.message["tool_calls"][0]
        fn = dict(call["function"])
        if new_name:
            fn["name"] = new_name
        if new_args is not None:
            fn["arguments"] = new_args
        msg = {**comp.message, "tool_calls": [{**call, "function": fn}, *comp.message["tool_calls"][1:]]}
        return dataclasses.replace(comp, message=msg)

    return rewrite


@pytest.mark.parametrize(
    "rewrite,expect",
    [
        (_rename_first_call(new_name="drop_database"), "unknown tool"),
        (_rename_first_call(new_args="{not json"), "not valid JSON"),
        (_rename_first_call(new_args="[1, 2]"), "must be a JSON object"),
    ],
)
def test_bad_tool_calls_become_error_observations(rewrite, expect):
    client = Flaky(fail=0, rewrite=rewrite)
    traj = run(Executor(client, FAST_RETRY), FAM.generate("val", 1)[0], FAM.baseline_harness(), "synthetic/expert")
    first_result = traj.turns[0].tool_results[0]
    assert expect in first_result and first_result.startswith("error")
    assert traj.error == "none"  # the rollout went on


def test_turn_limit_ends_the_rollout_as_a_task_failure():
    h = apply_edit(FAM.baseline_harness(), HarnessEdit((SetMaxTurns(2),)))
    traj = run(Executor(Gateway()), FAM.generate("val", 1)[0], h, "synthetic/weak")
    assert len(traj.turns) == 2 and traj.error == "task" and not traj.passed


class Scripted:
    """A model client that answers turn n with `calls(n)`: one tool call a turn."""

    def __init__(self, calls):
        self.calls, self.n = calls, 0

    async def acomplete(self, model, messages, tools, *, seed):
        from coevolve.llm.contract import Completion

        self.n += 1
        name, args = self.calls(self.n)
        call = {"id": f"c{self.n}", "type": "function", "function": {"name": name, "arguments": args}}
        return Completion({"role": "assistant", "content": "", "tool_calls": [call]}, 10, 5)


def test_a_rollout_repeating_one_call_ends_at_the_loop_limit_as_a_task_failure():
    from coevolve.agents.executor import LOOP_TURNS
    from coevolve.analysis.summary import summarise

    h = apply_edit(FAM.baseline_harness(), HarnessEdit((SetMaxTurns(12),)))
    inst = FAM.generate("val", 1)[0]
    # the same call, its arguments written differently (key order, spaces) but equal as JSON
    same = Scripted(lambda n: ("sql_query", '{"query": "SELECT 1"}' if n % 2 else '{"query":"SELECT 1"}'))
    traj = run(Executor(same), inst, h)
    assert len(traj.turns) == LOOP_TURNS and same.n == LOOP_TURNS
    assert traj.error == "task" and not traj.passed and traj.loop_ended
    assert traj.error_detail.startswith("loop:") and "sql_query" in traj.error_detail
    assert "loop_ended" in traj.turns[-1].events and all("loop_ended" not in t.events for t in traj.turns[:-1])
    assert summarise([traj]).loop_ended == 1
    # a model that varies its arguments is not looping: it runs to the turn limit
    varied = Scripted(lambda n: ("sql_query", f'{{"query": "SELECT {n % 2}"}}'))
    traj = run(Executor(varied), inst, h)
    assert len(traj.turns) == 12 and not traj.loop_ended and "turn limit" in traj.error_detail
    # two identical calls, then another, then the first again: never three in a row
    broken = Scripted(lambda n: ("read_parameters", "{}") if n % 3 else ("list_objects", "{}"))
    assert not run(Executor(broken), inst, h).loop_ended


def test_the_loop_rule_needs_the_same_result_too():
    from coevolve.agents.executor import looping

    same = ("upload_report", '{"key":"r"}', "ok")
    assert looping([None, same, same, same])
    assert not looping([same, same])
    assert not looping([same, same, ("upload_report", '{"key":"r"}', "ok, replaced")])  # the world answered differently
    assert not looping([None, None, None])  # turns without exactly one call are not a loop


def test_finish_checklist_holds_the_first_finish_and_weak_then_heeds_the_constraint():
    insts = [i for i in FAM.generate("val") if "peak" in FAM.answer_key(i)["traps"]]
    base = FAM.baseline_harness()
    generic = apply_edit(base, HarnessEdit((AddHook(HookSpec("on_finish", "finish_checklist")),)))
    stating = apply_edit(
        base,
        HarnessEdit((AddHook(HookSpec("on_finish", "finish_checklist", {"items": ["Each anomaly entry includes its peak value."]})),)),
    )

    def uploads(t):
        return [c["arguments"] for turn in t.turns for c in turn.tool_calls if c["name"] == "upload_report"]

    def with_peak(h):
        trajs = [t for seed in range(3) for t in rollout_all(insts, h, "synthetic/weak", seed=seed)]
        return trajs, sum("peak" in uploads(t)[-1] for t in trajs if uploads(t)) / len(trajs)

    _, rate_before = with_peak(base)
    _, rate_generic = with_peak(generic)
    after, rate_after = with_peak(stating)
    assert rate_before < 0.5  # the weak mostly skips the constraint
    assert rate_generic < 0.5  # a checklist that does not state it does not help
    assert rate_after > 0.9
    assert all(any("hook:finish_checklist" in e for turn in t.turns for e in turn.events) for t in after)
    assert any(len(uploads(t)) >= 2 and "peak" in uploads(t)[-1] for t in after)  # it redid the upload


def test_context_policies_elide_old_tool_results_only():
    inst = FAM.instance_at("val", 0, size=4)
    traj = run(Executor(Gateway()), inst, FAM.baseline_harness(), "synthetic/expert")
    msgs = list(traj.messages)
    kept, events = apply_policy(msgs, ContextPolicy("keep-all"))
    assert kept == msgs and events == []
    cut, events = apply_policy(msgs, ContextPolicy("truncate-middle", token_budget=1000, keep_last=1))
    assert len(cut) == len(msgs) and events
    assert [m["role"] for m in cut] == [m["role"] for m in msgs]
    assert all(a == b for a, b in zip(cut, msgs) if a["role"] != "tool")
    summ, events = apply_policy(msgs, ContextPolicy("summarise", keep_last=1))
    assert any(m["content"].startswith("[summarised") for m in summ if m["role"] == "tool")


def test_weak_long_context_failure_is_recorded_and_policy_changes_what_it_sees():
    insts = [FAM.instance_at("val", i, size=5) for i in range(6)]
    trajs = rollout_all(insts, FAM.baseline_harness(), "synthetic/weak")
    assert any(c["category"] == "long-context" for t in trajs for c in recorded_causes(t))
    expert = rollout_all(insts, FAM.baseline_harness(), "synthetic/expert")  # re-reads what it cannot see
    assert not any(c["category"] == "long-context" for t in expert for c in recorded_causes(t))
    h = apply_edit(
        FAM.baseline_harness(),
        HarnessEdit((SetContextPolicy(ContextPolicy("truncate-middle", token_budget=600, keep_last=1)),)),
    )
    squeezed = rollout_all(insts, h, "synthetic/expert")
    assert any("context:elided" in e for t in squeezed for turn in t.turns for e in turn.events)


# ------------------------------------------------------------------ resume and the counterfactual answer key
@pytest.fixture(scope="module")
def weak_val():
    return rollout_all(FAM.generate("val", 30), FAM.baseline_harness(), "synthetic/weak")


@pytest.fixture(scope="module")
def weak_val_keyed(weak_val):
    from coevolve.testbed.counterfactual import with_counterfactuals

    return with_counterfactuals(weak_val, FAM.baseline_harness(), client=Gateway())


def test_resume_replays_the_prefix_verbatim_then_forces_one_turn_and_continues(weak_val_keyed):
    from coevolve.agents.executor import Resume, assistant_positions

    traj = next(t for t in weak_val_keyed if not t.passed and t.ground_truth.get("decisive_turn"))
    t = traj.ground_truth["decisive_turn"]
    forced = {"role": "assistant", "content": "Forced.", "tool_calls": [
        {"id": "forced_0", "type": "function", "function": {"name": "list_objects", "arguments": "{}"}}]}
    resumed = asyncio.run(
        Executor(Gateway()).rollout(traj.instance, FAM.baseline_harness(), traj.model, traj.seed, resume=Resume(traj, t, forced))
    )
    pos = assistant_positions(traj.messages)[t]
    assert resumed.messages[:pos] == traj.messages[:pos]  # the prefix is the model's own, unchanged
    assert resumed.messages[pos]["tool_calls"] == forced["tool_calls"]
    assert "forced" in resumed.turns[t].events and all("replayed" in r.events for r in resumed.turns[:t])
    assert len(resumed.turns) > t + 1  # the model continued after the forced turn
    assert "decisive_turn" not in resumed.ground_truth  # replays never compute their own answer key


def test_rollouts_record_what_the_counterfactual_needs_and_compute_none_of_it(weak_val):
    failed = [t for t in weak_val if not t.passed]
    passed = [t for t in weak_val if t.passed]
    assert failed and passed
    for t in weak_val:
        assert not {"deviations", "decisive_turn"} & set(t.ground_truth)  # no rollout computes the answer key
    for t in failed:  # per turn: the oracle that knows the right action, and the cause where one was recorded
        turns = t.ground_truth["turns"]
        assert len(turns) == len(t.turns) and all(r and r.get("oracle") for r in turns)
        assert recorded_causes(t)
    assert all(not recorded_causes(t) for t in passed)


def test_a_rollout_makes_one_model_call_per_recorded_turn_even_when_it_fails():
    counting = Flaky(fail=0)
    trajs = [run(Executor(counting), i, FAM.baseline_harness()) for i in FAM.generate("val", 12)]
    assert any(not t.passed for t in trajs)  # failures are where the counterfactual used to add calls
    assert counting.calls == sum(len(t.turns) for t in trajs)


def test_the_lazy_counterfactual_has_deviations_and_a_decisive_turn_that_really_repairs(weak_val_keyed):
    from coevolve.agents.executor import Resume

    failed = [t for t in weak_val_keyed if not t.passed]
    passed = [t for t in weak_val_keyed if t.passed]
    assert all(t.ground_truth["deviations"] for t in failed)
    assert all("deviations" not in t.ground_truth and not recorded_causes(t) for t in passed)
    decisive = [t for t in failed if t.ground_truth["decisive_turn"] is not None]
    assert len(decisive) >= len(failed) // 2
    for traj in decisive[:5]:
        turn = traj.ground_truth["decisive_turn"]
        assert turn in [d["turn"] for d in traj.ground_truth["deviations"]]
        oracle = traj.ground_truth["turns"][turn]["oracle"]
        from coevolve.agents.context import apply_policy
        from coevolve.agents.executor import assistant_positions, openai_tool

        h = FAM.baseline_harness()
        visible, _ = apply_policy(list(traj.messages[: assistant_positions(traj.messages)[turn]]), h.context)
        right = asyncio.run(Gateway().acomplete(oracle, visible, [openai_tool(x) for x in h.tools], seed=traj.seed))
        replay = asyncio.run(Executor(Gateway()).rollout(traj.instance, h, traj.model, traj.seed,
                                                          resume=Resume(traj, turn, right.message)))
        assert replay.passed
