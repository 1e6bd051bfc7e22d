"""The testbed's counterfactual answer key, computed lazily by analysis and cached in the store
(`coevolve.testbed.counterfactual`): the same deviations and decisive turns as the inline computation rollouts
used to do, computed once per trajectory, only what is missing, never cached when a model failed."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from coevolve.agents.context import apply_policy
from coevolve.agents.executor import Executor, Resume, assistant_positions, openai_tool, same_calls
from coevolve.llm.contract import ModelUnavailable
from coevolve.services.gateway import Gateway
from coevolve.store.store import HarnessStore
from coevolve.tasks import get_family
from coevolve.testbed.counterfactual import (
    COUNTERFACTUAL_VERSION,
    acounterfactuals,
    needs_counterfactual,
    with_counterfactuals,
)
from tests.rollouts import rollout_all

FAMILIES = ("iot", "payroll")


async def inline_reference(traj, harness, gateway):
    """What `Executor.rollout` computed inline for a failed testbed rollout before the counterfactual
    moved to analysis (its `_counterfactual`, written out again here): per turn with an oracle, the
    oracle's answer for what the model saw; a deviation where its calls differ; the decisive turn the
    first deviation whose forced replay passes."""
    env = get_family(traj.instance.family).make_env(traj.instance)
    available = {t.impl for t in env.tool_specs()}
    tools = [openai_tool(t) for t in harness.tools if t.impl in available]
    deviations, decisive = [], None
    records = traj.ground_truth["turns"]
    for t, pos in enumerate(assistant_positions(traj.messages)):
        info = records[t] if t < len(records) else None
        if not info or not info.get("oracle"):
            continue
        visible, _ = apply_policy(list(traj.messages[:pos]), harness.context)
        right = await gateway.acomplete(info["oracle"], visible, tools, seed=traj.seed)
        if same_calls(right.message, traj.messages[pos]):
            continue
        deviations.append({"turn": t, "category": (info.get("cause") or {}).get("category", "other")})
        if decisive is None:
            replay = await Executor(gateway).rollout(traj.instance, harness, traj.model, traj.seed,
                                                     resume=Resume(traj, t, right.message))
            if replay.passed:
                decisive = t
    return {"deviations": deviations, "decisive_turn": decisive}


class CountingExecutor(Executor):
    """The real executor, counting the counterfactuals it computes."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.computed: list[str] = []

    async def counterfactual(self, traj, harness):
        self.computed.append(traj.id)
        return await super().counterfactual(traj, harness)


@pytest.fixture(scope="module")
def failures():
    """A few failed synthetic/weak rollouts per family (val split, two seeds), with their harness."""
    out = {}
    for name in FAMILIES:
        fam = get_family(name)
        h = fam.baseline_harness()
        trajs = [t for s in (0, 1) for t in rollout_all(fam.generate("val", 8), h, "synthetic/weak", seed=s)]
        failed = [t for t in trajs if needs_counterfactual(t)]
        assert len(failed) >= 4, name
        out[name] = (h, failed[:6])
    return out


def test_the_lazy_counterfactual_equals_the_old_inline_computation(failures):
    gateway = Gateway()
    decisive_found = 0
    for name, (h, failed) in failures.items():
        lazy = with_counterfactuals(failed, h, client=Gateway())
        for before, after in zip(failed, lazy, strict=True):
            expected = asyncio.run(inline_reference(before, h, gateway))
            got = {k: after.ground_truth[k] for k in ("deviations", "decisive_turn")}
            assert got == expected, (name, before.instance.id, before.seed)
            assert "counterfactual_error" not in after.ground_truth
            decisive_found += expected["decisive_turn"] is not None
            assert expected["deviations"]  # every failure deviates somewhere
            assert after.ground_truth["turns"] == before.ground_truth["turns"]  # the rest is kept
    assert decisive_found >= 4  # the comparison covers real decisive turns, not just Nones


