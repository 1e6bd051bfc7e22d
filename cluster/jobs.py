"""Jobs the CLI runs: validate everything first, then start Ray, run, and record in the store."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from agents.report import TESTBED_NOTICE, failure_causes, summarise
from agents.stats import PassRate, pass_rate
from harness_store.values import EvalSummary, Harness, ModelRef, TaskInstance


@dataclass(frozen=True)
class EvalRequest:
    family: str
    split: str
    n: int
    harness: str
    models: tuple[str, ...]
    workers: int
    seed: int
    address: str | None
    reference: bool = False  # also score each family's reference solver
    repeats: int = 1  # rollouts per instance, at seeds seed, seed+1, ...


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
    rate: PassRate
    repeats: int = 1

    def as_json(self) -> dict[str, Any]:
        s = self.summary
        rate = self.rate.as_json()
        out = {
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
            "repeats": self.repeats,
            "pass_at_1": rate["pass_at_1"],
            "ci95": rate["ci95"],
            "boundary_share": rate["boundary_share"],
            "per_instance": rate["per_instance"],
            "pass_hat_k": {str(k): round(self.rate.pass_hat_k(k), 4) for k in range(1, self.repeats + 1)},
        }
        if s.model.startswith("synthetic/"):
            out["notice"] = TESTBED_NOTICE
        return out


def use_store(store_path: Path) -> None:
    """Model providers (synthetic adapters) and pool actors find the store through the environment."""
    import os

    os.environ["COEVOLVE_STORE"] = str(Path(store_path).resolve())


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
    if req.repeats <= 0:
        raise ValueError(f"--repeats must be positive, got {req.repeats}")
    if req.workers <= 0:
        raise ValueError(f"--workers must be positive, got {req.workers}")
    families = tuple(family_names()) if req.family == "all" else (req.family,)
    fams = {f: get_family(f) for f in families}  # unknown family -> ValueError
    if not req.models:
        raise ValueError("--model names no model")
    use_store(store_path)
    for m in req.models:
        validate_model(m)
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


def reference_result(fam: str, instances: list[TaskInstance], split: str) -> dict[str, Any]:
    """The reference solver's score on the same instances (no model: the plan run through the tools)."""
    from tasks import get_family

    family = get_family(fam)
    passed = sum(family.reference_solve(i)[0].passed for i in instances)
    return {"family": fam, "model": "reference", "split": split, "n": len(instances), "passed": passed,
            "pass_rate": round(passed / len(instances), 4), "errors": {}, "run_id": None}


def run_eval(plan: EvalPlan, progress: bool = True) -> list[EvalResult]:
    from cluster.runtime import start_ray
    from harness_store.store import HarnessStore
    from services.pool import RolloutPool

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
            for model in req.models:
                results.append(_eval_one(store, pool, plan, fam, h, model, progress))
    finally:
        pool.shutdown()
    return results


def _eval_one(store: Any, pool: Any, plan: EvalPlan, fam: str, h: Harness, model: str, progress: bool) -> EvalResult:
    from services.pool import RolloutJob

    req = plan.request
    config = {
        "family": fam, "split": req.split, "n": req.n, "harness_id": h.id, "model": model,
        "seed": req.seed, "workers": req.workers, "repeats": req.repeats,
    }
    run_id = store.create_run("eval", config)
    log = structlog.get_logger(role="eval", run_id=run_id, harness_id=h.id[:12])
    log.info("eval started", family=fam, model=model, n=req.n)
    started = time.perf_counter()
    try:
        jobs = [RolloutJob(i, h, model, req.seed + r) for r in range(req.repeats) for i in plan.instances[fam]]
        trajs = pool.run(jobs, progress=progress, description=f"{fam} {model}")
        store.put_trajectories(run_id, trajs)
        summary = summarise(trajs, split=req.split, seed=req.seed)
        res = EvalResult(
            run_id, summary, failure_causes(trajs), time.perf_counter() - started, pass_rate(trajs), req.repeats
        )
        store.finish_run(run_id, "done", res.as_json())
    except BaseException as e:
        store.finish_run(run_id, "failed", {"error": f"{type(e).__name__}: {e}"})
        raise
    log.info("eval done", pass_rate=summary.pass_rate)
    return res


