"""Rollouts and roles in the calling process, without Ray: the meta-loop's `Evaluator` and the
in-process `coevolve.agents.backend.Backend` for benches, tests and quick local runs. The same executor, judge and expert and
the same litellm gateway as the Ray pools, with concurrency from one asyncio loop (one process, so one
core). The loop lives in a background thread, so callers from several threads (a dataset build works
on failures in parallel) share it safely."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from coevolve.agents.backend import CallUsage, CycleRoles, Job, PerFamily, Trainer, missing
from coevolve.agents.executor import Executor, Resume
from coevolve.agents.expert import ExpertRewriter
from coevolve.agents.judge import Judge, RoleUsage
from coevolve.agents.meta.proposer import LLMProposer
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


class LocalBackend(CycleRoles):
    """`Backend` in this process: rollouts and replays on `evaluator`, the roles as the objects given.
    The expert and the proposer work on each family with that family's handbook (whatever handbook they
    were made with); `trainer` trains the adapters."""

    def __init__(self, evaluator: LocalEvaluator, judge: Judge | None = None, expert: ExpertRewriter | None = None, *,
                 proposer: LLMProposer | None = None, trainer: Trainer | None = None):
        super().__init__(proposer, trainer)
        self.evaluator = evaluator
        self.judge = judge
        self.experts = PerFamily(expert) if expert is not None else None

    def evaluate(self, jobs: Sequence[Job], model: str) -> list[Trajectory]:
        return self.evaluator.evaluate(jobs, model)

    def replay(self, traj: Trajectory, harness: Harness, turn: int, forced: dict[str, Any]) -> Trajectory:
        return self.evaluator.replay(traj, harness, turn, forced)

    def locate(self, traj: Trajectory) -> tuple[FailureLocus, CallUsage]:
        used = RoleUsage()
        return self._judge().locate(traj, usage=used), used.as_json()

    def rewrite(self, traj: Trajectory, locus: FailureLocus, k: int) -> tuple[list[dict[str, Any]], CallUsage]:
        if self.experts is None:
            raise missing("expert")
        used = RoleUsage()
        return self.experts(traj.instance.family).rewrite(traj, locus, k, seed=traj.seed, usage=used), used.as_json()

    def score(self, traj: Trajectory, locus: FailureLocus, candidate: dict[str, Any]) -> tuple[dict[str, Any], CallUsage]:
        used = RoleUsage()
        return self._judge().score(traj, locus, candidate, usage=used), used.as_json()

    def _judge(self) -> Judge:
        if self.judge is None:
            raise missing("judge")
        return self.judge
