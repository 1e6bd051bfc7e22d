"""The evolve job: a harness evolution (or its resumption) on the rollout actors, recorded under
`<family>:evolved`, then measured where acceptance never looked: the held-out test split (baseline vs
evolved) and how often each accepted edit is used."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coevolve.analysis.stats import pass_rate
from coevolve.analysis.summary import testbed_notice
from coevolve.config import check_seed
from coevolve.jobs.eval import tau2_block
from coevolve.jobs.runtime import rollout_pool, use_store
from coevolve.jobs.signals import mark_interruption
from coevolve.jobs.validate import check_workers, resumed_run


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
    from coevolve.services.gateway import Gateway
    from coevolve.store.store import HarnessStore

    check_workers(workers, address)
    if config is not None:
        check_seed(config.seed)
    use_store(store_path)
    store = HarnessStore(store_path, create=True)
    if resume:
        from coevolve.agents.meta.loop import EvolveConfig

        config = EvolveConfig.from_json(resumed_run(store, resume, "evolve", "an evolve run").config)
        run_id = resume
    else:
        run_id = store.create_run("evolve", config.to_json())
    # refuses a done run, or one another live process is running; heartbeats let other hosts see the owner is alive
    lease = store.claim_run(run_id)
    try:  # from here on the lease is released (run `interrupted` unless done) however the job ends
        gateway = Gateway()
        with rollout_pool(address, workers) as pool:
            out = _evolve(config, store, run_id, pool, gateway, resumed=bool(resume), on_progress=on_progress)
            store.finish_run(run_id, "done", out)
            return out
    except KeyboardInterrupt as e:
        mark_interruption(e, "evolve", run_id, "interrupted")
        raise
    finally:
        lease.release()


def _evolve(
    config: Any, store: Any, run_id: str, pool: Any, gateway: Any, *, resumed: bool, on_progress: Any
) -> dict[str, Any]:
    """The evolution loop on `pool`, then the evolved harness's alias and the run's record."""
    from coevolve.agents.fit import evolve_cut_note
    from coevolve.agents.meta import LLMProposer, make_evolution
    from coevolve.services.pools.rollouts import PoolEvaluator
    from coevolve.tasks import get_family

    handbook = get_family(config.family).handbook if config.handbook else None
    proposer = LLMProposer(config.proposer, gateway, handbook)
    loop = make_evolution(config, PoolEvaluator(pool), proposer, store, run_id, on_progress=on_progress)
    try:
        result = loop.run(resume=resumed)
    except BaseException as e:
        mark_interruption(e, "evolve", run_id, "interrupted")
        store.update_run(run_id, status="interrupted", result={"error": f"{type(e).__name__}: {e}"})
        raise
    store.set_alias(f"{config.family}:evolved", result.harness_id)
    out = {
        "run_id": run_id,
        **{f: getattr(config, f) for f in ("family", "model", "proposer")},
        "harness_id": result.harness_id,
        "baseline_id": result.baseline_id,
        "baseline_val": round(result.baseline_val, 4),
        "evolved_val": round(result.evolved_val, 4),
        "rollouts_used": result.rollouts_used,
        "iterations": result.iterations,
        "accepted": len(result.accepted),
        **{f: getattr(result, f) for f in ("rejected", "invalid", "stop_reason", "spend")},
        "edits": result.accepted,
        "search": config.search,
    }
    if config.search == "race":
        from coevolve.agents.meta.race import guard_summary

        out["guard"] = guard_summary(store, run_id)
    if note := evolve_cut_note([e.payload for e in store.events(run_id, "proposal")]):
        out["context_note"] = note  # what the proposer's evidence lost to its context window
    out["usage"] = usage_report(store, pool, result.harness_id, config.family, [config.model], "val", config.val_n, config.seed)
    out["test"] = held_out_comparison(
        store, pool, run_id, config.family, config.model, result.baseline_id, result.harness_id,
        repeats=config.val_seeds, seed=config.seed,
    )
    if "tau2" in out["test"]:  # the val numbers too: a tau2 family's val split is not tau2's leaderboard set
        from coevolve.analysis.tau2 import verdict

        out["tau2_note"] = verdict(list(out["test"]["tau2"].values()))
    return out | testbed_notice(config.model)


def held_out_comparison(
    store: Any, pool: Any, run_id: str, family: str, model: str, baseline_id: str, evolved_id: str, *, repeats: int, seed: int
) -> dict[str, Any]:
    """Baseline vs evolved harness on the whole test split (never used for acceptance), `repeats` seeds
    each: pass@1 with 95% intervals and the paired gain with its interval."""
    from coevolve.analysis.stats import comparison
    from coevolve.services.pools.rollouts import RolloutJob
    from coevolve.tasks import get_family

    instances = get_family(family).generate("test")
    rates = {}
    tau2 = {}
    for label, hid in (("baseline", baseline_id), ("evolved", evolved_id)):
        h = store.get_harness(hid)
        jobs = [RolloutJob(i, h, model, seed + r) for r in range(repeats) for i in instances]
        trajs = pool.run(jobs)
        store.put_trajectories(run_id, trajs, batch=f"test-{label}")
        rates[label] = pass_rate(trajs)
        if (block := tau2_block(family, trajs, "test", repeats)) is not None:
            tau2[label] = block
    return {**({"tau2": tau2} if tau2 else {}),
        "split": "test",
        "instances": len(instances),
        "repeats": repeats,
        **comparison(rates, "baseline", "evolved"),
    }


def usage_report(
    store: Any, pool: Any, harness_id: str, family: str, models: list[str], split: str, n: int, seed: int,
    trajectories: dict[str, list[Any]] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Per model, the usage rate of every accepted edit on the harness's lineage."""
    from coevolve.analysis.usage import edit_usage
    from coevolve.services.pools.rollouts import RolloutJob
    from coevolve.tasks import get_family

    edits = [r.edit for r in store.lineage(harness_id) if r.edit is not None]  # the accepted edits
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


