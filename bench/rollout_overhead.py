"""Rollout overhead: what the pool, the executor and the gateway cost, as ratios measured in one run.

(a) pool throughput (2 workers, zero-latency synthetic model) / a bare in-process loop that calls the
    same environment and the same synthetic policy directly (no executor, no litellm, no Ray);
(b) with a simulated model latency L per call and C rollouts in flight: achieved model calls/s divided
    by the ideal C/L (target >= 0.8 at C=16, L=200 ms). The calls counted are the rollouts' recorded
    turns; the same jobs run once in-process through the same executor with a counting client, and
    the bench stops unless the model calls made equal the turns counted (one call per turn: a rollout
    makes no hidden calls, e.g. the testbed's counterfactual, which analysis computes lazily);
(c) the gateway's CPU time per model call, beside litellm's own `mock_response` call;
(d) blocking tools: C rollouts of the code-refactoring family (tests run in the sandbox's subprocess)
    and of the browser family on headless Chromium, in flight at once on one executor — one event
    loop, as in one pool actor — with a simulated model latency. L_i is the latency-bound time of
    rollout i: its model calls x the latency, plus its own time run alone at zero latency (tools,
    checker, CPU). The ideal is C rollouts at a time, each taking its L_i (the jobs' makespan on C
    slots, i.e. throughput C/L); the figure is achieved / ideal, target >= 0.8. It is measured with
    blocking tools run off the loop (the executor's tool threads) and inline on the loop
    (`tool_threads=0`, the behaviour before), in the same run.

Synthetic models are a testbed: these figures measure the plumbing, not any real model.
Usage: python bench/rollout_overhead.py [--n 100] [--latency-ms 200] [--concurrency 16]
       [--cases pool,latency,gateway,blocking] [--blocking-n 16] [--blocking-concurrency 8]
       [--families refactor,browser] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import heapq
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from coevolve.agents.executor import TASK_ID_LINE, openai_tool
from coevolve.tasks import get_family
from coevolve.testbed.respond import respond

MODEL = "synthetic/weak"
CASES = ("pool", "latency", "gateway", "blocking")
LATENCY_ENV = "COEVOLVE_SYNTHETIC_LATENCY_MS"


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def bare_loop(instances, harness) -> tuple[float, int]:
    """The same env and policy, called directly: the floor any rollout system pays."""
    fam = get_family("iot")
    calls = 0
    started = time.perf_counter()
    for inst in instances:
        env = fam.make_env(inst)
        tools = [openai_tool(t) for t in harness.tools]
        messages = [
            {"role": "system", "content": harness.render_system()},
            {"role": "user", "content": f"{inst.instruction}\n\n{TASK_ID_LINE.format(id=inst.id)}"},
        ]
        for _ in range(harness.max_turns):
            reply = respond(MODEL.split("/")[1], messages, tools, seed=0)
            calls += 1
            messages.append(reply.message)
            finished = False
            for c in reply.message.get("tool_calls") or ():
                fn = c["function"]
                try:
                    args = json.loads(fn["arguments"])
                except json.JSONDecodeError:
                    args = {}
                r = env.call(fn["name"], args)
                finished |= r.finished
                messages.append({"role": "tool", "tool_call_id": c["id"], "content": r.content})
            if finished:
                break
        fam.check(env)
    return time.perf_counter() - started, calls


def gateway_cpu_ms(n: int = 300) -> tuple[float, float]:
    from coevolve.services.gateway import Gateway
    from coevolve.services.providers import litellm_lib

    gateway, litellm = Gateway(), litellm_lib()
    msgs = [{"role": "system", "content": "x"}, {"role": "user", "content": "go (Task id: iot/val/0)"}]

    async def per_call(fn) -> float:
        for _ in range(20):
            await fn()
        t = time.process_time()
        for _ in range(n):
            await fn()
        return (time.process_time() - t) / n * 1000

    async def both() -> tuple[float, float]:
        ours = await per_call(lambda: gateway.acomplete("synthetic/finish-only", msgs, []))
        mock = await per_call(
            lambda: litellm.acompletion(model="openai/gpt-4o-mini", messages=msgs, mock_response="done")
        )
        return ours, mock

    return asyncio.run(both())


class CountingClient:
    """The gateway, counting model calls (the oracle calls of a failed rollout's analysis included)."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.calls = 0

    async def acomplete(self, *args: Any, **kw: Any) -> Any:
        self.calls += 1
        return await self.inner.acomplete(*args, **kw)


def calls_per_turn(instances: list[Any], harness: Any) -> tuple[int, int]:
    """(model calls made, turns recorded) by the executor for these rollouts (seed 0, zero latency, in
    process): the work case (b) times in the pool, counted at the client."""
    from coevolve.agents.executor import Executor
    from coevolve.services.gateway import Gateway

    client = CountingClient(Gateway())

    async def all_of_them() -> list[Any]:
        ex = Executor(client)
        try:
            return await asyncio.gather(*(ex.rollout(i, harness, MODEL, 0) for i in instances))
        finally:
            ex.close()

    before = os.environ.get(LATENCY_ENV)
    os.environ[LATENCY_ENV] = "0"
    try:
        trajs = asyncio.run(all_of_them())
    finally:
        if before is None:
            del os.environ[LATENCY_ENV]
        else:
            os.environ[LATENCY_ENV] = before
    return client.calls, sum(len(t.turns) for t in trajs)


def ideal_makespan(bounds: list[float], concurrency: int) -> float:
    """The jobs in submission order on `concurrency` slots, each taking its latency-bound time."""
    slots = [0.0] * min(concurrency, len(bounds))
    for b in bounds:
        heapq.heappush(slots, heapq.heappop(slots) + b)
    return max(slots)


def blocking_case(family: str, n: int, concurrency: int, latency_ms: float, repeats: int) -> dict[str, Any]:
    """(d) for one family: achieved / ideal with blocking tools off the loop and inline."""
    from coevolve.agents.executor import Executor
    from coevolve.services.gateway import Gateway

    fam = get_family(family)
    harness = fam.baseline_harness()
    instances = [i for s in ("val", "test", "train") for i in fam.generate(s)][:n]
    client = CountingClient(Gateway())

    async def alone(ex: Executor) -> tuple[list[float], list[int]]:
        own, calls = [], []
        for inst in instances:
            c, t = client.calls, time.perf_counter()
            await ex.rollout(inst, harness, MODEL, 0)
            own.append(time.perf_counter() - t)
            calls.append(client.calls - c)
        return own, calls

    async def together(ex: Executor, jobs: list[Any]) -> float:
        sem = asyncio.Semaphore(concurrency)

        async def one(inst: Any) -> None:
            async with sem:
                await ex.rollout(inst, harness, MODEL, 0)

        t = time.perf_counter()
        await asyncio.gather(*(one(i) for i in jobs))
        return time.perf_counter() - t

    def timed(threads: int | None, jobs: list[Any]) -> float:
        ex = Executor(client, tool_threads=threads)
        try:
            return asyncio.run(together(ex, jobs))
        finally:
            ex.close()

    latency_s = latency_ms / 1000
    out: dict[str, Any] = {"family": family, "rollouts": n, "concurrency": concurrency, "latency_ms": latency_ms}
    os.environ[LATENCY_ENV] = "0"
    say(f"  {family}: warm-up ({concurrency} rollouts at once: imports, the sandbox, the browser's pages)")
    timed(None, (instances * concurrency)[:concurrency])
    say(f"  {family}: {n} rollouts alone at zero latency")
    ex = Executor(client)
    own, calls = asyncio.run(alone(ex))
    ex.close()
    bounds = [m * latency_s + t for m, t in zip(calls, own, strict=True)]
    ideal_s = ideal_makespan(bounds, concurrency)
    out.update(
        model_calls=sum(calls),
        own_time_s=round(sum(own), 3),
        mean_bound_s=round(sum(bounds) / n, 3),
        ideal_s=round(ideal_s, 3),
        ideal_rollouts_per_s=round(n / ideal_s, 3),
        # what the ratio can reach if the rollouts' own work (their tools) can only run one at a time
        serial_bound_ratio=round(min(1.0, ideal_s / sum(own)), 3),
    )
    os.environ[LATENCY_ENV] = str(latency_ms)
    walls: dict[str, list[float]] = {"off_loop": [], "inline": []}
    try:
        for r in range(repeats):  # alternate, so that a drift in machine load hits both alike
            for label, threads in (("inline", 0), ("off_loop", None)) if r % 2 else (("off_loop", None), ("inline", 0)):
                say(f"  {family}: {n} rollouts, {concurrency} at a time, L={latency_ms:.0f} ms/call, tools {label}")
                before = client.calls
                walls[label].append(timed(threads, instances))
                assert client.calls - before == sum(calls), (client.calls - before, sum(calls))  # the same work
    finally:
        os.environ[LATENCY_ENV] = "0"
    for label, ws in walls.items():
        wall = min(ws)
        out[label] = {"wall_s": round(wall, 3), "rollouts_per_s": round(n / wall, 3), "ratio": round(ideal_s / wall, 3)}
    return out


def blocking_cases(args: argparse.Namespace) -> list[dict[str, Any]]:
    from coevolve.services.logs import configure_logging

    configure_logging(json_lines=False, level="error")
    knobs = (args.blocking_n, args.blocking_concurrency, args.latency_ms, args.repeats)
    results = []
    for family in args.families.split(","):
        if family != "browser":
            results.append(blocking_case(family, *knobs))
            continue
        from coevolve.tasks.browser import BrowserFamily, ChromiumBrowser, chromium_available

        if not chromium_available():
            say("  browser: skipped (no Chromium or no playwright)")
            continue
        fam = get_family("browser")
        browser = ChromiumBrowser()
        fam.make_env = functools.partial(BrowserFamily.make_env, fam, backend="chromium", browser=browser)  # type: ignore[method-assign]
        try:
            results.append(blocking_case(family, *knobs))
        finally:
            del fam.make_env
            browser.close()
    return results


def print_blocking(results: list[dict[str, Any]]) -> None:
    for r in results:
        name = "browser (Chromium)" if r["family"] == "browser" else r["family"]
        print(
            f"(d) {name}: achieved / ideal C/L at C={r['concurrency']}, L={r['latency_ms']:.0f} ms/call: "
            f"tools off the loop {r['off_loop']['ratio']:.3f}, inline (before) {r['inline']['ratio']:.3f}"
            f"  [{r['rollouts']} rollouts, {r['model_calls']} model calls, mean L {r['mean_bound_s']:.2f} s; "
            f"ideal {r['ideal_rollouts_per_s']:.2f} rollouts/s, off the loop {r['off_loop']['rollouts_per_s']:.2f}, "
            f"inline {r['inline']['rollouts_per_s']:.2f}]"
        )
        print(
            f"    if the rollouts' own work (tools, checker: {r['own_time_s']:.1f} s in all) could run only one "
            f"at a time, the ratio could reach at most {r['serial_bound_ratio']:.3f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100, help="rollouts per measurement")
    ap.add_argument("--latency-ms", type=float, default=200.0)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated subset of {','.join(CASES)}")
    ap.add_argument("--blocking-n", type=int, default=16, help="rollouts per family in case (d)")
    ap.add_argument("--blocking-concurrency", type=int, default=8, help="rollouts in flight in case (d)")
    ap.add_argument("--families", default="refactor,browser", help="families of case (d)")
    ap.add_argument("--repeats", type=int, default=1, help="timed passes per mode in case (d); the best counts")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the lines")
    args = ap.parse_args()
    cases = set(args.cases.split(","))
    if cases - set(CASES):
        ap.error(f"unknown cases {sorted(cases - set(CASES))} (cases: {','.join(CASES)})")
    record: dict[str, Any] = {"model": MODEL, "synthetic_testbed": True}
    if "blocking" in cases:
        say("(d) blocking tools")
        record["blocking"] = blocking_cases(args)
    if cases & {"pool", "latency", "gateway"}:
        record.update(plumbing(args, cases))
    if args.json:
        print(json.dumps(record, indent=2))
        return
    print_plumbing(record, args)
    if "blocking" in cases:
        print_blocking(record["blocking"])


def plumbing(args: argparse.Namespace, cases: set[str]) -> dict[str, Any]:
    """(a), (b), (c) on the iot family."""
    from coevolve.services.logs import configure_logging

    configure_logging(json_lines=False, level="error")
    out: dict[str, Any] = {}
    fam = get_family("iot")
    harness = fam.baseline_harness()
    instances = (fam.generate("train") + fam.generate("val") + fam.generate("test"))[: args.n]
    if cases & {"pool", "latency"}:
        from coevolve.cluster.runtime import start_ray
        from coevolve.services.pools.rollouts import RolloutJob, RolloutPool

        start_ray(None, num_cpus=2)
        jobs = [RolloutJob(i, harness, MODEL, 0) for i in instances]
    if "pool" in cases:
        say("(a) pool against a bare loop")
        bare_s, bare_calls = bare_loop(instances, harness)
        pool = RolloutPool(2)
        pool.run(jobs[:4])  # warm: imports, first calls
        t = time.perf_counter()
        trajs = pool.run(jobs)
        pool_s = time.perf_counter() - t
        pool.shutdown()
        pool_calls = sum(len(tr.turns) for tr in trajs)
        assert pool_calls == bare_calls, (pool_calls, bare_calls)  # same work on both sides
        out["pool"] = {
            "rollouts": len(jobs), "model_calls": bare_calls, "ratio": round(bare_s / pool_s, 3),
            "pool_rollouts_per_s": round(len(jobs) / pool_s, 2), "bare_rollouts_per_s": round(len(jobs) / bare_s, 2),
        }
    if "latency" in cases:
        say("(b) pool under model latency")
        made, counted = calls_per_turn(instances, harness)
        # the calls timed must be the calls counted: one model call per recorded turn, nothing hidden
        assert made == counted, f"the executor made {made} model calls for {counted} recorded turns"
        latency_s = args.latency_ms / 1000
        slow = RolloutPool(2, env={LATENCY_ENV: str(args.latency_ms)})
        slow.run(jobs[:2])
        t = time.perf_counter()
        trajs = slow.run(jobs, max_in_flight=args.concurrency)
        slow_s = time.perf_counter() - t
        slow.shutdown()
        pool_turns = sum(len(tr.turns) for tr in trajs)
        assert pool_turns == counted, (pool_turns, counted)  # the pool ran the same rollouts
        achieved = pool_turns / slow_s
        ideal = args.concurrency / latency_s
        out["latency"] = {
            "concurrency": args.concurrency, "latency_ms": args.latency_ms, "ratio": round(achieved / ideal, 3),
            "calls_per_s": round(achieved, 2), "ideal_calls_per_s": round(ideal, 2), "model_calls": made,
        }
    if "gateway" in cases:
        say("(c) gateway CPU per call")
        ours_ms, mock_ms = gateway_cpu_ms()
        out["gateway"] = {"gateway_ms": round(ours_ms, 3), "mock_response_ms": round(mock_ms, 3), "ratio": round(ours_ms / mock_ms, 3)}
    return out


def print_plumbing(record: dict[str, Any], args: argparse.Namespace) -> None:
    if "pool" in record:
        p = record["pool"]
        print(f"rollouts: {p['rollouts']} x {MODEL} on iot, {p['model_calls']} model calls (synthetic testbed)")
        print(
            f"(a) pool(2 workers) / bare in-process loop throughput: {p['ratio']:.3f}"
            f"  [pool {p['pool_rollouts_per_s']:.1f} rollouts/s, bare {p['bare_rollouts_per_s']:.1f} rollouts/s]"
        )
    if "latency" in record:
        b = record["latency"]
        print(
            f"(b) achieved / ideal C/L at C={b['concurrency']}, L={b['latency_ms']:.0f} ms: {b['ratio']:.3f}"
            f"  [{b['calls_per_s']:.1f} of {b['ideal_calls_per_s']:.1f} calls/s; "
            f"{b['model_calls']} model calls, one per recorded turn]"
        )
    if "gateway" in record:
        c = record["gateway"]
        print(
            f"(c) CPU per model call: gateway {c['gateway_ms']:.2f} ms, litellm mock_response {c['mock_response_ms']:.2f} ms"
            f"  (ratio {c['ratio']:.2f})"
        )


if __name__ == "__main__":
    main()
