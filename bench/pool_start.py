"""Start-up of a run's pools (what `coevolve run` starts before its first rollout: 2 rollout workers, a
judge and an expert on the synthetic models), measured in one run on a local Ray head: `start_pools`,
which starts them at once, against one pool after another. Each actor imports the model libraries as
it starts, so on a machine with idle cores the pools' starts overlap.

Usage: python bench/pool_start.py [--repeats 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import time

from coevolve.cluster.runtime import start_ray, stop_ray
from coevolve.services.pools.base import start_pools
from coevolve.services.pools.roles import RolePool
from coevolve.services.pools.rollouts import RolloutPool

MAKERS = (lambda: RolloutPool(2, num_cpus=0.5), lambda: RolePool("judge", "synthetic/judge", 1, num_cpus=0.25),
          lambda: RolePool("expert", "synthetic/expert", 1, num_cpus=0.25))


def timed(at_once: bool) -> float:
    started = time.perf_counter()
    pools = start_pools(*MAKERS) if at_once else [make() for make in MAKERS]
    seconds = time.perf_counter() - started
    for pool in pools:
        pool.shutdown()
    time.sleep(3)  # the killed actors' processes exit before the next start
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=2, help="alternations of the two starts")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.repeats < 1:
        raise SystemExit("error: --repeats must be >= 1")
    start_ray(num_cpus=2)
    try:
        timed(True)  # the first start pays for Ray's first workers: not counted
        one_by_one, at_once = [], []
        for _ in range(args.repeats):
            one_by_one.append(timed(False))
            at_once.append(timed(True))
    finally:
        stop_ray()
    result = {"one_by_one_s": [round(s, 2) for s in one_by_one], "at_once_s": [round(s, 2) for s in at_once],
              "ratio": round(min(at_once) / min(one_by_one), 3)}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"pools started one after another: {result['one_by_one_s']} s; at once: {result['at_once_s']} s; "
              f"ratio (best of each) {result['ratio']}x")


if __name__ == "__main__":
    main()
