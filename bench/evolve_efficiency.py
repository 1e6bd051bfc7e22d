"""Evolution efficiency: rollouts spent to reach 90% of the final val gain, with paired early stopping
versus a naive loop that evaluates every candidate on the full val split. Same family, model, proposer,
seed and budget in one run; prints the ratio naive / early-stopping (higher is better).

Synthetic models (synthetic/weak, synthetic/meta) are a testbed: the figure measures the loop.
Usage: python bench/evolve_efficiency.py [--family iot] [--budget 3000] [--workers 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def rollouts_to_90pct(curve: list[tuple[int, float]]) -> tuple[int, float]:
    """(rollouts when val first reached baseline + 90% of the final gain, final gain)."""
    base, final = curve[0][1], curve[-1][1]
    gain = final - base
    target = base + 0.9 * gain
    return next(r for r, v in curve if v >= target - 1e-9), gain


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--family", default="iot")
    ap.add_argument("--budget", type=int, default=3000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from coevolve.agents.meta import Budget, EvolveConfig, HarnessEvolution, LLMProposer
    from coevolve.cluster.runtime import start_ray
    from coevolve.services.gateway import Gateway
    from coevolve.services.logs import configure_logging
    from coevolve.services.pools.rollouts import PoolEvaluator, RolloutPool
    from coevolve.store.store import HarnessStore
    from coevolve.tasks import get_family

    configure_logging(json_lines=False, level="error")
    start_ray(None, num_cpus=2)
    pool = RolloutPool(args.workers)
    gateway = Gateway()
    results = {}
    for label, early in (("early-stop", True), ("naive", False)):
        config = EvolveConfig(
            family=args.family, model="synthetic/weak", seed=args.seed, early_stop=early, plateau=3,
            budget=Budget(iterations=15, rollouts=args.budget),
        )
        store = HarnessStore(Path(tempfile.mkdtemp()) / "store")
        run_id = store.create_run("evolve", config.to_json())
        proposer = LLMProposer(config.proposer, gateway,
                               get_family(config.family).handbook)
        results[label] = HarnessEvolution(config, PoolEvaluator(pool), proposer, store, run_id).run()
    pool.shutdown()

    print(f"family {args.family}, synthetic/weak, proposer synthetic/meta, budget {args.budget} rollouts (testbed)")
    spent = {}
    for label, r in results.items():
        spent[label], gain = rollouts_to_90pct(r.gain_curve)
        print(
            f"  {label:10s}: val {r.baseline_val:.2f} -> {r.evolved_val:.2f} (gain {gain:+.2f}), "
            f"{spent[label]} rollouts to 90% of it, {r.rollouts_used} used in all, "
            f"{len(r.accepted)} accepted / {r.rejected} rejected, stop: {r.stop_reason}"
        )
    print(f"rollouts to 90% of final gain, naive / early-stopping: {spent['naive'] / max(1, spent['early-stop']):.2f}")


if __name__ == "__main__":
    main()
