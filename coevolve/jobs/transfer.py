"""The transfer job: does an evolved harness carry over? Weak vs expert models under the family baseline
and the evolved harness, one row per (family, model), with each accepted edit's usage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coevolve.config import check_seed
from coevolve.jobs.eval import tau2_block
from coevolve.jobs.evolve import usage_report
from coevolve.jobs.runtime import rollout_pool, use_store
from coevolve.jobs.signals import mark_interruption
from coevolve.jobs.validate import check_workers, validate_model


def run_transfer(
    store_path: Path, families: list[str], harness_ref: str, models: list[str], split: str, n: int, seed: int,
    address: str | None, workers: int, progress: bool,
) -> list[dict[str, Any]]:
    """Weak vs expert under baseline vs evolved harness, one row per (family, model), plus edit usage."""
    from coevolve.analysis.summary import summarise
    from coevolve.analysis.tau2 import verdict
    from coevolve.services.pools.rollouts import RolloutJob
    from coevolve.store.store import HarnessStore
    from coevolve.tasks import get_family

    check_workers(workers, address)
    check_seed(seed)
    use_store(store_path)
    store = HarnessStore(store_path, create=False)
    plan = []
    for fam in families:
        evolved = store.resolve_harness(harness_ref, fam)
        baseline = get_family(fam).baseline_harness()
        plan.append((fam, baseline, evolved, get_family(fam).generate(split, n, seed=0)))
    for m in models:
        validate_model(m)
    run_id = None
    rows = []
    try:
        with rollout_pool(address, workers) as pool:
            run_id = store.create_run("transfer", {"families": families, "harness": harness_ref, "models": models,
                                                    "split": split, "n": n, "seed": seed})
            for fam, baseline, evolved, insts in plan:
                evolved_trajs = {}
                for m in models:
                    res = {}
                    blocks: dict[str, Any] = {}
                    for label, h in (("baseline", baseline), ("evolved", evolved)):
                        trajs = pool.run([RolloutJob(i, h, m, seed) for i in insts], progress=progress,
                                         description=f"{fam} {m} {label}")
                        store.put_trajectories(run_id, trajs, batch=f"{fam}-{m}-{label}")
                        res[label] = summarise(trajs, split=split, seed=seed).pass_rate
                        blocks[label] = tau2_block(fam, trajs, split, 1)
                        if label == "evolved":
                            evolved_trajs[m] = trajs
                    rows.append({"family": fam, "model": m, "baseline": round(res["baseline"], 4),
                                 "evolved": round(res["evolved"], 4), "gain": round(res["evolved"] - res["baseline"], 4),
                                 "harness_id": evolved.id})
                    if (note := verdict(list(blocks.values()))) is not None:
                        rows[-1]["tau2_note"] = note
                usage = usage_report(store, pool, evolved.id, fam, models, split, n, seed, trajectories=evolved_trajs)
                for r in rows:
                    if r["family"] == fam:
                        r["usage"] = usage[r["model"]]
            store.finish_run(run_id, "done", {"rows": rows})
    except KeyboardInterrupt as e:
        mark_interruption(e, "transfer", run_id, "interrupted")
        if run_id is not None:
            store.finish_run(run_id, "interrupted", {"rows": rows, "error": "interrupted"})
        raise
    return rows
