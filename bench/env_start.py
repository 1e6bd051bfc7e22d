"""CPU to start one rollout's environment of the sqlite families (payroll, iot), measured in one run: the whole
`make_env`, whose tables are a copy of its world's, built once per world (`tasks.base.read_only_db`), against
building and filling the tables alone (and payroll's fingerprint of them), once per env.

Usage: python bench/env_start.py [--instances 20] [--repeats 10] [--json]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import time
from contextlib import closing
from types import SimpleNamespace

from coevolve.tasks import get_family
from coevolve.tasks.iot.env import create_tables as iot_tables
from coevolve.tasks.payroll.env import PayrollEnv
from coevolve.tasks.payroll.env import create_tables as payroll_tables


def built_per_env(family: str, world: object) -> None:
    """Create and fill one env's tables itself, and for payroll fingerprint them."""
    with closing(sqlite3.connect(":memory:")) as db:
        (payroll_tables if family == "payroll" else iot_tables)(db, world)
        db.commit()
        if family == "payroll":
            PayrollEnv.fingerprint(SimpleNamespace(db=db))


def cpu(fn: object, instances: list, repeats: int) -> float:
    """Process CPU milliseconds per env start."""
    started = time.process_time()
    for _ in range(repeats):
        for inst in instances:
            fn(inst)
    return 1000 * (time.process_time() - started) / (repeats * len(instances))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    out = {}
    for name in ("payroll", "iot"):
        fam = get_family(name)
        instances = fam.generate("val", a.instances, seed=1)
        for inst in instances:
            fam.make_env(inst)  # worlds and their tables' images, once
        copied = cpu(fam.make_env, instances, a.repeats)
        built = cpu(lambda i, fam=fam, name=name: built_per_env(name, fam.world(i.seed, i.params)), instances, a.repeats)
        out[name] = {"copy_ms": round(copied, 3), "build_ms": round(built, 3), "ratio": round(copied / built, 3)}
    if a.json:
        print(json.dumps(out))
        return
    for name, r in out.items():
        print(f"{name}: {r['copy_ms']} ms per env (a copy of the world's tables) vs {r['build_ms']} ms building "
              f"them per env: {r['ratio']}x")


if __name__ == "__main__":
    main()
