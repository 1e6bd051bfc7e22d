"""Harness evolution: the meta-agent's loop, its proposer and acceptance rules.

Pure logic (no Ray): rollouts come through an `Evaluator`, model calls through a `complete` callable.
"""

from coevolve.agents.meta.acceptance import BootstrapTest, PairedResult, SignTest, make_rule
from coevolve.agents.meta.loop import Budget, EvolveConfig, EvolveResult, HarnessEvolution
from coevolve.agents.meta.proposer import LLMProposer, Proposal
from coevolve.agents.meta.race import RaceEvolution, make_evolution

__all__ = [
    "BootstrapTest",
    "Budget",
    "EvolveConfig",
    "EvolveResult",
    "HarnessEvolution",
    "LLMProposer",
    "PairedResult",
    "Proposal",
    "RaceEvolution",
    "SignTest",
    "make_evolution",
    "make_rule",
]
