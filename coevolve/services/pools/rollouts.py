"""The executor pool: Ray actors wrapping `coevolve.agents.executor.Executor`.

One actor call per rollout (a round trip costs ~1-2 ms; per-turn calls would dominate), values cross
the wire msgpack-encoded by the one codec, and each harness is put in the object store once per
batch. Actors are async, so one actor keeps many rollouts in flight while they wait on model servers.
Results come back in submission order. If an actor dies mid-batch its in-flight rollouts are re-run
on a replacement actor: no rollout is lost.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import ray
import structlog
from ray.exceptions import ActorDiedError, ActorUnavailableError, ObjectLostError, RayActorError

from coevolve.agents.executor import Executor
from coevolve.codec import decode, encode
from coevolve.services.gateway import Gateway
from coevolve.services.logs import configure_logging
from coevolve.values import Harness, TaskInstance, Trajectory

log = structlog.get_logger(role="pool")
ACTOR_LOST = (RayActorError, ActorDiedError, ActorUnavailableError)
# A result stored on a node that died before the driver fetched it (results over Ray's inline size live in
# the actor node's object store) is lost with it: re-run like a rollout whose actor died.
RESULT_LOST = (*ACTOR_LOST, ObjectLostError)
SCHEDULING = ("SPREAD", "DEFAULT")  # Ray scheduling strategies the pools accept by name
NODE_ID_LABEL = "ray.io/node-id"  # the label Ray gives every node: its node id
WORKER_CPUS = 0.5  # CPUs one rollout actor asks for (it mostly waits on model servers)
READY_TIMEOUT_ENV = "COEVOLVE_ACTOR_READY_TIMEOUT_S"
DEFAULT_READY_TIMEOUT_S = 180.0


class ActorsNotReady(ValueError):
    """Actors the cluster cannot place (or start) in time: one line naming what was asked and what
    the cluster has (a ValueError, so the CLI reports it as bad input)."""


def ready_timeout(explicit: float | None = None) -> float:
    if explicit is not None:
        return explicit
    raw = os.environ.get(READY_TIMEOUT_ENV, "")
    try:
        return float(raw) if raw else DEFAULT_READY_TIMEOUT_S
    except ValueError:
        raise ValueError(f"${READY_TIMEOUT_ENV} must be a number of seconds, got {raw!r}") from None


def wait_ready(actors: list[Any], what: str, cpus_each: float, timeout_s: float | None = None) -> None:
    """Wait until every actor answers `ready()`; if some do not within the timeout (the cluster cannot
    schedule them, or they hang starting), kill them all and raise `ActorsNotReady`."""
    timeout = ready_timeout(timeout_s)
    refs = [a.ready.remote() for a in actors]
    done, pending = ray.wait(refs, num_returns=len(refs), timeout=timeout)
    if pending:
        total = ray.cluster_resources().get("CPU", 0.0)
        free = ray.available_resources().get("CPU", 0.0)
        for a in actors:
            ray.kill(a)
        raise ActorsNotReady(
            f"{len(pending)} of {len(actors)} {what} actors did not start within {timeout:g}s: asked for "
            f"{len(actors)} x {cpus_each:g} CPU = {len(actors) * cpus_each:g} CPUs; the cluster has {total:g} CPUs, "
            f"{free:g} free. Use fewer workers, or more time for a cluster that is still scaling up (${READY_TIMEOUT_ENV})"
        )
    ray.get(done)  # an actor whose constructor failed raises here


class Load:
    """A pool's work as `coevolve monitor` shows it: per actor, the calls in flight and those finished
    (with their rate since the pool started), and the jobs queued in the pool, not yet sent to any actor."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._in_flight: Counter[str] = Counter()
        self._done: Counter[str] = Counter()
        self.queued = 0
        self._started = time.monotonic()

    def enqueue(self, n: int) -> None:
        with self._lock:
            self.queued += n

    def send(self, actor: Any, *, from_queue: bool = False) -> None:
        with self._lock:
            self._in_flight[actor_id(actor)] += 1
            self.queued -= from_queue

    def back(self, actor: Any, *, ok: bool = True) -> None:
        with self._lock:
            key = actor_id(actor)
            self._in_flight[key] -= 1
            self._done[key] += ok

    @contextmanager
    def working(self, actor: Any) -> Iterator[None]:
        """One call on `actor`: in flight inside the block, finished if the block returns."""
        self.send(actor)
        ok = False
        try:
            yield
            ok = True
        finally:
            self.back(actor, ok=ok)

    def as_json(self, actors: Sequence[Any]) -> dict[str, Any]:
        with self._lock:
            elapsed = max(time.monotonic() - self._started, 1e-9)
            per_actor = {
                key: {"in_flight": self._in_flight[key], "done": self._done[key], "per_s": round(self._done[key] / elapsed, 3)}
                for key in map(actor_id, actors)
            }
            return {"queued": self.queued, "actors": per_actor}


