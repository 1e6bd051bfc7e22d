"""`coevolve.agents.backend.Backend` on the cluster: `RayBackend` runs rollouts and replays on the
executor pool, the judge's and the expert's calls on their role pools, the proposer through this
process's gateway and training through a `Trainer` (`StoreTrainer`: the store's datasets, the one
training interface)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from coevolve.agents.backend import CallUsage, CycleRoles, Job, Rollouts, Trainer, missing
from coevolve.agents.meta.proposer import LLMProposer
from coevolve.codec import decode, encode
from coevolve.services.gateway import Gateway
from coevolve.services.pools.roles import RolePool
from coevolve.services.pools.rollouts import PoolEvaluator, RolloutPool
from coevolve.store.store import HarnessStore
from coevolve.values import FailureLocus, Harness, Trajectory

SHARED = 64  # failures whose trajectory a backend keeps in the object store (a build corrects `concurrency` at once)


class RayBackend(CycleRoles):
    """`evaluate`: what runs a batch of rollouts (default: the executor pool; e.g. the pool's wrapped in
    a meter); `proposer`: the proposer's model, called through a gateway in this process."""

    def __init__(self, rollouts: RolloutPool, judges: RolePool | None = None, experts: RolePool | None = None, *,
                 proposer: str | None = None, trainer: Trainer | None = None, evaluate: Rollouts | None = None):
        template = None
        if proposer is not None:
            gateway = Gateway()
            template = LLMProposer(proposer, gateway)
        super().__init__(template, trainer)
        self.rollouts = rollouts
        self.judges = judges
        self.experts = experts
        self._evaluate = evaluate or PoolEvaluator(rollouts).evaluate
        self._refs: dict[int, tuple[Trajectory, Any]] = {}  # id(trajectory) -> (it, its object-store ref)
        self._lock = threading.Lock()

    def evaluate(self, jobs: Sequence[Job], model: str) -> list[Trajectory]:
        return self._evaluate(jobs, model)

    def replay(self, traj: Trajectory, harness: Harness, turn: int, forced: dict[str, Any]) -> Trajectory:
        return self.rollouts.replay(traj, harness, turn, forced)

    def locate(self, traj: Trajectory) -> tuple[FailureLocus, CallUsage]:
        locus, used = self._pool(self.judges, "judge").call("locate", self._shared(traj))
        return decode(locus), used

    def rewrite(self, traj: Trajectory, locus: FailureLocus, k: int) -> tuple[list[dict[str, Any]], CallUsage]:
        return self._pool(self.experts, "expert").call("rewrite", self._shared(traj), encode(locus), k)

    def score(self, traj: Trajectory, locus: FailureLocus, candidate: dict[str, Any]) -> tuple[dict[str, Any], CallUsage]:
        return self._pool(self.judges, "judge").call("score", self._shared(traj), encode(locus), candidate)

    def _shared(self, traj: Trajectory) -> Any:
        """A failure's trajectory encoded and put in the object store once for all its role calls (the
        judge's locate and k scores, the expert's rewrite), kept for the `SHARED` latest failures. Keyed
        by the object, which the cache holds, so a key is never another trajectory's."""
        with self._lock:
            held = self._refs.pop(id(traj), None)
            if held is None:
                held = (traj, self.rollouts.put(encode(traj)))
            self._refs[id(traj)] = held  # the latest last
            while len(self._refs) > SHARED:
                self._refs.pop(next(iter(self._refs)))
            return held[1]

    @staticmethod
    def _pool(pool: RolePool | None, role: str) -> RolePool:
        if pool is None:
            raise missing(role)
        return pool


@dataclass(frozen=True)
class StoreTrainer:
    """Trains adapters on the store's datasets (`coevolve.services.training.train_adapter`) and
    registers them there; an adapter the store already has (trained before a crash that came before
    its cell was journaled) is not trained again."""

    store: HarnessStore
    base: str
    backend: str
    config: dict[str, Any] = field(default_factory=dict)

    def train(self, dataset: str, adapter_id: str) -> dict[str, Any]:
        from coevolve.services.training import train_adapter
        from coevolve.store.datasets import read_manifest

        if any(a.id == adapter_id for a in self.store.list_adapters()):
            return {"reused": True}
        ref = train_adapter(read_manifest(self.store.root, dataset), self.base, adapter_id, dict(self.config), self.store,
                            self.backend)
        return {"metrics": ref.metrics}
