"""Rollout overhead: what the pool, the executor and the gateway cost, as ratios measured in one run.

(a) pool throughput (2 workers, zero-latency synthetic model) / a bare in-process loop that calls the
    same environment and the same synthetic policy directly (no executor, no litellm, no Ray);
(b) with a simulated model latency L per call and C rollouts in flight: achieved model calls/s divided
    by the ideal C/L (target >= 0.8 at C=16, L=200 ms);
(c) the gateway's CPU time per model call, beside litellm's own `mock_response` call.

Synthetic models are a testbed: these figures measure the plumbing, not any real model.
Usage: python bench/rollout_overhead.py [--n 100] [--latency-ms 200] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from agents.executor import TASK_ID_LINE, openai_tool
from agents.synthetic import respond
from tasks import get_family

MODEL = "synthetic/weak"


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
    from services.gateway import Gateway, _lib

    gateway, litellm = Gateway(), _lib()
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100, help="rollouts per measurement")
    ap.add_argument("--latency-ms", type=float, default=200.0)
    ap.add_argument("--concurrency", type=int, default=16)
    args = ap.parse_args()

    from cluster.runtime import start_ray
    from services.logs import configure_logging
    from services.pool import RolloutJob, RolloutPool

    configure_logging(json_lines=False, level="error")
    fam = get_family("iot")
    harness = fam.baseline_harness()
    instances = (fam.generate("train") + fam.generate("val") + fam.generate("test"))[: args.n]

    bare_s, bare_calls = bare_loop(instances, harness)
    start_ray(None, num_cpus=2)
    jobs = [RolloutJob(i, harness, MODEL, 0) for i in instances]

    pool = RolloutPool(2)
    pool.run(jobs[:4])  # warm: imports, first calls
    t = time.perf_counter()
    trajs = pool.run(jobs)
    pool_s = time.perf_counter() - t
    pool.shutdown()
    pool_calls = sum(len(tr.turns) for tr in trajs)
    assert pool_calls == bare_calls, (pool_calls, bare_calls)  # same work on both sides

    latency_s = args.latency_ms / 1000
    slow = RolloutPool(2, env={"COEVOLVE_SYNTHETIC_LATENCY_MS": str(args.latency_ms)})
    slow.run(jobs[:2])
    t = time.perf_counter()
    trajs = slow.run(jobs, max_in_flight=args.concurrency)
    slow_s = time.perf_counter() - t
    slow.shutdown()
    achieved = sum(len(tr.turns) for tr in trajs) / slow_s
    ideal = args.concurrency / latency_s

    ours_ms, mock_ms = gateway_cpu_ms()

    print(f"rollouts: {len(instances)} x {MODEL} on iot, {bare_calls} model calls (synthetic testbed)")
    print(
        f"(a) pool(2 workers) / bare in-process loop throughput: {bare_s / pool_s:.3f}"
        f"  [pool {len(jobs) / pool_s:.1f} rollouts/s, bare {len(jobs) / bare_s:.1f} rollouts/s]"
    )
    print(
        f"(b) achieved / ideal C/L at C={args.concurrency}, L={args.latency_ms:.0f} ms: {achieved / ideal:.3f}"
        f"  [{achieved:.1f} of {ideal:.1f} calls/s]"
    )
    print(
        f"(c) CPU per model call: gateway {ours_ms:.2f} ms, litellm mock_response {mock_ms:.2f} ms"
        f"  (ratio {ours_ms / mock_ms:.2f})"
    )


if __name__ == "__main__":
    main()
