"""Harness evolution: the meta-agent's loop, its proposer and acceptance rules.

Pure logic (no Ray): rollouts come through an `Evaluator`, model calls through a `complete` callable.
"""

from coevolve.agents.meta.loop import Budget, EvolveConfig, HarnessEvolution
from coevolve.agents.meta.proposer import LLMProposer
from coevolve.agents.meta.race import RaceEvolution, make_evolution

__all__ = ["Budget", "EvolveConfig", "HarnessEvolution", "LLMProposer", "RaceEvolution", "make_evolution"]