def actor_id(actor: Any) -> str:
    """The hex id Ray's actor table lists an actor handle under."""
    return actor._actor_id.hex()


@dataclass(frozen=True)
class RolloutJob:
    instance: TaskInstance
    harness: Harness
    model: str
    seed: int = 0


class RolloutWorker:
    """Plain class; `RolloutPool` makes it a Ray actor at launch."""

    def __init__(self) -> None:
        configure_logging()
        gateway = Gateway()
        gateway.warm_up()  # import litellm now, not inside the first rollout
        self.executor = Executor(gateway)

    def ready(self) -> int:
        return os.getpid()

    def node_id(self) -> str:
        """The Ray node this actor runs on (a replacement for it, if it is lost, avoids that node)."""
        return ray.get_runtime_context().get_node_id()

    async def rollout(self, instance: bytes, harness: bytes, model: str, seed: int) -> bytes:
        traj = await self.executor.rollout(decode(instance), decode(harness), model, seed)
        return encode(traj)

    async def replay(self, traj: bytes, harness: bytes, turn: int, forced: dict[str, Any]) -> bytes:
        """Resume a recorded rollout with `forced` as its assistant turn `turn` (the replay check)."""
        from coevolve.agents.executor import Resume

        t = decode(traj)
        out = await self.executor.rollout(t.instance, decode(harness), t.model, t.seed, resume=Resume(t, turn, forced))
        return encode(out)


def worker_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for project actors: the project's own settings (COEVOLVE_*, LITELLM_*), never more."""
    env = {k: v for k, v in os.environ.items() if k.startswith(("COEVOLVE_", "LITELLM_"))}
    env.update(extra or {})
    return env


