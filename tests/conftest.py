"""Shared fixtures. Ray tests share one session-scoped local cluster (never `ray.init` ad hoc)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray for the whole test session, started through cluster/ like the CLI does."""
    from cluster.runtime import start_ray, stop_ray

    start_ray(address=None, num_cpus=2)
    yield
    stop_ray()


@pytest.fixture()
def store(tmp_path):
    from harness_store.store import HarnessStore

    return HarnessStore(tmp_path / "store")


def pytest_configure(config):
    from services.logs import configure_logging

    configure_logging(json_lines=False, level="warning")
