"""The synthetic judge's and expert's CPU on the same failures, measured in one run: with each word stemmed
once per process (the testbed's stem cache) and with every word stemmed wherever it occurs (one stemmer, no
cache: the expert then stems every handbook passage it weighs on every call). Synthetic models are a
testbed: this measures the plumbing.

Usage: python bench/testbed_roles.py [--family payroll] [--failures 10] [--k 3] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from coevolve.agents.executor import Executor
from coevolve.agents.expert import ExpertRewriter
from coevolve.agents.judge import Judge, RoleUsage
from coevolve.services.gateway import Gateway
from coevolve.tasks import get_family, handbook


def failures(gateway: Gateway, family: str, n: int) -> list:
    fam, executor = get_family(family), Executor(gateway)
    instances, harness = fam.generate("train", 4 * n, difficulty=2, size=1), fam.baseline_harness()

    async def run() -> list:
        return await asyncio.gather(*(executor.rollout(i, harness, "synthetic/weak", 0) for i in instances))

    return [t for t in asyncio.run(run()) if not t.passed][:n]


def role_cpu(judge: Judge, expert: ExpertRewriter, trajs: list, k: int) -> float:
    """Process CPU seconds of locate, rewrite (k candidates) and k scores for every failure."""
    started = time.process_time()
    for t in trajs:
        locus = judge.locate(t, usage=RoleUsage())
        for c in expert.rewrite(t, locus, k, seed=t.seed, usage=RoleUsage()):
            judge.score(t, locus, c, usage=RoleUsage())
    return time.process_time() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="payroll")
    ap.add_argument("--failures", type=int, default=10)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    gateway = Gateway()
    gateway.warm_up()
    trajs = failures(gateway, a.family, a.failures)
    judge, expert = Judge("synthetic/judge", gateway), ExpertRewriter("synthetic/expert", gateway)
    expert.handbook = get_family(a.family).handbook
    role_cpu(judge, expert, trajs[:1], a.k)  # imports and the handbook's index, once
    cached = handbook._stem
    import snowballstemmer

    handbook._stem = snowballstemmer.stemmer("english").stemWord
    uncached_s = role_cpu(judge, expert, trajs, a.k)
    handbook._stem = cached
    cached_s = role_cpu(judge, expert, trajs, a.k)
    out = {"family": a.family, "failures": len(trajs), "k": a.k, "cpu_s_uncached": round(uncached_s, 3),
           "cpu_s_cached": round(cached_s, 3), "ratio_cached_to_uncached": round(cached_s / uncached_s, 3)}
    print(json.dumps(out) if a.json else "\n".join(f"{k}: {v}" for k, v in out.items()))


if __name__ == "__main__":
    main()