class RolloutPool:
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
        """`max_in_flight`: the most rollouts a batch runs at once unless `run` is told otherwise (None:
        all), e.g. the served model's batch size, so a small server is not flooded past its timeouts;
        `resources`: custom Ray resources each actor needs besides its CPUs (e.g. `{"executor": 1}` to
        run only on nodes that advertise `executor`); `scheduling`: "SPREAD" (default: actors spread over
        the nodes that qualify) or "DEFAULT" (Ray packs them). Neither pins a node: a replacement for an
        actor lost with its node goes to another node that qualifies (see `avoiding`)."""
        if workers < 1:
            raise ValueError("workers must be >= 1")
        if max_in_flight is not None and max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        self.max_in_flight = max_in_flight
        self.resources = placement_resources(resources)
        self.scheduling = scheduling_strategy(scheduling)
        self.max_concurrency = max_concurrency
        self.num_cpus = num_cpus
        self._env = worker_env(env)
        self.max_replacements = max_replacements
        self.replacements = 0
        self._turn = 0
        self._lock = threading.RLock()
        self._nodes: dict[Any, Any] = {}  # actor -> ref to its node id
        self.load = Load()
        self.actors = [self._spawn() for _ in range(workers)]
        wait_ready(self.actors, describe("rollout", self.resources), num_cpus, ready_timeout_s)

    def _spawn(self, avoid_node: str | None = None) -> Any:
        cls = ray.remote(RolloutWorker)
        actor = cls.options(
            num_cpus=self.num_cpus,
            max_concurrency=self.max_concurrency,
            runtime_env={"env_vars": self._env},
            scheduling_strategy=self.scheduling,
            **({"resources": self.resources} if self.resources else {}),
            **avoiding(avoid_node),
        ).remote()
        self._nodes[actor] = actor.node_id.remote()
        return actor

    def run(
        self,
        jobs: Sequence[RolloutJob],
        on_result: Callable[[int, Trajectory], None] | None = None,
        progress: bool = False,
        description: str = "rollouts",
        max_in_flight: int | None = None,
    ) -> list[Trajectory]:
        """Run every job; return trajectories in submission order. At most `max_in_flight` rollouts
        run at once (default: the pool's), so a large batch does not flood the model servers."""
        if not jobs:
            return []
        max_in_flight = max_in_flight or self.max_in_flight
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

        self.load.enqueue(len(jobs))

        queue = iter(range(len(jobs)))
        for i in queue:
            submit(i)
            if max_in_flight and len(pending) >= max_in_flight:
                break
        bar = _Progress(len(jobs), description) if progress else None
        done = 0
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=None)
                for ref in ready:
                    i, actor = pending.pop(ref)
                    try:
                        traj = decode(ray.get(ref))
                    except RESULT_LOST as e:
                        self.load.back(actor, ok=False)
                        self._replace(actor, e)
                        submit(i, again=True)
                        continue
                    self.load.back(actor)
                    results[i] = traj
                    done += 1
                    next_job = next(queue, None)
                    if next_job is not None:
                        submit(next_job)
                    if bar:
                        bar.update(done, traj)
                    if on_result:
                        on_result(i, traj)
        finally:
            if bar:
                bar.close()
            for i, actor in pending.values():  # a batch given up (an error above): nothing of it is in flight now
                self.load.back(actor, ok=False)
            self.load.enqueue(-sum(r is None for r in results) + len(pending))
        return [r for r in results if r is not None]

    def replay(self, traj: Trajectory, harness: Harness, turn: int, forced: dict[str, Any]) -> Trajectory:
        """One replay on the next actor (re-run on a replacement if that actor dies)."""
        payload = (encode(traj), ray.put(encode(harness)), turn, forced)
        while True:
            with self._lock:
                actor = self.actors[self._turn % len(self.actors)]
                self._turn += 1
            try:
                with self.load.working(actor):
                    return decode(ray.get(actor.replay.remote(*payload)))
            except RESULT_LOST as e:
                self._replace(actor, e)

    def _replace(self, actor: Any, error: Exception) -> None:
        with self._lock:
            if actor not in self.actors:
                return  # already replaced (several in-flight rollouts report the same death)
            self.replacements += 1
            if self.replacements > self.max_replacements:
                raise RuntimeError(f"rollout actors keep dying ({self.replacements} replaced): {error}") from error
            log.warning("rollout actor lost; re-running its rollouts on a new actor", error=str(error)[:200])
            self.actors[self.actors.index(actor)] = self._spawn(avoid_node=self._node_of(actor))
            _kill_quietly(actor)  # one merely unreachable may still run: it must not linger beside its replacement

    def _node_of(self, actor: Any) -> str | None:
        """The node a lost actor ran on, if it said so before it was lost."""
        ref = self._nodes.pop(actor, None)
        if ref is None:
            return None
        try:
            return ray.get(ref, timeout=0)
        except Exception:  # noqa: BLE001 - lost before it answered: the replacement may go anywhere
            return None

    def shutdown(self) -> None:
        for a in self.actors:
            ray.kill(a)
        self.actors = []
        self._nodes.clear()


def avoiding(node_id: str | None) -> dict[str, Any]:
    """Actor options that keep a replacement off the node its predecessor was lost with: until Ray's
    health check declares that node dead (seconds), Ray still offers it, and an actor placed there would
    die in turn. Soft: where no other node qualifies (one node, or the others full) the fallback
    places it anywhere, that node included."""
    if not node_id:
        return {}
    return {"label_selector": {NODE_ID_LABEL: f"!{node_id}"}, "fallback_strategy": [{"label_selector": {}}]}


def placement_resources(resources: dict[str, float] | None) -> dict[str, float]:
    """Custom resources an actor asks for (CPUs and GPUs have their own options)."""
    out = {str(k): float(v) for k, v in (resources or {}).items()}
    bad = [k for k, v in out.items() if k in ("CPU", "GPU") or v < 0]
    if bad:
        raise ValueError(f"resources must be custom resources with amounts >= 0 (use num_cpus for CPUs): {', '.join(bad)}")
    return out


def scheduling_strategy(name: str) -> str:
    if name not in SCHEDULING:
        raise ValueError(f"scheduling must be one of {', '.join(SCHEDULING)}, got {name!r}")
    return name


def describe(what: str, resources: dict[str, float]) -> str:
    """`what` for `wait_ready`'s message, naming the custom resources each actor needs."""
    if not resources:
        return what
    return f"{what} ({', '.join(f'{k}={v:g}' for k, v in resources.items())} each)"


def _kill_quietly(actor: Any) -> None:
    try:
        ray.kill(actor, no_restart=True)
    except Exception as e:  # noqa: BLE001 - already dead or its node gone: nothing left to stop
        log.debug("lost rollout actor could not be killed", error=str(e)[:200])


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
