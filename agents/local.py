"""Rollouts in the calling process, without Ray: the meta-loop's `Evaluator` for benches, tests and
quick local runs. The same executor and the same litellm gateway as the Ray pool, with concurrency
from asyncio only (one process, so one core)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from agents.executor import Executor, ModelClient
from harness_store.values import Harness, TaskInstance, Trajectory


class LocalEvaluator:
    """Implements `agents.meta.loop.Evaluator`; counts what it ran."""

    def __init__(self, client: ModelClient | None = None, concurrency: int = 32):
        if client is None:
            from services.gateway import Gateway  # lazy: litellm's import takes seconds

            client = Gateway()
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

        return asyncio.run(run())