# ------------------------------------------------------------------------------------------ evolve
def run_evolve(
    config: Any,
    store_path: Path,
    *,
    address: str | None,
    workers: int,
    resume: str | None,
    on_progress: Any = None,
) -> dict[str, Any]:
    """Run (or resume) a harness evolution; record the evolved harness under `<family>:evolved`."""
    from agents.meta import HarnessEvolution, LLMProposer
    from cluster.runtime import start_ray
    from harness_store.store import HarnessStore
    from services.gateway import Gateway
    from services.pool import PoolEvaluator, RolloutPool

    use_store(store_path)
    store = HarnessStore(store_path, create=True)
    lease = None
    if resume:
        run = store.get_run(resume)
        if run.kind != "evolve":
            raise ValueError(f"run {resume!r} is a {run.kind} run, not an evolve run")
        from agents.meta.loop import EvolveConfig

        config = EvolveConfig.from_json(run.config)
        run_id = resume
        lease = store.claim_run(run_id)  # refuses a done run, or one another live process is running
    else:
        run_id = store.create_run("evolve", config.to_json())
        lease = store.claim_run(run_id)  # heartbeats let other hosts see the owner is alive
    gateway = Gateway()
    start_ray(address)
    pool = RolloutPool(workers)
    try:
        from tasks import get_family

        handbook = get_family(config.family).handbook if config.handbook else None
        proposer = LLMProposer(config.proposer, lambda m, msgs, tools, seed: gateway.complete(m, msgs, tools, seed=seed), handbook)
        loop = HarnessEvolution(config, PoolEvaluator(pool), proposer, store, run_id, on_progress=on_progress)
        try:
            result = loop.run(resume=bool(resume))
        except BaseException as e:
            store.update_run(run_id, status="interrupted", result={"error": f"{type(e).__name__}: {e}"})
            raise
        store.set_alias(f"{config.family}:evolved", result.harness_id)
        out = {
            "run_id": run_id,
            "family": config.family,
            "model": config.model,
            "proposer": config.proposer,
            "harness_id": result.harness_id,
            "baseline_id": result.baseline_id,
            "baseline_val": round(result.baseline_val, 4),
            "evolved_val": round(result.evolved_val, 4),
            "rollouts_used": result.rollouts_used,
            "iterations": result.iterations,
            "accepted": len(result.accepted),
            "rejected": result.rejected,
            "invalid": result.invalid,
            "stop_reason": result.stop_reason,
            "spend": result.spend,
            "edits": result.accepted,
        }
        out["usage"] = usage_report(store, pool, result.harness_id, config.family, [config.model], "val", config.val_n, config.seed)
        out["test"] = held_out_comparison(
            store, pool, run_id, config.family, config.model, result.baseline_id, result.harness_id,
            repeats=config.val_seeds, seed=config.seed,
        )
        if config.model.startswith("synthetic/"):
            out["notice"] = TESTBED_NOTICE
        store.finish_run(run_id, "done", out)
        return out
    finally:
        pool.shutdown()
        if lease is not None:
            lease.release()


