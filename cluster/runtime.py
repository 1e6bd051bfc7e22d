"""The only place that starts or attaches to Ray (DESIGN §2)."""

from __future__ import annotations

import os
from pathlib import Path

import structlog

log = structlog.get_logger(role="cluster")

_DEFAULT_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_DEDUP_LOGS": "0",
}


def start_ray(address: str | None = None, num_cpus: int | None = None) -> None:
    """Start an embedded local Ray (address None) or attach to a running cluster."""
    import ray

    if ray.is_initialized():
        return
    from services.serving import apply_serve_env_defaults

    for k, v in _DEFAULT_ENV.items():
        os.environ.setdefault(k, v)
    apply_serve_env_defaults()  # Serve's timeouts are read from the environment its processes inherit
    if address is None:
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    project_root = str(Path(__file__).resolve().parent.parent)
    env_vars = {k: os.environ[k] for k in (*_DEFAULT_ENV, "RAY_AUTH_MODE") if k in os.environ}
    runtime_env = {"env_vars": env_vars}
    if address is not None:
        # Workers on a remote cluster may not have the project installed: ship the code.
        runtime_env["working_dir"] = project_root
        runtime_env["excludes"] = [".venv", ".git", ".coevolve", "*.safetensors"]
    ray.init(
        address=address,
        num_cpus=num_cpus if address is None else None,
        include_dashboard=False,
        log_to_driver=True,
        runtime_env=runtime_env,
        logging_level="WARNING",
    )
    log.info("ray started" if address is None else "ray attached", address=address or "local")


def stop_ray() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()
