"""One pipeline, two schedules: the co-evolution's steps (`steps.Steps`: evolve, build, train, measure,
accept, each a journal cell) and the meta-agent's cycle schedule (`cycle.CoEvolution`); the reference
study's grid schedule (`coevolve.jobs.experiment.Experiment`) runs the same steps."""

from coevolve.pipeline.cycle import CoEvolution
from coevolve.pipeline.steps import SEED_TEST, InfraFailure, Models, Steps

__all__ = ["SEED_TEST", "CoEvolution", "InfraFailure", "Models", "Steps"]
