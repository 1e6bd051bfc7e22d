"""Training throughput: the Ray Train LoRA job vs the same peft loop run bare in this process.

Both sides run `coevolve.services.training.run_peft_loop` on the same base model, rows, config and number of
torch threads; the Ray side goes through `train_adapter` (TorchTrainer, one worker, checkpoints each
epoch, adapter registered in a scratch store). Printed, as ratios Ray / bare:

- loop tokens/s: tokens over the time spent in forward/backward/optimizer steps (Ray's cost on the
  hot loop: scheduling, reporting, checkpoint upload are outside it);
- job tokens/s: tokens over the whole wall time (bare: load + loop + checkpoints; Ray: `fit()` end to
  end, worker start-up included), which approaches the loop ratio as jobs get longer.

Rounds alternate bare/Ray; each round gives a paired ratio and the median over rounds is printed,
since other work on a shared machine moves absolute rates by several times between minutes.

    python bench/train_throughput.py [--base MODEL_DIR] [--rounds 2] [--repeat 40] [--threads 2] [--json]

Output: progress lines on stderr, the figures on stdout (`--json`: one JSON object on stdout). Ray's
workers (the Train controller and worker) log into Ray's log folder, named in the first progress line,
not onto the terminal.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", help="base model folder (default: a fresh tiny model)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=40, help="row-set copies per epoch")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2, help="torch threads = CPUs of the Train worker")
    ap.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    args = ap.parse_args()

    from coevolve.services.logs import configure_logging, quiet_libraries, ray_log_dir

    quiet_libraries()  # before transformers, Ray Train and friends are imported
    configure_logging(json_lines=False, level="warning")
    from coevolve.cluster.runtime import start_ray
    from coevolve.services.serving.models import make_tiny
    from coevolve.services.training import TrainConfig, load_rows, run_peft_loop, train_adapter
    from coevolve.store.store import HarnessStore
    from tests.lifecycle_rows import multi_turn_row, target_rows

    work = Path(tempfile.mkdtemp(prefix="bench-train-"))
    base = Path(args.base) if args.base else make_tiny(work / "tiny")
    rows = [*target_rows(), multi_turn_row()]
    cfg = TrainConfig(
        lr=1e-3, epochs=args.epochs, repeat=args.repeat, dropout=0.0, cpus_per_worker=args.threads, rank=16
    )
    progress(
        f"bench: Ray Train LoRA job vs the bare peft loop, {args.rounds} round(s) of {args.epochs} epochs "
        f"x {args.repeat} row-set copies, {args.threads} threads"
    )
    start_ray(None, args.threads, log_to_driver=False)  # worker output goes to Ray's log files
    progress(f"Ray started; worker logs in {ray_log_dir()}")

    def bare() -> tuple[float, float, int]:
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as ck:

            def report(metrics, folder):  # persist like Ray Train does: copy the checkpoint folder
                import shutil

                if folder:
                    shutil.copytree(folder, Path(ck) / f"epoch{metrics['epoch']}")

            res = run_peft_loop(str(base), load_rows(rows), cfg, restore=lambda: None, report=report)
        wall = time.perf_counter() - t0
        return res["tokens_run"] / res["train_s"], res["tokens_run"] / wall, res["step"]

    def on_ray(i: int) -> tuple[float, float, int]:
        store = HarnessStore(work / f"store{i}")
        t0 = time.perf_counter()
        ref = train_adapter(rows, base, f"bench-{i}", cfg, store)
        wall = time.perf_counter() - t0
        return ref.metrics["tokens_per_s"], ref.metrics["tokens"] / wall, ref.metrics["steps"]

    results: dict[str, list[tuple[float, float, int]]] = {"bare": [], "ray": []}
    for i in range(args.rounds):
        progress(f"round {i + 1}/{args.rounds}: bare peft loop, then the Ray Train job ...")
        results["bare"].append(bare())
        results["ray"].append(on_ray(i))
        (b_loop, b_job, _), (r_loop, r_job, _) = results["bare"][-1], results["ray"][-1]
        progress(
            f"round {i + 1}/{args.rounds}: loop tokens/s bare {b_loop:.0f}, Ray {r_loop:.0f} ({r_loop / b_loop:.2f}); "
            f"job tokens/s bare {b_job:.0f}, Ray {r_job:.0f} ({r_job / b_job:.2f})"
        )

    def med(side: str, k: int) -> float:
        return statistics.median(r[k] for r in results[side])

    def ratio(k: int) -> float:
        return statistics.median(r[k] / b[k] for r, b in zip(results["ray"], results["bare"], strict=True))

    steps = results["bare"][0][2]
    assert all(r[2] == steps for side in results.values() for r in side), "step counts differ"
    out = {
        "base": str(base),
        "steps_per_run": steps,
        "threads": args.threads,
        "bare_loop_tok_s": round(med("bare", 0), 1),
        "ray_loop_tok_s": round(med("ray", 0), 1),
        "loop_ratio": round(ratio(0), 3),
        "loop_ratio_per_round": [
            round(r[0] / b[0], 3) for r, b in zip(results["ray"], results["bare"], strict=True)
        ],
        "bare_job_tok_s": round(med("bare", 1), 1),
        "ray_job_tok_s": round(med("ray", 1), 1),
        "job_ratio": round(ratio(1), 3),
    }
    if args.json:
        print(json.dumps(out))
        return
    print(
        f"Ray Train / bare peft loop: loop tokens/s ratio {out['loop_ratio']:.2f} (target >= 0.8), "
        f"whole-job tokens/s ratio {out['job_ratio']:.2f} ({steps} steps per run, median of {args.rounds} round(s))"
    )
    print(
        f"  loop tokens/s: bare {out['bare_loop_tok_s']}, Ray {out['ray_loop_tok_s']}; "
        f"job tokens/s: bare {out['bare_job_tok_s']}, Ray {out['ray_job_tok_s']}"
    )


if __name__ == "__main__":
    main()
