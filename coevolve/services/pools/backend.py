"""`coevolve.agents.backend.Backend` on the cluster: `RayBackend` runs rollouts and replays on the
executor pool, the judge's and the expert's calls on their role pools, the proposer through this
process's gateway and training through a `Trainer` (`StoreTrainer`: the store's datasets, the one
training interface)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from coevolve.agents.backend import CycleRoles, Job, Rollouts, Trainer, Usage, missing
from coevolve.agents.meta.proposer import LLMProposer
from coevolve.codec import decode, encode
from coevolve.services.gateway import Gateway
from coevolve.services.pools.roles import RolePool
from coevolve.services.pools.rollouts import PoolEvaluator, RolloutPool
from coevolve.store.store import HarnessStore
from coevolve.values import FailureLocus, Harness, Trajectory


class RayBackend(CycleRoles):
    """`evaluate`: what runs a batch of rollouts (default: the executor pool; e.g. the pool's wrapped in
    a meter); `proposer`: the proposer's model, called through a gateway in this process."""

    def __init__(self, rollouts: RolloutPool, judges: RolePool | None = None, experts: RolePool | None = None, *,
                 proposer: str | None = None, trainer: Trainer | None = None, evaluate: Rollouts | None = None):
        template = None
        if proposer is not None:
            gateway = Gateway()
            template = LLMProposer(proposer, gateway.complete, windows=gateway.budget)
        super().__init__(template, trainer)
        self.rollouts = rollouts
        self.judges = judges
        self.experts = experts
        self._evaluate = evaluate or PoolEvaluator(rollouts).evaluate

    def evaluate(self, jobs: Sequence[Job], model: str) -> list[Trajectory]:
        return self._evaluate(jobs, model)

    def replay(self, traj: Trajectory, harness: Harness, turn: int, forced: dict[str, Any]) -> Trajectory:
        return self.rollouts.replay(traj, harness, turn, forced)

    def locate(self, traj: Trajectory) -> tuple[FailureLocus, Usage]:
        locus, used = self._pool(self.judges, "judge").call("locate", encode(traj))
        return decode(locus), used

    def rewrite(self, traj: Trajectory, locus: FailureLocus, k: int) -> tuple[list[dict[str, Any]], Usage]:
        return self._pool(self.experts, "expert").call("rewrite", encode(traj), encode(locus), k)

    def score(self, traj: Trajectory, locus: FailureLocus, candidate: dict[str, Any]) -> tuple[dict[str, Any], Usage]:
        return self._pool(self.judges, "judge").call("score", encode(traj), encode(locus), candidate)

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
