"""Rollouts and roles in the calling process, without Ray: the meta-loop's `Evaluator` and a dataset
build's `Services` for benches, tests and quick local runs. The same executor, judge and expert and
the same litellm gateway as the Ray pools, with concurrency from one asyncio loop (one process, so one
core). The loop lives in a background thread, so callers from several threads (a dataset build works
on failures in parallel) share it safely."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from coevolve.agents.correction import Services
from coevolve.agents.executor import Executor, Resume
from coevolve.agents.expert import ExpertRewriter
from coevolve.agents.judge import Judge, RoleUsage
from coevolve.llm.contract import ModelClient
from coevolve.values import FailureLocus, Harness, TaskInstance, Trajectory

T = TypeVar("T")


class _LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="coevolve-local-loop", daemon=True).start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()


_LOOP: _LoopThread | None = None
_LOOP_LOCK = threading.Lock()


def _loop() -> _LoopThread:
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None:
            _LOOP = _LoopThread()
        return _LOOP


class LocalEvaluator:
    """Implements `coevolve.agents.meta.loop.Evaluator`; counts what it ran."""

    def __init__(self, client: ModelClient, concurrency: int = 32):
        self.client = client
        self.concurrency = concurrency
        self.calls = 0
        self.rollouts = 0

    def evaluate(self, jobs: Sequence[tuple[TaskInstance, Harness, int]], model: str) -> list[Trajectory]:
        self.calls += 1
        self.rollouts += len(jobs)
        executor = Executor(self.client)

        async def run() -> list[Trajectory]:
            sem = asyncio.Semaphore(self.concurrency)

            async def one(inst: TaskInstance, harness: Harness, seed: int) -> Trajectory:
                async with sem:
                    return await executor.rollout(inst, harness, model, seed)

            return await asyncio.gather(*(one(*job) for job in jobs))

        return _loop().run(run())

    def replay(self, traj: Trajectory, harness: Harness, turn: int, forced: dict[str, Any]) -> Trajectory:
        """Resume `traj` with `forced` as its assistant turn `turn` (the replay check)."""
        self.rollouts += 1
        return _loop().run(
            Executor(self.client).rollout(traj.instance, harness, traj.model, traj.seed, resume=Resume(traj, turn, forced))
        )


def local_services(evaluator: LocalEvaluator, judge: Judge | None = None, expert: ExpertRewriter | None = None) -> Services:
    """A dataset build's services in this process; each call reports its own model usage."""

    def locate(traj: Trajectory) -> tuple[FailureLocus, dict[str, Any]]:
        used = RoleUsage()
        return judge.locate(traj, usage=used), used.as_json()

    def rewrite(traj: Trajectory, locus: FailureLocus, k: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        used = RoleUsage()
        return expert.rewrite(traj, locus, k, seed=traj.seed, usage=used), used.as_json()

    def score(traj: Trajectory, locus: FailureLocus, candidate: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        used = RoleUsage()
        return judge.score(traj, locus, candidate, usage=used), used.as_json()

    return Services(
        rollouts=evaluator.evaluate,
        locate=locate if judge else None,
        rewrite=rewrite if expert else None,
        score=score if judge else None,
        replay=evaluator.replay,
    )
