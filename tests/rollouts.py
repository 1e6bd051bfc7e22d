"""In-process rollouts for family, executor and meta-loop tests: the real executor and the real
litellm gateway, without Ray (the pool has its own tests)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from coevolve.agents.local import LocalEvaluator
from coevolve.services.gateway import Gateway
from coevolve.values import Harness, TaskInstance, Trajectory

_GATEWAY = Gateway()


class InProcessEvaluator(LocalEvaluator):
    def __init__(self, concurrency: int = 32):
        super().__init__(_GATEWAY, concurrency)


def rollout_all(
    instances: Sequence[TaskInstance], harness: Harness, model: str, seed: int = 0, concurrency: int = 32
) -> list[Trajectory]:
    return InProcessEvaluator(concurrency).evaluate([(i, harness, seed) for i in instances], model)


def pass_rate(trajectories: Sequence[Trajectory]) -> float:
    return sum(t.passed for t in trajectories) / len(trajectories)


def proposer_complete(model, messages, tools, seed):
    return _GATEWAY.complete(model, messages, tools, seed=seed)


@dataclass(frozen=True)
class FunctionClient:
    """A role client (`coevolve.llm.contract.RoleClient`) over a complete function (recorded replies, spies,
    the gateway): budgets from `windows`, the gateway's lookup unless given."""

    fn: Callable[..., Any]
    windows: Callable[[str, str], Any] = Gateway.budget

    def complete(self, model, messages, tools, seed=0):
        return self.fn(model, messages, tools, seed)

    def budget(self, model, role):
        return self.windows(model, role)
