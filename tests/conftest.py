"""Shared fixtures. Ray tests share one session-scoped local cluster (never `ray.init` ad hoc).

Hypothesis profiles. Every hypothesis test inherits the loaded one; the fuzz tests (test_fuzz.py) take
all of it, the property tests of test_codec.py and test_families.py fix their own `max_examples` and take
the rest (derandomisation, database):

- `ci` (the default, and what `make test` selects with `--hypothesis-profile=ci`): derandomised, so
  every run draws the same 60 cases per test and CI passes or fails the same way each time; no example
  database (a fresh clone and a warm checkout behave alike); a failure prints its reproduction blob.
- `slow` (`make test-slow`): randomised, 300 cases per test, new draws each run; failures found are
  kept in `.hypothesis/` and replayed first next time.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
# Three test workers share two cores, each with its own Ray and its actors' imports (litellm alone is
# seconds of CPU): actors may take minutes to start, which is load, not a failure. Tests of the timeout
# set their own.
os.environ.setdefault("COEVOLVE_ACTOR_READY_TIMEOUT_S", "600")

# The fuzz tests draw inside function-scoped fixtures and some cases are slow (a CLI invocation, a rollout).
SUPPRESSED_HEALTH_CHECKS = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
settings.register_profile(
    "ci", derandomize=True, database=None, print_blob=True, max_examples=60, deadline=None,
    suppress_health_check=SUPPRESSED_HEALTH_CHECKS,
)
settings.register_profile(
    "slow", derandomize=False, print_blob=True, max_examples=300, deadline=None,
    suppress_health_check=SUPPRESSED_HEALTH_CHECKS,
)
# Loaded here, before any test module builds its settings; `--hypothesis-profile` (the hypothesis pytest
# plugin, which configures after this file is imported) overrides it.
settings.load_profile("ci")


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray for the whole test session, started through coevolve/cluster/ like the CLI does."""
    from coevolve.cluster.runtime import start_ray, stop_ray

    start_ray(address=None, num_cpus=2)
    yield
    stop_ray()


@pytest.fixture()
def store(tmp_path):
    from coevolve.store.store import HarnessStore

    return HarnessStore(tmp_path / "store")


def pytest_configure(config):
    from coevolve.services.logs import configure_logging

    configure_logging(json_lines=False, level="warning")
