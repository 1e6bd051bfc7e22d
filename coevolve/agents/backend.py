"""The seam between the roles' logic and what runs it: `Backend`, everything a dataset build
(`coevolve.agents.correction`) and the co-evolution's steps (`coevolve.pipeline`) ask of
their surroundings. Two implementations: in this process (`coevolve.agents.local.LocalBackend`, for
tests, benches and quick runs) and on Ray (`coevolve.services.pools.backend.RayBackend`).

Each role call returns its result and the model usage it cost (`RoleUsage.as_json()`), so spend is
counted once however often a call is retried. The expert and the proposer consult the handbook of the
family they work on: a backend holds one role and makes its per-family copies (`PerFamily`).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar

from coevolve.agents.meta.proposer import LLMProposer
from coevolve.tasks import get_family
from coevolve.values import FailureLocus, Harness, TaskInstance, Trajectory

Job = tuple[TaskInstance, Harness, int]  # one rollout: instance, harness, seed
Rollouts = Callable[[Sequence[Job], str], list[Trajectory]]  # jobs, model -> trajectories in job order
CallUsage = dict[str, Any]  # the model usage one role call cost


class Trainer(Protocol):
    """Trains an adapter on a stored dataset; returns what the adapter cell records of it."""

    def train(self, dataset: str, adapter_id: str) -> dict[str, Any]: ...


class Backend(Protocol):
    """What the roles' logic needs from its surroundings. A backend built without a role (no judge,
    expert, proposer or trainer) refuses the calls that need it."""

    def evaluate(self, jobs: Sequence[Job], model: str) -> list[Trajectory]:
        """One rollout per job, in job order."""

    def replay(self, traj: Trajectory, harness: Harness, turn: int, forced: dict[str, Any]) -> Trajectory:
        """`traj` resumed with `forced` as its assistant turn `turn` (the replay check)."""

    def locate(self, traj: Trajectory) -> tuple[FailureLocus, CallUsage]:
        """The judge: the turn where a failed rollout went wrong."""

    def rewrite(self, traj: Trajectory, locus: FailureLocus, k: int) -> tuple[list[dict[str, Any]], CallUsage]:
        """The expert, with the handbook of the rollout's family: k candidates for the failing turn."""

    def score(self, traj: Trajectory, locus: FailureLocus, candidate: dict[str, Any]) -> tuple[dict[str, Any], CallUsage]:
        """The judge: a candidate turn's verdict (`valid`, `score`, `why`)."""

    def proposer(self, family: str) -> LLMProposer:
        """The meta-agent's proposer, with `family`'s handbook."""

    def train(self, dataset: str, adapter_id: str) -> dict[str, Any]:
        """An adapter trained on a stored dataset (what the adapter cell records of it)."""


R = TypeVar("R")


class PerFamily(Generic[R]):
    """Copies of one role (an expert rewriter, a proposer: anything with a `handbook`), one per family,
    each consulting its own family's handbook; made on first use, then reused."""

    def __init__(self, role: R):
        self.role = role
        self._copies: dict[str, R] = {}
        self._lock = threading.Lock()

    def __call__(self, family: str) -> R:
        with self._lock:
            if family not in self._copies:
                role = copy.copy(self.role)
                role.handbook = get_family(family).handbook  # type: ignore[attr-defined]
                self._copies[family] = role
            return self._copies[family]


class CycleRoles:
    """The part of a `Backend` the co-evolution cycles add, alike in every backend: the proposer (a copy
    per family, with its handbook) and the trainer."""

    def __init__(self, proposer: LLMProposer | None = None, trainer: Trainer | None = None):
        self._proposers = PerFamily(proposer) if proposer is not None else None
        self.trainer = trainer

    def proposer(self, family: str) -> LLMProposer:
        if self._proposers is None:
            raise missing("proposer")
        return self._proposers(family)

    def train(self, dataset: str, adapter_id: str) -> dict[str, Any]:
        if self.trainer is None:
            raise missing("trainer")
        return self.trainer.train(dataset, adapter_id)


def missing(role: str) -> ValueError:
    """The error of a call to a role the backend was built without."""
    return ValueError(f"this backend has no {role}")
