"""Harness evolution: the meta-agent's loop, its proposer, acceptance rules and edit-usage tracking.

Pure logic (no Ray): rollouts come through an `Evaluator`, model calls through a `complete` callable.
"""

from agents.meta.acceptance import BootstrapTest, PairedResult, SignTest, make_rule
from agents.meta.loop import Budget, EvolveConfig, EvolveResult, HarnessEvolution
from agents.meta.proposer import LLMProposer, Proposal
from agents.meta.usage import edit_usage

__all__ = [
    "BootstrapTest",
    "Budget",
    "EvolveConfig",
    "EvolveResult",
    "HarnessEvolution",
    "LLMProposer",
    "PairedResult",
    "Proposal",
    "SignTest",
    "edit_usage",
    "make_rule",
]
