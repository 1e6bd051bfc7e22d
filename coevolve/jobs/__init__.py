"""Jobs the CLI runs: validate everything first, then start Ray, run, and record in the store.

One module a job: `eval` (and `reference`, the reference solver's row), `evolve` (with the held-out
comparison and edit usage), `transfer`, `adapt` (datasets, adapters), `experiment` (the protocol),
`report` (the HTML report), `meta_agent` (the co-evolution actor). Their shared parts: `validate` (input
checks), `signals` (stopping a job on SIGINT/SIGTERM) and `runtime` (the store the actors find, Ray,
the rollout actors).
"""

from __future__ import annotations

from coevolve.jobs.eval import EvalRequest, run_eval, validate_eval
from coevolve.jobs.evolve import held_out_comparison, run_evolve
from coevolve.jobs.reference import reference_result
from coevolve.jobs.runtime import use_store
from coevolve.jobs.signals import interruption, stop_on_signals
from coevolve.jobs.transfer import run_transfer
from coevolve.jobs.validate import (
    check_workers,
    litellm_providers,
    parse_params,
    validate_model,
)
from coevolve.tasks import check_params

__all__ = [
    "EvalRequest",
    "check_params",
    "check_workers",
    "held_out_comparison",
    "interruption",
    "litellm_providers",
    "parse_params",
    "reference_result",
    "run_eval",
    "run_evolve",
    "run_transfer",
    "stop_on_signals",
    "use_store",
    "validate_eval",
    "validate_model",
]
