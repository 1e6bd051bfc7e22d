"""The judge and the expert rewriter as pools of Ray actors beside the executor pool (DESIGN §4).

`coevolve.agents.judge.Judge` and `coevolve.agents.expert.ExpertRewriter` stay plain classes; `RoleWorker` hosts one of
them behind the model gateway and `RolePool` makes workers actors at launch. Values cross the wire
encoded by the one codec (`FailureLocus`, `Trajectory`; candidates are plain JSON). A call whose
actor dies (or is killed by Ray's memory monitor) is re-run on a replacement actor, so killing a judge or expert actor mid-build loses no
work; each call returns the model usage it cost, so spend is counted once even across retries.
`ray_services` wires the pools and the rollout pool into a dataset build's `Services`.
"""

from __future__ import annotations

import itertools
import secrets
import threading
from typing import Any

import ray
import structlog

from coevolve.agents.correction import Services
from coevolve.agents.judge import RoleUsage
from coevolve.codec import decode, encode
from coevolve.services.logs import configure_logging
from coevolve.services.pools.rollouts import (
    ACTOR_LOST,
    Load,
    RolloutPool,
    describe,
    placement_resources,
    wait_ready,
)
from coevolve.values import FailureLocus, Harness, Trajectory

log = structlog.get_logger(role="roles")
ROLES = ("judge", "expert")
# Ray's memory monitor kills the worker of an actor whose call runs when the node runs low on memory: the
# call fails with OutOfMemoryError and the actor is gone, so it is re-run on a replacement like a death.
ROLE_LOST = (*ACTOR_LOST, ray.exceptions.OutOfMemoryError)


class RoleWorker:
    """Plain class; `RolePool` makes it a Ray actor. Plays `role` with `model` through the gateway."""

    def __init__(self, role: str, model: str, family: str | None = None) -> None:
        from coevolve.agents.expert import ExpertRewriter
        from coevolve.agents.judge import Judge
        from coevolve.services.gateway import Gateway

        configure_logging()
        gateway = Gateway()
        gateway.warm_up()

        def complete(m: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]], seed: int):
            return gateway.complete(m, messages, tools, seed=seed)

        if role == "judge":
            self.agent: Any = Judge(model, complete, windows=gateway.budget)
        elif role == "expert":
            from coevolve.tasks import get_family

            handbook = get_family(family).handbook if family else None
            self.agent = ExpertRewriter(model, complete, handbook, windows=gateway.budget)
        else:
            raise ValueError(f"unknown role {role!r} (roles: {', '.join(ROLES)})")

    def ready(self) -> bool:
        return True

    def locate(self, traj: bytes) -> tuple[bytes, dict[str, Any]]:
        used = RoleUsage()
        return encode(self.agent.locate(decode(traj), usage=used)), used.as_json()

    def score(self, traj: bytes, locus: bytes, candidate: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        used = RoleUsage()
        return self.agent.score(decode(traj), decode(locus), candidate, usage=used), used.as_json()

    def classify(self, traj: bytes, locus: bytes | None = None) -> tuple[bytes, dict[str, Any]]:
        used = RoleUsage()
        label = self.agent.classify(decode(traj), decode(locus) if locus else None, usage=used)
        return encode(label), used.as_json()

    def rewrite(self, traj: bytes, locus: bytes, k: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        used = RoleUsage()
        t = decode(traj)
        return self.agent.rewrite(t, decode(locus), k, seed=t.seed, usage=used), used.as_json()


class RolePool:
    """`workers` actors playing one role; `call` runs a method on the next actor, re-running it on a
    replacement when the actor dies (up to `max_replacements` in the pool's life)."""

    def __init__(self, role: str, model: str, workers: int = 2, *, family: str | None = None,
                 num_cpus: float = 0.25, max_concurrency: int = 16, max_replacements: int = 8,
                 ready_timeout_s: float | None = None, resources: dict[str, float] | None = None):
        """`resources`: custom Ray resources each actor needs besides its CPUs (e.g. `{"roles": 1}` to run
        only on nodes that advertise `roles`); a replacement goes to any node that still has them."""
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self.role = role
        self._args = (role, model, family)
        self._options = {"num_cpus": num_cpus, "max_concurrency": max_concurrency, "name": None}
        self.resources = placement_resources(resources)
        self.max_replacements = max_replacements
        self.replacements = 0
        self._lock = threading.Lock()
        self.load = Load()
        self.actors = [self._spawn() for _ in range(workers)]
        wait_ready(self.actors, describe(role, self.resources), num_cpus, ready_timeout_s)
        self._next = itertools.count()

    def _spawn(self) -> Any:
        from coevolve.services.pools.rollouts import worker_env

        return ray.remote(RoleWorker).options(
            name=f"{self.role}-{secrets.token_hex(4)}",  # the role shows in `coevolve monitor`
            num_cpus=self._options["num_cpus"], max_concurrency=self._options["max_concurrency"],
            runtime_env={"env_vars": worker_env()},
            **({"resources": self.resources} if self.resources else {}),
        ).remote(*self._args)

    def call(self, method: str, *args: Any) -> Any:
        while True:
            with self._lock:
                actor = self.actors[next(self._next) % len(self.actors)]
            try:
                with self.load.working(actor):
                    return ray.get(getattr(actor, method).remote(*args))
            except ROLE_LOST as e:
                self._replace(actor, e)

    def _replace(self, actor: Any, error: Exception) -> None:
        with self._lock:
            if actor not in self.actors:
                return  # another caller replaced it already
            self.replacements += 1
            if self.replacements > self.max_replacements:
                raise RuntimeError(f"{self.role} actors keep dying ({self.replacements} replaced): {error}") from error
            log.warning("role actor lost; re-running its call on a new actor", role=self.role, error=str(error)[:200])
            self.actors[self.actors.index(actor)] = self._spawn()

    def shutdown(self) -> None:
        for a in self.actors:
            ray.kill(a)
        self.actors = []


def ray_services(rollouts: RolloutPool, judges: RolePool | None, experts: RolePool | None) -> Services:
    """A dataset build's services on the cluster: rollouts and replays on the executor pool, the
    judge's and the expert's calls on their pools."""
    from coevolve.services.pools.rollouts import PoolEvaluator

    def locate(traj: Trajectory) -> tuple[FailureLocus, dict[str, Any]]:
        locus, used = judges.call("locate", encode(traj))
        return decode(locus), used

    def score(traj: Trajectory, locus: FailureLocus, candidate: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        return judges.call("score", encode(traj), encode(locus), candidate)

    def rewrite(traj: Trajectory, locus: FailureLocus, k: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        return experts.call("rewrite", encode(traj), encode(locus), k)

    def replay(traj: Trajectory, harness: Harness, turn: int, forced: dict[str, Any]) -> Trajectory:
        return rollouts.replay(traj, harness, turn, forced)

    return Services(
        rollouts=PoolEvaluator(rollouts).evaluate,
        locate=locate if judges else None,
        rewrite=rewrite if experts else None,
        score=score if judges else None,
        replay=replay,
    )
