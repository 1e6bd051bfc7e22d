"""The executor pool: Ray actors wrapping `coevolve.agents.executor.Executor`.

One actor call per rollout (a round trip costs ~1-2 ms; per-turn calls would dominate), values cross
the wire msgpack-encoded by the one codec, and each harness is put in the object store once per
batch. Actors are async, so one actor keeps many rollouts in flight while they wait on model servers.
Results come back in submission order. If an actor dies mid-batch (Ray's memory monitor killing it
included) its in-flight rollouts are re-run on a replacement actor (`coevolve.services.pools.base.ActorPool`):
no rollout is lost.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import ray
from ray.exceptions import ObjectLostError

from coevolve.agents.executor import Executor
from coevolve.codec import decode, encode
from coevolve.errors import BadInput
from coevolve.services.gateway import Gateway
from coevolve.services.logs import configure_logging
from coevolve.services.pools.base import ACTOR_LOST, ActorPool, Worker
from coevolve.values import Harness, TaskInstance, Trajectory

# A result stored on a node that died before the driver fetched it (results over Ray's inline size live in
# the actor node's object store) is lost with it: re-run like a rollout whose actor died.
RESULT_LOST = (*ACTOR_LOST, ObjectLostError)
WORKER_CPUS = 0.5  # CPUs one rollout actor asks for (it mostly waits on model servers)


@dataclass(frozen=True)
class RolloutJob:
    instance: TaskInstance
    harness: Harness
    model: str
    seed: int = 0


class RolloutWorker(Worker):
    """Plain class; `RolloutPool` makes it a Ray actor at launch."""

    def __init__(self) -> None:
        configure_logging()
        gateway = Gateway()
        gateway.warm_up()  # import litellm now, not inside the first rollout
        self.executor = Executor(gateway)

    async def rollout(self, instance: bytes, harness: bytes, model: str, seed: int) -> bytes:
        traj = await self.executor.rollout(decode(instance), decode(harness), model, seed)
        return encode(traj)

    async def replay(self, traj: bytes, harness: bytes, turn: int, forced: dict[str, Any]) -> bytes:
        """Resume a recorded rollout with `forced` as its assistant turn `turn` (the replay check)."""
        from coevolve.agents.executor import Resume

        t = decode(traj)
        out = await self.executor.rollout(t.instance, decode(harness), t.model, t.seed, resume=Resume(t, turn, forced))
        return encode(out)


class RolloutPool(ActorPool):
    worker = RolloutWorker
    lost = RESULT_LOST

    def __init__(
        self,
        workers: int = 2,
        *,
        max_concurrency: int = 256,
        num_cpus: float = WORKER_CPUS,
        env: dict[str, str] | None = None,
        max_replacements: int = 8,
        ready_timeout_s: float | None = None,
        resources: dict[str, float] | None = None,
        scheduling: str = "SPREAD",
        max_in_flight: int | None = None,
    ):
        """`max_in_flight`: the most rollouts the pool runs at once over all its batches (None: no cap),
        e.g. the served model's batch size, so a small server is not flooded past its timeouts however
        many batches run side by side; `resources` and `scheduling` place the actors (`ActorPool`): by
        default they spread over the nodes that qualify."""
        if max_in_flight is not None and max_in_flight < 1:
            raise BadInput(f"max_in_flight must be >= 1, got {max_in_flight}")
        self.max_in_flight = max_in_flight
        self._slots = _Slots(max_in_flight) if max_in_flight else None
        super().__init__("rollout", workers, num_cpus=num_cpus, max_concurrency=max_concurrency, env=env,
                         resources=resources, scheduling=scheduling, max_replacements=max_replacements,
                         ready_timeout_s=ready_timeout_s)

    def run(
        self,
        jobs: Sequence[RolloutJob],
        on_result: Callable[[int, Trajectory], None] | None = None,
        progress: bool = False,
        description: str = "rollouts",
        max_in_flight: int | None = None,
    ) -> list[Trajectory]:
        """Run every job; return trajectories in submission order. At most `max_in_flight` of them run
        at once, and at most the pool's `max_in_flight` over all batches, so concurrent batches do not
        flood the model servers."""
        if not jobs:
            return []
        harness_refs: dict[str, Any] = {}
        payloads = []
        for job in jobs:
            hid = job.harness.id
            if hid not in harness_refs:
                harness_refs[hid] = ray.put(encode(job.harness))
            payloads.append((encode(job.instance), harness_refs[hid], job.model, job.seed))
        results: list[Trajectory | None] = [None] * len(jobs)
        pending: dict[Any, tuple[int, Any]] = {}  # ref -> (job index, actor)
        next_actor = 0

        def submit(i: int, *, again: bool = False) -> None:
            nonlocal next_actor
            actor = self.actors[next_actor % len(self.actors)]
            next_actor += 1
            inst, href, model, seed = payloads[i]
            pending[actor.rollout.remote(inst, href, model, seed)] = (i, actor)
            self.load.send(actor, from_queue=not again)

        submitted = held = 0  # jobs submitted; pool slots this batch holds

        def fill() -> None:
            """Submit queued jobs up to the caps; wait for a pool slot only while none of this batch is in
            flight (a batch holding slots frees them as its results come back)."""
            nonlocal submitted, held
            while submitted < len(jobs) and not (max_in_flight and len(pending) >= max_in_flight):
                if self._slots is not None:
                    if not self._slots.take(wait=not pending):
                        return
                    held += 1
                submit(submitted)
                submitted += 1

        def free(n: int = 1) -> None:
            nonlocal held
            if self._slots is not None:
                self._slots.give(n)
                held -= n

        self.load.enqueue(len(jobs))
        bar = _Progress(len(jobs), description) if progress else None
        done = 0
        try:
            fill()
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=None)
                for ref in ready:
                    i, actor = pending.pop(ref)
                    try:
                        traj = decode(ray.get(ref))
                    except RESULT_LOST as e:
                        self.load.back(actor, ok=False)
                        self._replace(actor, e)
                        submit(i, again=True)  # in the slot it held
                        continue
                    self.load.back(actor)
                    free()
                    results[i] = traj
                    done += 1
                    fill()
                    if bar:
                        bar.update(done, traj)
                    if on_result:
                        on_result(i, traj)
        finally:
            if bar:
                bar.close()
            for i, actor in pending.values():  # a batch given up (an error above): nothing of it is in flight now
                self.load.back(actor, ok=False)
            free(held)
            self.load.enqueue(-sum(r is None for r in results) + len(pending))
        return [r for r in results if r is not None]

    def replay(self, traj: Trajectory, harness: Harness, turn: int, forced: dict[str, Any]) -> Trajectory:
        """One replay on the next actor (re-run on a replacement if that actor dies)."""
        return decode(self.call("replay", encode(traj), ray.put(encode(harness)), turn, forced))


class _Slots:
    """A pool's cap on rollouts in flight over all its batches. A batch with none in flight waits for a
    slot; a batch holding slots takes another only while no batch waits, so none starves."""

    def __init__(self, n: int):
        self.free, self.waiting, self.cond = n, 0, threading.Condition()

    def take(self, *, wait: bool) -> bool:
        with self.cond:
            if wait:
                self.waiting += 1
                self.cond.wait_for(lambda: self.free > 0)
                self.waiting -= 1
            elif self.waiting or not self.free:
                return False
            self.free -= 1
            return True

    def give(self, n: int) -> None:
        with self.cond:
            self.free += n
            self.cond.notify(n)


class _Progress:
    def __init__(self, total: int, description: str):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.passed = 0
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("pass {task.fields[passed]}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        self.task = self.progress.add_task(description, total=total, passed=0)
        self.progress.start()

    def update(self, done: int, traj: Trajectory) -> None:
        self.passed += traj.passed
        self.progress.update(self.task, completed=done, passed=self.passed)

    def close(self) -> None:
        self.progress.stop()


class PoolEvaluator:
    """`coevolve.agents.meta.loop.Evaluator` over the pool: one batch per call, results in job order."""

    def __init__(self, pool: RolloutPool):
        self.pool = pool  # its `max_in_flight` caps each batch

    def evaluate(self, jobs: Sequence[tuple[TaskInstance, Harness, int]], model: str) -> list[Trajectory]:
        return self.pool.run([RolloutJob(i, h, model, s) for i, h, s in jobs])
