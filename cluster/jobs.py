"""Jobs the CLI runs: validate everything first, then start Ray, run, and record in the store."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from agents.report import failure_causes, summarise
from harness_store.values import EvalSummary, Harness, ModelRef, TaskInstance


@dataclass(frozen=True)
class EvalRequest:
    family: str
    split: str
    n: int
    harness: str
    model: str
    workers: int
    seed: int
    address: str | None


@dataclass(frozen=True)
class EvalPlan:
    request: EvalRequest
    store_path: Path
    families: tuple[str, ...]
    harnesses: dict[str, Harness]  # family -> harness
    baseline: dict[str, bool]  # family -> harness is the family baseline (alias it on store)
    instances: dict[str, list[TaskInstance]]


@dataclass(frozen=True)
class EvalResult:
    run_id: str
    summary: EvalSummary
    causes: dict[str, int]
    seconds: float

    def as_json(self) -> dict[str, Any]:
        s = self.summary
        return {
            "run_id": self.run_id,
            "family": s.family,
            "split": s.split,
            "model": s.model,
            "harness_id": s.harness_id,
            "seed": s.seed,
            "n": s.n,
            "passed": s.passed,
            "pass_rate": round(s.pass_rate, 4),
            "errors": s.errors,
            "mean_turns": s.mean_turns,
            "total_tokens": s.total_tokens,
            "cost_usd": s.cost_usd,
            "failure_causes": self.causes,
            "seconds": round(self.seconds, 2),
        }


def validate_model(model: str) -> None:
    ref = ModelRef.parse(model)
    if ref.provider == "synthetic":
        from agents.synthetic import PROFILES

        if ref.model not in PROFILES:
            raise ValueError(f"unknown synthetic model {ref.model!r} (models: {', '.join(PROFILES)})")
        if ref.adapter:
            from services.synthetic_provider import load_synthetic_adapter

            load_synthetic_adapter(ref.adapter)
        return
    if ref.provider == "vllm":
        return
    import litellm

    if ref.provider not in {str(p.value) if hasattr(p, "value") else str(p) for p in litellm.provider_list}:
        raise ValueError(f"unknown model provider {ref.provider!r} in {model!r}")


def validate_eval(req: EvalRequest, store_path: Path) -> EvalPlan:
    """Check every input; raise ValueError/StoreError with one clear line. Writes nothing."""
    from harness_store.store import HarnessStore
    from tasks import family_names, get_family

    if req.n <= 0:
        raise ValueError(f"--n must be positive, got {req.n}")
    if req.workers <= 0:
        raise ValueError(f"--workers must be positive, got {req.workers}")
    families = tuple(family_names()) if req.family == "all" else (req.family,)
    fams = {f: get_family(f) for f in families}  # unknown family -> ValueError
    validate_model(req.model)
    existing = store_path.exists()
    store = HarnessStore(store_path, create=False) if existing else None
    harnesses: dict[str, Harness] = {}
    baseline: dict[str, bool] = {}
    instances: dict[str, list[TaskInstance]] = {}
    for name, fam in fams.items():
        if req.harness == "baseline":
            harnesses[name], baseline[name] = fam.baseline_harness(), True
        else:
            if store is None:
                raise ValueError(f"unknown harness {req.harness!r}: the store {store_path} does not exist yet")
            harnesses[name], baseline[name] = store.resolve_harness(req.harness, name), False
        instances[name] = fam.generate(req.split, req.n, seed=req.seed)
    return EvalPlan(req, store_path, families, harnesses, baseline, instances)


def run_eval(plan: EvalPlan, progress: bool = True) -> list[EvalResult]:
    from cluster.runtime import start_ray
    from harness_store.store import HarnessStore
    from services.pool import RolloutJob, RolloutPool

    req = plan.request
    store = HarnessStore(plan.store_path, create=True)
    start_ray(req.address)
    pool = RolloutPool(req.workers)
    results = []
    try:
        for fam in plan.families:
            h = plan.harnesses[fam]
            store.put_harness(h, rationale="family baseline" if plan.baseline[fam] else "")
            if plan.baseline[fam]:
                store.set_alias(f"{fam}:baseline", h.id)
            config = {
                "family": fam, "split": req.split, "n": req.n, "harness_id": h.id, "model": req.model,
                "seed": req.seed, "workers": req.workers,
            }
            run_id = store.create_run("eval", config)
            log = structlog.get_logger(role="eval", run_id=run_id, harness_id=h.id[:12])
            log.info("eval started", family=fam, model=req.model, n=req.n)
            started = time.perf_counter()
            try:
                jobs = [RolloutJob(i, h, req.model, req.seed) for i in plan.instances[fam]]
                trajs = pool.run(jobs, progress=progress, description=f"{fam} {req.model}")
                store.put_trajectories(run_id, trajs)
                summary = summarise(trajs, split=req.split, seed=req.seed)
                res = EvalResult(run_id, summary, failure_causes(trajs), time.perf_counter() - started)
                store.finish_run(run_id, "done", res.as_json())
            except BaseException as e:
                store.finish_run(run_id, "failed", {"error": f"{type(e).__name__}: {e}"})
                raise
            log.info("eval done", pass_rate=summary.pass_rate)
            results.append(res)
    finally:
        pool.shutdown()
    return results
