"""Ray actor pools: the executor pool (`rollouts`), the judge and expert pools (`roles`), both on the one
actor lifecycle (`base.ActorPool`), and the Ray `Backend` over them (`backend`)."""

from coevolve.services.pools.backend import RayBackend, StoreTrainer
from coevolve.services.pools.base import ActorPool, ActorsNotReady, Load, Worker, avoiding, worker_env
from coevolve.services.pools.roles import RolePool, RoleWorker
from coevolve.services.pools.rollouts import PoolEvaluator, RolloutJob, RolloutPool, RolloutWorker

__all__ = [
    "ActorPool", "ActorsNotReady", "Load", "PoolEvaluator", "RayBackend", "RolePool", "RoleWorker", "RolloutJob",
    "RolloutPool", "RolloutWorker", "StoreTrainer", "Worker", "avoiding", "worker_env",
]
