"""The rollout loop: determinism, error observations, infra retries, hooks, context policies."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from agents.context import apply_policy
from agents.executor import Executor, RetryPolicy
from harness_store.codec import encode
from harness_store.edits import apply_edit
from harness_store.values import AddHook, ContextPolicy, HarnessEdit, HookSpec, SetContextPolicy, SetMaxTurns
from services.gateway import Gateway
from tasks import get_family
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
    c = rollout_all(insts, h, "synthetic/weak", seed=8)
    assert [t.messages for t in a] != [t.messages for t in c]  # the seed matters


def test_transient_model_errors_are_retried():
    client = Flaky(fail=2)
    traj = run(Executor(client, FAST_RETRY), FAM.generate("val", 1)[0], FAM.baseline_harness(), "synthetic/expert")
    assert traj.error == "none" and traj.passed
    assert client.calls >= 3


def test_persistent_model_errors_make_an_infra_trajectory_not_a_failure():
    from agents.report import summarise

    client = Flaky(fail=10**6)
    traj = run(Executor(client, FAST_RETRY), FAM.generate("val", 1)[0], FAM.baseline_harness(), "synthetic/expert")
    assert traj.error == "infra" and traj.outcome is None
    assert client.calls == FAST_RETRY.attempts
    ok = rollout_all(FAM.generate("val", 3), FAM.baseline_harness(), "synthetic/expert")
    s = summarise([traj, *ok])
    assert s.errors == {"infra": 1} and s.pass_rate == 1.0  # infra is never counted as a task failure


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


def test_finish_checklist_holds_the_first_finish_and_weak_then_heeds_the_constraint():
    inst = next(i for i in FAM.generate("val") if "peak" in FAM.world(i.seed, i.params).traps)
    base = FAM.baseline_harness()
    hooked = apply_edit(base, HarnessEdit((AddHook(HookSpec("on_finish", "finish_checklist")),)))
    plain = run(Executor(Gateway()), inst, base, "synthetic/expert")
    assert plain.passed
    before = rollout_all([inst], base, "synthetic/weak", seed=1)[0]
    after = rollout_all([inst], hooked, "synthetic/weak", seed=1)[0]

    def uploads(t):
        return [c["arguments"] for turn in t.turns for c in turn.tool_calls if c["name"] == "upload_report"]

    assert all("peak" not in u for u in uploads(before))  # the weak skipped the constraint
    assert any("hook:finish_checklist" in e for t in after.turns for e in t.events)
    assert len(uploads(after)) >= 2 and "peak" in uploads(after)[-1]  # and redid the upload


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
    assert any(c["category"] == "long-context" for t in trajs for c in t.causes)
    expert = rollout_all(insts, FAM.baseline_harness(), "synthetic/expert")
    assert all(t.passed for t in expert)
    h = apply_edit(
        FAM.baseline_harness(),
        HarnessEdit((SetContextPolicy(ContextPolicy("truncate-middle", token_budget=600, keep_last=1)),)),
    )
    squeezed = rollout_all(insts, h, "synthetic/expert")
    assert any("context:elided" in e for t in squeezed for turn in t.turns for e in turn.events)