def test_the_cache_survives_reopening_and_only_the_missing_are_computed(failures, tmp_path):
    h, failed = failures["iot"]
    first, rest = failed[:3], failed[3:]
    store = HarnessStore(tmp_path / "s")
    ex = CountingExecutor(Gateway())
    done = with_counterfactuals(first, h, store=store, executor=ex)
    assert sorted(ex.computed) == sorted(t.id for t in first)
    store.close()

    again = HarnessStore(tmp_path / "s", create=False)
    ex2 = CountingExecutor(Gateway())
    both = with_counterfactuals(first + rest, h, store=again, executor=ex2)
    assert sorted(ex2.computed) == sorted(t.id for t in rest)  # the cached three are not computed again
    assert [t.ground_truth for t in both[:3]] == [t.ground_truth for t in done]
    cached = again.get_counterfactuals([(t.id, h.id) for t in first + rest])
    assert len(cached) == len(first + rest)
    assert all(v["version"] == COUNTERFACTUAL_VERSION for v in cached.values())

    ex3 = CountingExecutor(Gateway())
    assert with_counterfactuals(first + rest, h, store=again, executor=ex3) == both and ex3.computed == []


def test_a_cached_value_of_another_version_is_recomputed(failures, tmp_path):
    h, failed = failures["iot"]
    store = HarnessStore(tmp_path / "s")
    t = failed[0]
    stale = {"version": COUNTERFACTUAL_VERSION - 1, "deviations": [], "decisive_turn": 99}
    store.put_counterfactuals({(t.id, h.id): stale})
    ex = CountingExecutor(Gateway())
    [got] = with_counterfactuals([t], h, store=store, executor=ex)
    assert ex.computed == [t.id] and got.ground_truth["decisive_turn"] != 99


def test_passes_and_trajectories_that_carry_their_counterfactual_cost_nothing(failures, tmp_path):
    fam = get_family("iot")
    h = fam.baseline_harness()
    passed = [t for t in rollout_all(fam.generate("val", 8), h, "synthetic/weak") if t.passed]
    _, failed = failures["iot"]
    inline = {"deviations": [{"turn": 0, "category": "other"}], "decisive_turn": 0}  # as older code stored
    old = replace(failed[0], ground_truth={**failed[0].ground_truth, **inline})
    ex = CountingExecutor(Gateway())
    out = with_counterfactuals([*passed, old], h, store=HarnessStore(tmp_path / "s"), executor=ex)
    assert ex.computed == [] and out == [*passed, old]


class DownOracle:
    """The gateway, except that the oracle models stay unavailable."""

    def __init__(self, oracles):
        self.gateway = Gateway()
        self.oracles = oracles

    async def acomplete(self, model, messages, tools, *, seed):
        if model in self.oracles:
            raise ModelUnavailable("oracle down")
        return await self.gateway.acomplete(model, messages, tools, seed=seed)


def test_a_counterfactual_lost_to_a_model_error_is_returned_but_not_cached(failures, tmp_path):
    h, failed = failures["iot"]
    oracles = {r["oracle"] for r in failed[0].ground_truth["turns"] if r and r.get("oracle")}
    assert oracles and failed[0].model not in oracles
    store = HarnessStore(tmp_path / "s")
    [got] = with_counterfactuals(failed[:1], h, store=store, client=DownOracle(oracles))
    assert "oracle down" in got.ground_truth["counterfactual_error"]
    assert got.ground_truth["decisive_turn"] is None
    assert store.get_counterfactuals([(failed[0].id, h.id)]) == {}  # the next reader tries again
    [again] = with_counterfactuals(failed[:1], h, store=store, client=Gateway())
    assert "counterfactual_error" not in again.ground_truth


def test_a_trajectory_of_another_harness_is_refused(failures):
    h, failed = failures["iot"]
    other = get_family("payroll").baseline_harness()
    with pytest.raises(ValueError, match="harness"):
        asyncio.run(acounterfactuals(failed[:1], {h.id: other}, Executor(Gateway())))