def held_out_comparison(
    store: Any, pool: Any, run_id: str, family: str, model: str, baseline_id: str, evolved_id: str, *, repeats: int, seed: int
) -> dict[str, Any]:
    """Baseline vs evolved harness on the whole test split (never used for acceptance), `repeats` seeds
    each: pass@1 with 95% intervals and the paired gain with its interval."""
    from agents.stats import paired_difference
    from services.pool import RolloutJob
    from tasks import get_family

    instances = get_family(family).generate("test")
    rates = {}
    for label, hid in (("baseline", baseline_id), ("evolved", evolved_id)):
        h = store.get_harness(hid)
        jobs = [RolloutJob(i, h, model, seed + r) for r in range(repeats) for i in instances]
        trajs = pool.run(jobs)
        store.put_trajectories(run_id, trajs, batch=f"test-{label}")
        rates[label] = pass_rate(trajs)
    gain, ci = paired_difference(rates["baseline"], rates["evolved"])
    return {
        "split": "test",
        "instances": len(instances),
        "repeats": repeats,
        "baseline": {k: v for k, v in rates["baseline"].as_json().items() if k != "per_instance"},
        "evolved": {k: v for k, v in rates["evolved"].as_json().items() if k != "per_instance"},
        "gain": round(gain, 4),
        "gain_ci95": [round(ci[0], 4), round(ci[1], 4)],
    }


def accepted_edits(store: Any, harness_id: str) -> list[Any]:
    return [r.edit for r in store.lineage(harness_id) if r.edit is not None]


def usage_report(
    store: Any, pool: Any, harness_id: str, family: str, models: list[str], split: str, n: int, seed: int,
    trajectories: dict[str, list[Any]] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Per model, the usage rate of every accepted edit on the harness's lineage."""
    from agents.usage import edit_usage
    from services.pool import RolloutJob
    from tasks import get_family

    edits = accepted_edits(store, harness_id)
    if not edits:
        return {m: [] for m in models}
    h = store.get_harness(harness_id)
    out = {}
    for m in models:
        trajs = (trajectories or {}).get(m)
        if trajs is None:
            insts = get_family(family).generate(split, n)
            trajs = pool.run([RolloutJob(i, h, m, seed) for i in insts])
        out[m] = edit_usage(edits, trajs)
    return out


# ---------------------------------------------------------------------------------------- transfer
def run_transfer(
    store_path: Path, families: list[str], harness_ref: str, models: list[str], split: str, n: int, seed: int,
    address: str | None, workers: int, progress: bool,
) -> list[dict[str, Any]]:
    """Weak vs expert under baseline vs evolved harness, one row per (family, model), plus edit usage."""
    from agents.report import summarise
    from cluster.runtime import start_ray
    from harness_store.store import HarnessStore
    from services.pool import RolloutJob, RolloutPool
    from tasks import get_family

    use_store(store_path)
    store = HarnessStore(store_path, create=False)
    plan = []
    for fam in families:
        evolved = store.resolve_harness(harness_ref, fam)
        baseline = get_family(fam).baseline_harness()
        plan.append((fam, baseline, evolved, get_family(fam).generate(split, n, seed=0)))
    for m in models:
        validate_model(m)
    start_ray(address)
    pool = RolloutPool(workers)
    rows = []
    try:
        run_id = store.create_run("transfer", {"families": families, "harness": harness_ref, "models": models,
                                                "split": split, "n": n, "seed": seed})
        for fam, baseline, evolved, insts in plan:
            evolved_trajs = {}
            for m in models:
                res = {}
                for label, h in (("baseline", baseline), ("evolved", evolved)):
                    trajs = pool.run([RolloutJob(i, h, m, seed) for i in insts], progress=progress,
                                     description=f"{fam} {m} {label}")
                    store.put_trajectories(run_id, trajs, batch=f"{fam}-{m}-{label}")
                    res[label] = summarise(trajs, split=split, seed=seed).pass_rate
                    if label == "evolved":
                        evolved_trajs[m] = trajs
                rows.append({"family": fam, "model": m, "baseline": round(res["baseline"], 4),
                             "evolved": round(res["evolved"], 4), "gain": round(res["evolved"] - res["baseline"], 4),
                             "harness_id": evolved.id})
            usage = usage_report(store, pool, evolved.id, fam, models, split, n, seed, trajectories=evolved_trajs)
            for r in rows:
                if r["family"] == fam:
                    r["usage"] = usage[r["model"]]
        store.finish_run(run_id, "done", {"rows": rows})
    finally:
        pool.shutdown()
    return rows
