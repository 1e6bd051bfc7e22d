"""In-process rollouts for family, executor and meta-loop tests: the real executor and the real
litellm gateway, without Ray (the pool has its own tests)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from agents.executor import Executor
from harness_store.values import Harness, TaskInstance, Trajectory
from services.gateway import Gateway

_GATEWAY = Gateway()


class InProcessEvaluator:
    """The meta-loop's Evaluator without Ray; counts what it ran."""

    def __init__(self, concurrency: int = 32):
        self.concurrency = concurrency
        self.calls = 0
        self.rollouts = 0

    def evaluate(self, jobs: Sequence[tuple[TaskInstance, Harness, int]], model: str) -> list[Trajectory]:
        self.calls += 1
        self.rollouts += len(jobs)
        executor = Executor(_GATEWAY)

        async def run() -> list[Trajectory]:
            sem = asyncio.Semaphore(self.concurrency)

            async def one(inst: TaskInstance, harness: Harness, seed: int) -> Trajectory:
                async with sem:
                    return await executor.rollout(inst, harness, model, seed)

            return await asyncio.gather(*(one(*job) for job in jobs))

        return asyncio.run(run())


def rollout_all(
    instances: Sequence[TaskInstance], harness: Harness, model: str, seed: int = 0, concurrency: int = 32
) -> list[Trajectory]:
    return InProcessEvaluator(concurrency).evaluate([(i, harness, seed) for i in instances], model)


def pass_rate(trajectories: Sequence[Trajectory]) -> float:
    return sum(t.passed for t in trajectories) / len(trajectories)


def proposer_complete(model, messages, tools, seed):
    return _GATEWAY.complete(model, messages, tools, seed=seed)
