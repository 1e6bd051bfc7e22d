"""The warm-up of the real-weights design (docs/results/real-weights-design.md §4 step 6): one LoRA adapter
on reference trajectories of the warm-up families (payroll, stock, website) at L0 and L1, train split, each
under its family's oracle harness with every assistant turn loss-bearing (LoRA rank 16, alpha 32, lr 2e-4,
2 epochs, seed 0), merged into the base weights as a model folder of its own, which the selection rule
then serves as `vllm/smollm2-warm` on the candidates iot, budget and browser.

The reference trajectories are synthetic/expert's rollouts under the oracle harness through the project's
executor (`LocalEvaluator`, seed 0): with every rule stated in the harness and constrained calls it follows
the family's reference plan step by step through the tools (`coevolve.testbed.policy`), so a passing rollout
is the plan executed through the tools, rendered exactly as the executor renders any rollout (the harness's
system prompt and tools, the instruction, one call per assistant turn with no text, the tools' results).
Only passing rollouts become rows (`coevolve.agents.correction.full_row`). No instance, trajectory or row of
iot, budget or browser enters it. `max_seq_len` is the served window (8,192), so no row is cut and every
assistant turn carries loss, as the design says. Its amendment §13 adds bfloat16 base weights (the served
model's arithmetic), the two cores (torch threads; nothing serves while it trains) and a checkpoint every
20 steps, so that a stopped warm-up resumes within minutes of where it stopped; the design names no other
setting, so the rest are `TrainConfig`'s defaults.

    .venv/bin/python bench/warmup.py --rows-only      # the rows: per family and level, passes and turns
    make warmup                                       # rows, train (Ray Train, peft), merge
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

WARMUP_FAMILIES = ("payroll", "stock", "website")
WARMUP_LEVELS = ("L0", "L1")
RULE_AFTER_WARMUP = ("iot", "budget", "browser")  # the candidates the rule runs on with the warmed-up model
WARMUP_CONFIG = {"rank": 16, "alpha": 32, "lr": 2e-4, "epochs": 2, "seed": 0, "max_seq_len": 8192,
                 "cpus_per_worker": 2, "checkpoint_every": 20, "dtype": "bfloat16"}
EXPERT = "synthetic/expert"
SEED = 0


def warmup_rows(families: tuple[str, ...] = WARMUP_FAMILIES, levels: tuple[str, ...] = WARMUP_LEVELS,
                n: int | None = None) -> tuple[list[Any], dict[str, dict[str, int]]]:
    """The warm-up's rows and, per "family/level", the train instances, passing reference rollouts and their
    assistant turns. A family the rule runs on after the warm-up is refused."""
    from coevolve.agents.correction import full_row
    from coevolve.agents.local import LocalEvaluator
    from coevolve.services.gateway import Gateway
    from coevolve.tasks import get_family
    from coevolve.tasks.helpers import LEVELS, selection_harnesses

    leaked = sorted(set(families) & set(RULE_AFTER_WARMUP))
    if leaked:
        raise ValueError(f"the warm-up never trains on {', '.join(leaked)}: the rule runs on them after it")
    evaluator = LocalEvaluator(client=Gateway())
    rows, stats = [], {}
    for f in families:
        family, oracle = get_family(f), selection_harnesses(f)["oracle"]
        for level in levels:
            instances = family.generate("train", n, **LEVELS[level])
            trajs = evaluator.evaluate([(i, oracle, SEED) for i in instances], EXPERT)
            passed = [t for t in trajs if t.passed]
            rows += [full_row(t, oracle, "warm-up") for t in passed]
            stats[f"{f}/{level}"] = {"instances": len(instances), "passed": len(passed),
                                     "turns": sum(len(t.turns) for t in passed)}
    return rows, stats


def warm_up(base: Path, out: Path, store: Path, n: int | None = None) -> dict[str, Any]:
    """Rows, the adapter (peft on Ray Train, registered in `store`; a rerun after a crash or a stop resumes
    from its last checkpoint) and the merged model folder `out`."""
    from coevolve.cluster.runtime import start_ray
    from coevolve.services.serving.models import merge_adapter
    from coevolve.services.training.job import adapter_dir, train_adapter
    from coevolve.store.datasets import dataset_hash
    from coevolve.store.store import HarnessStore

    rows, stats = warmup_rows(n=n)
    adapter_id = f"warmup-{dataset_hash(rows)[:12]}"
    st = HarnessStore(store, create=True)
    if not (adapter_dir(st, adapter_id) / "adapter_config.json").exists():
        start_ray(None, log_to_driver=False)
        train_adapter(rows, base, adapter_id, WARMUP_CONFIG, st, backend="peft",
                      progress=lambda p: print(f"  train: {json.dumps(p)}", flush=True))
    merge_adapter(base, adapter_dir(st, adapter_id), out)
    return {"adapter": adapter_id, "rows": len(rows), "model": str(out), "stats": stats}


def main(argv: list[str] | None = None) -> None:
    from coevolve.services.logs import configure_logging

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", type=Path, default=Path(".coevolve/models/smollm2"))
    ap.add_argument("--out", type=Path, default=Path(".coevolve/models/smollm2-warm"))
    ap.add_argument("--store", type=Path, default=Path(".coevolve-real"))
    ap.add_argument("--n", type=int, default=None, help="train instances per family and level (default: the whole split)")
    ap.add_argument("--rows-only", action="store_true", help="build and count the rows; train nothing")
    args = ap.parse_args(argv)
    configure_logging(json_lines=False, level="warning")
    if args.rows_only:
        rows, stats = warmup_rows(n=args.n)
        print("| family / level | train instances | passing reference rollouts | assistant turns |\n|---|---|---|---|")
        for k, s in stats.items():
            print(f"| {k} | {s['instances']} | {s['passed']} | {s['turns']:,} |")
        print(f"{len(rows)} rows")
        return
    print(json.dumps(warm_up(args.base, args.out, args.store, args.n)))


if __name__ == "__main__":
    main()
