"""What a job runs on: the store its actors find, Ray with our stop handlers back, and the rollout actors,
shut down however the job ends."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from coevolve.jobs.signals import install_handlers
from coevolve.settings import environment, export


def use_store(store_path: Path) -> None:
    """Model providers (synthetic adapters) and pool actors find the store through the environment."""
    export(store=str(Path(store_path).resolve()))


def start_ray(address: str | None) -> None:
    """Start or attach to Ray; then our stop handlers again (Ray replaces SIGTERM's) and, when logs are
    JSON lines, worker lines re-emitted as JSON (coevolve.services.logs), or kept in Ray's log files if that
    hook is missing."""
    from coevolve.cluster import runtime
    from coevolve.services.logs import forward_worker_logs_as_json

    json_logs = environment().log_json == "1"
    try:
        from ray._private.ray_logging import global_worker_stdstream_dispatcher  # noqa: F401
        can_forward = True
    except ImportError:
        can_forward = False
    runtime.start_ray(address, log_to_driver=can_forward or not json_logs)
    install_handlers()
    if json_logs and can_forward:
        forward_worker_logs_as_json()


@contextmanager
def rollout_pool(address: str | None, workers: int, max_in_flight: int | None = None) -> Iterator[Any]:
    """Ray started (`start_ray`) and a `RolloutPool` of `workers` actors for the block, shut down
    however the block ends."""
    from coevolve.services.pools.rollouts import RolloutPool

    start_ray(address)
    pool = RolloutPool(workers, max_in_flight=max_in_flight)
    try:
        yield pool
    finally:
        pool.shutdown()
