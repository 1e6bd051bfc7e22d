"""Sustained load: rollouts/s through the Ray rollout pool against a latency-simulated synthetic model,
without faults and under injected endpoint faults, as a ratio measured in one run; and the driver's
memory at the start and end of each phase (a leak shows as growth that does not level off).

Each phase keeps `--in-flight` rollouts running for `--seconds` (batches of four times that many,
submitted back to back, so that the tail of a batch is short against it), with
every model call taking `--latency-ms` (COEVOLVE_SYNTHETIC_LATENCY_MS). The faulted phase injects
`--faults` (coevolve/llm/faults.py: latency spikes, timeouts, 429, 5xx, malformed and truncated bodies,
connection resets) and the gateway retries them (`--attempts`). Reported per phase: rollouts/s, model
calls/s, rollouts lost to infra, faults injected by kind, driver RSS at start, end and its peak growth.

Synthetic models are a testbed: these figures measure the plumbing's resilience, not any real model.
Usage: python bench/load.py [--seconds 300] [--latency-ms 100] [--faults all=0.2,seed=1] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

MODEL = "synthetic/weak"


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def phase(name: str, seconds: float, jobs: list, workers: int, in_flight: int, env: dict[str, str]) -> dict:
    from coevolve.analysis.stats import pass_rate
    from coevolve.llm.faults import count_faults
    from coevolve.services.pools.rollouts import RolloutPool

    log_dir = tempfile.mkdtemp(prefix=f"coevolve-load-{name}-")
    pool = RolloutPool(workers, env={**env, "COEVOLVE_FAULT_LOG": log_dir})
    try:
        pool.run(jobs[: workers * 2])  # warm: actors imported litellm, first calls done
        rss0 = peak = rss_mb()
        started = time.perf_counter()
        done = infra = calls = batches = 0
        trajs_all = []
        i = 0
        next_report = started + 15
        while time.perf_counter() - started < seconds:
            batch = [jobs[(i + k) % len(jobs)] for k in range(4 * in_flight)]  # 4 waves: less idle tail
            i += len(batch)
            trajs = pool.run(batch, max_in_flight=in_flight)
            batches += 1
            done += len(trajs)
            infra += sum(t.error == "infra" for t in trajs)
            calls += sum(len(t.turns) for t in trajs)
            trajs_all += trajs[:4]  # a sample for pass-rate sanity, bounded (no growth from the bench itself)
            peak = max(peak, rss_mb())
            now = time.perf_counter()
            if now >= next_report:
                say(f"  {name}: {now - started:5.0f}s  {done} rollouts  {done / (now - started):6.2f}/s  "
                    f"infra {infra}  driver RSS {rss_mb():.0f} MiB")
                next_report = now + 15
        wall = time.perf_counter() - started
        rss1 = rss_mb()
        faults = dict(sorted(count_faults(log_dir).items()))
        return {
            "phase": name, "seconds": round(wall, 1), "rollouts": done, "rollouts_per_s": round(done / wall, 3),
            "model_calls_per_s": round(calls / wall, 2), "infra": infra, "batches": batches,
            "faults": faults, "faults_total": sum(faults.values()),
            "sample_pass_at_1": round(pass_rate(trajs_all).pass_at_1, 3) if trajs_all else None,
            "rss_start_mb": round(rss0, 1), "rss_end_mb": round(rss1, 1), "rss_peak_growth_mb": round(peak - rss0, 1),
        }
    finally:
        pool.shutdown()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=300.0, help="duration of each phase (default 300)")
    ap.add_argument("--latency-ms", type=float, default=100.0, help="simulated model latency per call")
    ap.add_argument("--faults", default="all=0.2,seed=1", help="fault spec of the faulted phase (coevolve/llm/faults.py)")
    ap.add_argument("--attempts", type=int, default=8, help="gateway attempts per model call in both phases")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--in-flight", type=int, default=64, help="rollouts per batch (all in flight at once)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = ap.parse_args()

    from coevolve.llm.faults import FaultSpec

    try:
        spec = FaultSpec.parse(args.faults)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    os.environ["COEVOLVE_SYNTHETIC_LATENCY_MS"] = str(args.latency_ms)
    os.environ["COEVOLVE_RETRY"] = f"attempts={args.attempts}"
    from coevolve.cluster.runtime import start_ray, stop_ray
    from coevolve.services.logs import configure_logging
    from coevolve.tasks import get_family

    configure_logging(level="error")
    fam = get_family("iot")
    harness = fam.baseline_harness()
    jobs_list = [(i, s) for s in range(4) for i in fam.generate("val")]
    from coevolve.services.pools.rollouts import RolloutJob

    jobs = [RolloutJob(i, harness, MODEL, s) for i, s in jobs_list]
    say(f"starting Ray; two phases of {args.seconds:.0f}s, {args.in_flight} rollouts in flight, "
        f"{args.latency_ms:.0f} ms per model call")
    start_ray(None)
    rss_begin = rss_mb()
    try:
        say("phase 1: no faults")
        clean = phase("clean", args.seconds, jobs, args.workers, args.in_flight, {"COEVOLVE_FAULTS": ""})
        say(f"phase 2: faults {spec.describe()}")
        faulted = phase("faulted", args.seconds, jobs, args.workers, args.in_flight, {"COEVOLVE_FAULTS": args.faults})
    finally:
        stop_ray()
    out = {
        "latency_ms": args.latency_ms, "in_flight": args.in_flight, "workers": args.workers, "faults": spec.describe(),
        "clean": clean, "faulted": faulted,
        "throughput_ratio_faulted_to_clean": round(faulted["rollouts_per_s"] / clean["rollouts_per_s"], 3),
        "driver_rss_mb": {"start": round(rss_begin, 1), "end": faulted["rss_end_mb"]},
        "notice": "synthetic models: a testbed of the plumbing, not evidence about real models",
    }
    if args.json:
        print(json.dumps(out, sort_keys=True))
        return 0
    print(f"{'phase':8} {'rollouts/s':>10} {'calls/s':>8} {'rollouts':>9} {'infra':>6} {'faults':>7} {'RSS start':>10} {'RSS end':>8}")
    for p in (clean, faulted):
        print(f"{p['phase']:8} {p['rollouts_per_s']:>10} {p['model_calls_per_s']:>8} {p['rollouts']:>9} {p['infra']:>6} "
              f"{p['faults_total']:>7} {p['rss_start_mb']:>9}M {p['rss_end_mb']:>7}M")
    print(f"faults by kind: {faulted['faults']}")
    print(f"throughput under faults / without: {out['throughput_ratio_faulted_to_clean']}")
    print(f"driver RSS: {out['driver_rss_mb']['start']} MiB at start, {out['driver_rss_mb']['end']} MiB at end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
