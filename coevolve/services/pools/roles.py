"""The judge and the expert rewriter as pools of Ray actors beside the executor pool (docs/ARCHITECTURE.md §4).

`coevolve.agents.judge.Judge` and `coevolve.agents.expert.ExpertRewriter` stay plain classes; `RoleWorker` hosts one of
them behind the model gateway and `RolePool` makes workers actors at launch (`ActorPool`). Values cross
the wire encoded by the one codec (`FailureLocus`, `Trajectory`; candidates are plain JSON). A call whose
actor dies (or is killed by Ray's memory monitor) is re-run on a replacement actor, so killing a judge or
expert actor mid-build loses no work; each call returns the model usage it cost, so spend is counted once
even across retries. An expert consults the handbook of each rollout's family, so one expert pool serves
every family.
"""

from __future__ import annotations

import secrets
from typing import Any

from coevolve.agents.backend import PerFamily
from coevolve.agents.expert import ExpertRewriter
from coevolve.agents.judge import Judge, RoleUsage
from coevolve.codec import decode, encode
from coevolve.errors import BadInput
from coevolve.services.gateway import Gateway
from coevolve.services.logs import configure_logging
from coevolve.services.pools.base import ActorPool, Worker

ROLES = ("judge", "expert")


class RoleWorker(Worker):
    """Plain class; `RolePool` makes it a Ray actor. Plays `role` with `model` through the gateway."""

    def __init__(self, role: str, model: str) -> None:
        if role not in ROLES:
            raise BadInput(f"unknown role {role!r} (roles: {', '.join(ROLES)})")
        configure_logging()
        gateway = Gateway()
        gateway.warm_up()
        self.judge = Judge(model, gateway) if role == "judge" else None
        self.experts = PerFamily(ExpertRewriter(model, gateway)) if role == "expert" else None

    def locate(self, traj: bytes) -> tuple[bytes, dict[str, Any]]:
        used = RoleUsage()
        return encode(self.judge.locate(decode(traj), usage=used)), used.as_json()

    def score(self, traj: bytes, locus: bytes, candidate: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        used = RoleUsage()
        return self.judge.score(decode(traj), decode(locus), candidate, usage=used), used.as_json()

    def classify(self, traj: bytes, locus: bytes | None = None) -> tuple[bytes, dict[str, Any]]:
        used = RoleUsage()
        label = self.judge.classify(decode(traj), decode(locus) if locus else None, usage=used)
        return encode(label), used.as_json()

    def rewrite(self, traj: bytes, locus: bytes, k: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        used = RoleUsage()
        t = decode(traj)
        return self.experts(t.instance.family).rewrite(t, decode(locus), k, seed=t.seed, usage=used), used.as_json()


class RolePool(ActorPool):
    """`workers` actors playing one role; `call` runs a method on the next actor, re-running it on a
    replacement when the actor is lost (up to `max_replacements` in the pool's life)."""

    worker = RoleWorker

    def __init__(self, role: str, model: str, workers: int = 2, *, num_cpus: float = 0.25, max_concurrency: int = 16,
                 max_replacements: int = 8, ready_timeout_s: float | None = None,
                 resources: dict[str, float] | None = None):
        """`resources`: custom Ray resources each actor needs besides its CPUs (e.g. `{"roles": 1}` to run
        only on nodes that advertise `roles`); a replacement goes to another node that has them."""
        self.role = role
        super().__init__(role, workers, args=(role, model), num_cpus=num_cpus, max_concurrency=max_concurrency,
                         resources=resources, max_replacements=max_replacements, ready_timeout_s=ready_timeout_s)

    def actor_name(self) -> str:
        return f"{self.role}-{secrets.token_hex(4)}"  # the role shows in `coevolve monitor`
