"""Blocking tools run off the executor's event loop: a slow tool in one rollout does not stall the
other rollouts of the same executor; a rollout's calls keep their order and their results; cheap tools
stay inline; `tool_threads=0` is the old inline behaviour."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from coevolve.agents.executor import Executor, resolve_tool_threads
from coevolve.llm.contract import Completion
from coevolve.tasks import get_family
from coevolve.testbed.respond import respond

FAM = get_family("iot")
LATENCY_S = 0.2
SLOW_S = 1.0


class LatencyModel:
    """The synthetic policy behind a simulated model server: every call waits LATENCY_S (asynchronously,
    as a remote server would) and then answers."""

    async def acomplete(self, model, messages, tools, *, seed):
        await asyncio.sleep(LATENCY_S)
        r = respond(model.split("/", 1)[1], messages, tools, seed=seed)
        return Completion(r.message, r.prompt_tokens, r.completion_tokens)


def slow_env_factory(monkeypatch, slow_ids: set[str], seen: list[tuple[str, str, str]] | None = None):
    """`FAM.make_env`, where the envs of `slow_ids` block for SLOW_S (time.sleep, like a subprocess or a
    browser) in their first tool call and declare every tool blocking; every call is recorded with the
    thread it ran on."""
    real = type(FAM).make_env.__get__(FAM)  # the family's own, not an earlier patch

    def make_env(inst):
        env = real(inst)
        call = env.call
        first = [True]

        def recorded(impl, args):
            if seen is not None:
                seen.append((inst.id, impl, threading.current_thread().name))
            if inst.id in slow_ids and first[0]:
                first[0] = False
                time.sleep(SLOW_S)
            return call(impl, args)

        env.call = recorded
        if inst.id in slow_ids:
            env.blocking_tools = frozenset(t.impl for t in env.tool_specs())
        return env

    monkeypatch.setattr(FAM, "make_env", make_env)


def timed_rollouts(executor: Executor, instances, model="synthetic/expert"):
    """Run all rollouts at once on one loop; (trajectories, seconds each took from the common start)."""

    async def main():
        t0 = time.perf_counter()

        async def one(inst):
            traj = await executor.rollout(inst, FAM.baseline_harness(), model, 0)
            return traj, time.perf_counter() - t0

        return await asyncio.gather(*(one(i) for i in instances))

    out = asyncio.run(main())
    return [t for t, _ in out], [s for _, s in out]


def test_a_slow_tool_does_not_stall_the_other_rollouts(monkeypatch):
    instances = FAM.generate("val", 11)
    slow, fast = instances[0], instances[1:]
    slow_env_factory(monkeypatch, {slow.id})
    executor = Executor(LatencyModel())
    try:
        _, own = timed_rollouts(executor, fast)  # the 10 fast ones on their own: their own time
        trajs, took = timed_rollouts(executor, [slow, *fast])
    finally:
        executor.close()
    assert all(t.error == "none" for t in trajs)
    assert took[0] >= SLOW_S + LATENCY_S  # the slow rollout did wait on its tool
    turns = [len(t.turns) for t in trajs[1:]]
    assert min(turns) >= 2  # each fast rollout makes model calls while the slow tool runs
    late = [round(b - a, 2) for a, b in zip(own, took[1:], strict=True)]
    assert max(late) < SLOW_S / 2, late  # each completes in about its own time, not a second later


def test_inline_tools_stall_every_rollout(monkeypatch):
    """The same scene with `tool_threads=0` (the old behaviour): the slow tool blocks the loop, so every
    other rollout ends about SLOW_S late. This is what the test above guards against."""
    instances = FAM.generate("val", 6)
    slow, fast = instances[0], instances[1:]
    slow_env_factory(monkeypatch, {slow.id})
    executor = Executor(LatencyModel(), tool_threads=0)
    _, own = timed_rollouts(executor, fast)
    _, took = timed_rollouts(executor, [slow, *fast])
    late = [b - a for a, b in zip(own, took[1:], strict=True)]
    assert min(late) > SLOW_S * 0.7, late


def test_calls_keep_their_order_and_results_and_only_blocking_tools_leave_the_loop(monkeypatch):
    instances = FAM.generate("val", 6)
    blocking = {instances[0].id, instances[1].id}
    seen_threaded: list[tuple[str, str, str]] = []
    slow_env_factory(monkeypatch, blocking, seen_threaded)
    threaded, _ = timed_rollouts(Executor(LatencyModel()), instances, "synthetic/weak")
    seen_inline: list[tuple[str, str, str]] = []
    slow_env_factory(monkeypatch, blocking, seen_inline)
    inline, _ = timed_rollouts(Executor(LatencyModel(), tool_threads=0), instances, "synthetic/weak")

    assert [t.messages for t in threaded] == [t.messages for t in inline]
    assert [t.outcome for t in threaded] == [t.outcome for t in inline]
    for inst in instances:  # per rollout, the same calls in the same order
        assert [c[1] for c in seen_threaded if c[0] == inst.id] == [c[1] for c in seen_inline if c[0] == inst.id]
    loop_thread = threading.current_thread().name
    assert {c[2] for c in seen_inline} == {loop_thread}
    off = {c[2] for c in seen_threaded if c[0] in blocking}
    assert off and all(name.startswith("executor-tool") for name in off)
    assert {c[2] for c in seen_threaded if c[0] not in blocking} == {loop_thread}  # cheap tools stay inline


def test_families_declare_their_blocking_tools():
    from coevolve.tasks.browser import chromium_available

    refactor = get_family("refactor")
    assert refactor.make_env(refactor.generate("val", 1)[0]).blocking_tools == frozenset({"run_tests"})
    browser = get_family("browser")
    inst = browser.generate("val", 1)[0]
    assert browser.make_env(inst, backend="text").blocking_tools == frozenset()  # pure Python
    for fam in ("iot", "payroll", "budget", "stock", "website"):
        f = get_family(fam)
        assert f.make_env(f.generate("val", 1)[0]).blocking_tools == frozenset(), fam
    if chromium_available():
        from coevolve.tasks.browser import ChromiumBrowser

        b = ChromiumBrowser()
        try:
            env = browser.make_env(inst, backend="chromium", browser=b)
            specs = {t.impl for t in env.tool_specs()}
            helpers = {t.impl for t in browser.optional_tools()}  # pure Python over the app's state
            assert env.blocking_tools == specs - {"answer", "finish"} - helpers
            env.close()
        finally:
            b.close()


def test_tool_threads_setting(monkeypatch):
    monkeypatch.delenv("COEVOLVE_TOOL_THREADS", raising=False)
    assert resolve_tool_threads() == 32
    monkeypatch.setenv("COEVOLVE_TOOL_THREADS", "0")
    assert resolve_tool_threads() == 0 and Executor(LatencyModel()).tool_threads == 0
    assert resolve_tool_threads(4) == 4
    monkeypatch.setenv("COEVOLVE_TOOL_THREADS", "many")
    with pytest.raises(ValueError, match="COEVOLVE_TOOL_THREADS"):
        resolve_tool_threads()
    with pytest.raises(ValueError, match=">= 0"):
        resolve_tool_threads(-1)
