"""The meta-agent as one detached, named Ray actor (docs/ARCHITECTURE.md §4): it runs a co-evolution run
(`coevolve.pipeline.CoEvolution`) with the executor pool, the judge and expert pools and the
trainer, records everything in the store, and answers `status()` and `stop()` while it works.
Closing the client that started it does not stop it; `coevolve run --resume RUN_ID` starts a new one
that continues from the store.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Sequence
from typing import Any

import ray
import structlog

from coevolve.services.logs import configure_logging
from coevolve.settings import export, variable

NAMESPACE = "coevolve"
log = structlog.get_logger(role="meta")


def actor_name(run_id: str) -> str:
    return f"meta-{run_id}"


class _Meter:
    """Counts rollouts, in-flight work and throughput for status()."""

    def __init__(self) -> None:
        self.rollouts = 0
        self.in_flight = 0
        self.started = time.monotonic()
        self.lock = threading.Lock()

    def wrap(self, evaluate: Any) -> Any:
        def run(jobs: Sequence[Any], model: str) -> Any:
            with self.lock:
                self.in_flight += len(jobs)
            try:
                out = evaluate(jobs, model)
            finally:
                with self.lock:
                    self.in_flight -= len(jobs)
            with self.lock:
                self.rollouts += len(out)
            return out

        return run

    def as_json(self) -> dict[str, Any]:
        elapsed = max(1e-9, time.monotonic() - self.started)
        return {"rollouts": self.rollouts, "in_flight": self.in_flight, "rollouts_per_s": round(self.rollouts / elapsed, 2)}


class MetaAgent:
    """Plain class; `launch` makes it a detached named actor."""

    def __init__(self, profile: dict[str, Any], store_path: str, run_id: str) -> None:
        from coevolve.config import RunProfile

        configure_logging()
        export(store=store_path)
        self.profile = RunProfile.model_validate(profile)
        self.store_path = store_path
        self.run_id = run_id
        self.state: dict[str, Any] = {"stage": "created", "run_id": run_id, "pid": os.getpid(), "host": socket.gethostname()}
        self.meter = _Meter()
        self.pools: dict[str, Any] = {}
        self.thread: threading.Thread | None = None

    def ready(self) -> int:
        return os.getpid()

    def start(self) -> bool:
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="coevolve-meta", daemon=True)
            self.thread.start()
        return True

    def status(self) -> dict[str, Any]:
        pools = {name: {"actors": len(p.actors), "replacements": p.replacements, **p.load.as_json(list(p.actors))}
                 for name, p in list(self.pools.items())}
        return {**self.state, "work": self.meter.as_json(), "pools": pools, "alive": bool(self.thread and self.thread.is_alive()),
                "train_backend": self.profile.train.backend}

    def stop(self) -> bool:
        from coevolve.store.store import HarnessStore

        HarnessStore(self.store_path).append_event(self.run_id, "stop", {"at": time.time(), "by": "stop()"})
        self.state["stop_requested"] = True
        return True

    # ------------------------------------------------------------------ the run
    def _run(self) -> None:
        from coevolve.store.store import HarnessStore

        store = HarnessStore(self.store_path)
        try:
            lease = store.claim_run(self.run_id)
        except Exception as e:  # noqa: BLE001 — reported through status(), the actor stays up for it
            self.state.update(stage="refused", error=str(e))
            return
        try:
            result = self._cycles(store)
            from coevolve.jobs.report import write_run_report

            html, md = write_run_report(store, self.run_id, result)
            result["report"] = {"html": str(html), "markdown": str(md)}
            store.finish_run(self.run_id, "done", result)
            self.state.update(stage="done", result=result)
        except BaseException as e:
            log.exception("meta-agent failed", run_id=self.run_id)
            store.update_run(self.run_id, status="failed", result={"error": f"{type(e).__name__}: {e}"})
            self.state.update(stage="failed", error=f"{type(e).__name__}: {e}")
        finally:
            for p in self.pools.values():
                p.shutdown()
            self.pools.clear()
            lease.release()

    def _cycles(self, store: Any) -> dict[str, Any]:
        from coevolve.pipeline import CoEvolution
        from coevolve.services.pools.backend import RayBackend, StoreTrainer
        from coevolve.services.pools.base import start_pools
        from coevolve.services.pools.roles import RolePool
        from coevolve.services.pools.rollouts import PoolEvaluator, RolloutPool

        p = self.profile
        executor, judges, experts = start_pools(
            lambda: RolloutPool(p.weak.workers, num_cpus=p.weak.num_cpus, resources=p.weak.resources or None,
                                max_in_flight=p.weak.in_flight),
            lambda: RolePool("judge", p.judge.model, p.judge.workers, num_cpus=p.judge.num_cpus,
                             resources=p.judge.resources or None),
            lambda: RolePool("expert", p.expert.model, p.expert.workers, num_cpus=p.expert.num_cpus,
                             resources=p.expert.resources or None),
        )
        self.pools.update(executor=executor, judge=judges, expert=experts)
        trainer = StoreTrainer(store, p.train.base or p.weak.model, p.train.backend, p.train.train_config())
        backend = RayBackend(executor, judges, experts, proposer=p.proposer, trainer=trainer,
                             evaluate=self.meter.wrap(PoolEvaluator(executor).evaluate))
        run = CoEvolution(p, store, self.run_id, backend,
                          stop_requested=lambda: stop_requested(store, self.run_id),
                          on_status=lambda s: self.state.update(s))
        return run.run()


def launch(profile: dict[str, Any], store_path: str, run_id: str) -> Any:
    """Start the detached meta-agent actor for a run (Ray must be initialised)."""
    from coevolve.services.pools.base import worker_env

    env = {variable("store"): store_path}
    if profile.get("context_windows"):
        env[variable("context_windows")] = context_windows_setting(profile["context_windows"])
    actor = ray.remote(MetaAgent).options(
        name=actor_name(run_id), namespace=NAMESPACE, lifetime="detached", max_concurrency=8, num_cpus=0,
        runtime_env={"env_vars": worker_env(env)},
    ).remote(profile, store_path, run_id)
    ray.get(actor.ready.remote(), timeout=120)
    ray.get(actor.start.remote())
    return actor


def context_windows_setting(windows: dict[str, int]) -> str:
    """COEVOLVE_CONTEXT_WINDOWS for a run's actors: the profile's windows, then the client's setting for the
    models the profile does not name."""
    from coevolve.services.context_windows import WINDOWS_ENV, _pairs

    merged = {**_pairs(WINDOWS_ENV), **{k: str(v) for k, v in windows.items()}}
    return ",".join(f"{k}={v}" for k, v in sorted(merged.items()))


def stop_requested(store: Any, run_id: str) -> bool:
    """A `coevolve stop` since the run was last started or resumed (a resume answers the stops before it)."""
    kinds = [e.kind for e in store.events(run_id) if e.kind in ("stop", "resume")]
    return bool(kinds) and kinds[-1] == "stop"


def at_work(actor: Any) -> bool:
    """Whether a run's meta-agent actor is still running the run (not one whose attempt failed or ended)."""
    try:
        return bool(ray.get(actor.status.remote(), timeout=30).get("alive"))
    except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
        return False


def find(run_id: str) -> Any | None:
    """The run's meta-agent actor, if it is alive."""
    try:
        return ray.get_actor(actor_name(run_id), namespace=NAMESPACE)
    except ValueError:
        return None
