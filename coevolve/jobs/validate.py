"""Input checks a job makes before it writes anything: rollout workers, model refs, family parameters;
each refusal says in one line what is wrong."""

from __future__ import annotations

import contextlib
import functools
import os
from pathlib import Path
from typing import Any

from coevolve.errors import BadInput
from coevolve.settings import environment
from coevolve.values import ModelRef


def check_workers(workers: int, address: str | None) -> None:
    """An embedded Ray has this machine's CPUs: refuse more rollout actors than it can place, before
    anything runs. (On an attached cluster, which may scale up, the pool's readiness timeout decides.)"""
    if workers <= 0:
        raise BadInput(f"--workers must be positive, got {workers}")
    if address is not None:
        from coevolve.cluster.runtime import check_reachable, check_token

        check_token(address)  # no token for the cluster: say so now, not after the store is opened
        check_reachable(address)  # nothing listening there: say so now, not after minutes of retries
        return
    from coevolve.services.pools.rollouts import WORKER_CPUS

    try:
        from ray._private.utils import get_num_cpus  # what ray.init will detect (cgroup quotas included)

        cpus = float(get_num_cpus())
    except (ImportError, AttributeError):
        cpus = float(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    need = workers * WORKER_CPUS
    if need > cpus:
        fit = int(cpus // WORKER_CPUS)
        raise BadInput(
            f"--workers {workers} asks for {need:g} CPUs ({WORKER_CPUS:g} each) but the embedded Ray has {cpus:g}: "
            f"use --workers {fit} or fewer, or attach to a larger cluster with --address"
        )


def validate_model(model: str) -> None:
    ref = ModelRef.parse(model)
    if ref.provider == "synthetic":
        from coevolve.testbed.policy import PROFILES

        if ref.model not in PROFILES:
            raise BadInput(f"unknown synthetic model {ref.model!r} (models: {', '.join(PROFILES)})")
        if ref.adapter:
            # where coevolve.testbed.provider reads it; looked at first, as importing that module imports
            # litellm (10+ CPU seconds) just to say the adapter is not there
            path = Path(environment().store) / "adapters" / ref.adapter / "synthetic_adapter.json"
            if not path.is_file():
                raise BadInput(f"synthetic adapter {ref.adapter!r} not found at {path}")
            from coevolve.testbed.provider import load_synthetic_adapter

            load_synthetic_adapter(ref.adapter)
        return
    if ref.provider == "vllm":
        _validate_served(ref)
        return
    if ref.provider not in litellm_providers():
        raise BadInput(f"unknown model provider {ref.provider!r} in {model!r}")


@functools.cache
def litellm_providers() -> frozenset[str]:
    """The provider names litellm routes (`litellm.provider_list`, which is `list(LlmProviders)`), read
    from that enum's source: importing litellm takes 10+ CPU seconds, too long to refuse a typo in.
    Imported after all if the source cannot be read that way."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec("litellm")
    with contextlib.suppress(AttributeError, TypeError, OSError, SyntaxError, StopIteration):
        tree = ast.parse((Path(spec.origin).parent / "types" / "utils.py").read_text())
        enum = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "LlmProviders")
        names = {a.value.value for a in enum.body
                 if isinstance(a, ast.Assign) and isinstance(a.value, ast.Constant) and isinstance(a.value.value, str)}
        if names:
            return frozenset(names)
    import litellm

    return frozenset(str(p.value) if hasattr(p, "value") else str(p) for p in litellm.provider_list)


def _validate_served(ref: ModelRef) -> None:
    """A `vllm/<model>[@adapter]` ref must name a model a running server serves (and an adapter it can
    load): the server from $COEVOLVE_SERVE_URL or the store's serve.json, asked for its model list."""
    from coevolve.services.serving.app import (
        SERVE_URL_ENV,
        ServingError,
        probe,
        read_state,
        serve_url,
        served_model_name,
        state_path,
    )

    try:
        url = serve_url()
    except ServingError as e:
        raise BadInput(f"model {ref}: {e}") from None
    listed = probe(url, timeout=5.0)
    where = f"${SERVE_URL_ENV}" if environment().serve_url else str(state_path())
    if listed is None:
        raise BadInput(f"model {ref}: no vLLM server answers at {url} (from {where}); start one: coevolve serve --config ...")
    served = sorted(m for m in listed if ":" not in m)  # base models; adapters are listed as model:adapter
    if ref.model not in listed:
        raise BadInput(f"model {ref}: {ref.model!r} is not served at {url} (served: {', '.join(served) or 'none'})")
    if ref.adapter and served_model_name(ref) not in listed:
        state = read_state() or {}
        adapters = Path(state.get("adapters_dir") or Path(environment().store) / "adapters")
        if not (adapters / ref.adapter).is_dir():
            raise BadInput(f"model {ref}: no adapter {ref.adapter!r} in {adapters} (register it: coevolve models register ...)")


def parse_params(text: str) -> tuple[tuple[str, Any], ...]:
    """`size=0,difficulty=1` -> (("difficulty", 1), ("size", 0)); integers only (every family's
    parameters are); ValueError with one line otherwise."""
    out: dict[str, int] = {}
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key:
            raise BadInput(f"--params item {item!r} is not key=value (e.g. --params size=0,difficulty=1)")
        if key in out:
            raise BadInput(f"--params names {key!r} twice")
        try:
            out[key] = int(value)
        except ValueError:
            raise BadInput(f"--params {key}={value!r}: not an integer") from None
    return tuple(sorted(out.items()))



def resumed_run(store: Any, run_id: str, kind: str, what: str) -> Any:
    """The stored run `--resume` names, refused unless it is a `kind` run (`what` names the kind in the
    error line, e.g. "an evolve run")."""
    run = store.get_run(run_id)
    if run.kind != kind:
        raise BadInput(f"run {run_id!r} is a {run.kind} run, not {what}")
    return run
