"""Share of assistant turns carrying a schema-valid tool call, free vs constrained decoding (issue 22.1).

One model, one family: `--n` val instances x `--seeds` seeds rolled out twice through the executor and
the model gateway, under the family's baseline harness (free decoding) and under the same harness with
one edit, `set_decoding` constrained (same temperature and reply cap in both). Per mode, over all the
assistant turns of the rollouts:

- valid: the turn carries at least one tool call and every call is a schema-valid call of an offered
  tool (its name is a harness tool, its arguments satisfy that tool's JSON schema);
- one valid: exactly one call, schema-valid (what constrained mode promises);
- unreadable: constrained answers the gateway could not read as a call (cut at the cap, or a server
  that ignored the schema; the `constrained_error` event);

with 95% Wilson intervals, beside the pass rate and the mean number of turns.

    .venv/bin/python bench/constrained_calls.py                                  # synthetic/weak on iot
    .venv/bin/python bench/constrained_calls.py --family payroll --model synthetic/expert
    # a served model: a server the gateway finds ($COEVOLVE_SERVE_URL, or --store's serve.json) ...
    .venv/bin/python bench/constrained_calls.py --model vllm/smollm2 --store .coevolve
    # ... or one started here on an embedded Ray and stopped at the end
    .venv/bin/python bench/constrained_calls.py --model vllm/smollm2 \\
        --serve deploy/serve/cpu-smollm2.yaml -s models.0.source=.coevolve/models/smollm2

Progress on stderr; the table (or `--json`: one JSON object) on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections import Counter
from contextlib import contextmanager
from math import sqrt
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
Z95 = 1.959964


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def turn_verdicts(traj: Any, tools: list[dict[str, Any]]) -> list[tuple[bool, bool]]:
    """(valid, exactly one valid call) for each assistant turn of `traj`."""
    from coevolve.agents.executor import assistant_positions
    from coevolve.llm.constrained import call_error

    out = []
    for pos in assistant_positions(traj.messages):
        calls = traj.messages[pos].get("tool_calls") or []
        ok = []
        for c in calls:
            fn = c.get("function") or {}
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except (TypeError, json.JSONDecodeError):
                ok.append(False)
                continue
            ok.append(call_error(fn.get("name"), args, tools) is None)
        valid = bool(ok) and all(ok)
        out.append((valid, valid and len(ok) == 1))
    return out


def harnesses(family: str, temperature: float | None, max_tokens: int | None, max_turns: int | None) -> dict[str, Any]:
    """mode -> harness: the baseline (free; with the given temperature and cap, if any) and the same
    with constrained tool calls."""
    from coevolve.edits import apply_edit, edit_from_json
    from coevolve.tasks import get_family

    base = get_family(family).baseline_harness()
    knobs = {k: v for k, v in (("temperature", temperature), ("max_tokens", max_tokens)) if v is not None}
    extra = [{"op": "set_max_turns", "max_turns": max_turns}] if max_turns else []
    free = apply_edit(base, edit_from_json({"ops": [{"op": "set_decoding", **knobs}, *extra]})) if knobs or extra else base
    constrained = apply_edit(base, edit_from_json({"ops": [{"op": "set_decoding", "tool_calls": "constrained", **knobs}, *extra]}))
    return {"free": free, "constrained": constrained}


def measure(model: str, family: str, n: int, seeds: int, harness: Any, concurrency: int) -> dict[str, Any]:
    from coevolve.agents.executor import Executor, openai_tool
    from coevolve.services.gateway import Gateway
    from coevolve.tasks import get_family

    tools = [openai_tool(t) for t in harness.tools]
    jobs = [(inst, s) for inst in get_family(family).generate("val", n) for s in range(seeds)]
    ex = Executor(Gateway(timeout_s=600))
    gate = asyncio.Semaphore(concurrency)

    async def rollout(inst: Any, seed: int) -> Any:
        async with gate:
            return await ex.rollout(inst, harness, model, seed)

    async def run() -> list[Any]:
        return await asyncio.gather(*(rollout(i, s) for i, s in jobs))

    started = time.perf_counter()
    try:
        trajs = asyncio.run(run())
    finally:
        ex.close()
    wall = time.perf_counter() - started
    verdicts = [v for t in trajs for v in turn_verdicts(t, tools)]
    turns, valid, one = len(verdicts), sum(v for v, _ in verdicts), sum(o for _, o in verdicts)
    scored = [t for t in trajs if t.error != "infra"]
    return {
        "harness_id": harness.id,
        "decoding": harness.decoding.describe(),
        "rollouts": len(trajs),
        "infra": len(trajs) - len(scored),
        "passed": sum(t.passed for t in scored),
        "pass_rate": sum(t.passed for t in scored) / len(scored) if scored else 0.0,
        "turns": turns,
        "mean_turns": turns / len(trajs) if trajs else 0.0,
        "valid": valid,
        "valid_share": valid / turns if turns else 0.0,
        "valid_ci95": wilson(valid, turns),
        "one_valid": one,
        "one_valid_share": one / turns if turns else 0.0,
        "one_valid_ci95": wilson(one, turns),
        "unreadable": sum("constrained_error" in turn.events for t in trajs for turn in t.turns),
        "calls_by_tool": dict(Counter(c["name"] for t in trajs for turn in t.turns for c in turn.tool_calls).most_common()),
        "errors": sorted({t.error_detail[:160] for t in trajs if t.error == "infra"})[:3],
        "wall_s": round(wall, 1),
    }


@contextmanager
def served(config: str | None, overrides: list[str]):
    """A Serve app started on an embedded Ray for the run (`--serve`), or nothing."""
    if config is None:
        yield
        return
    from coevolve.cluster.runtime import start_ray, stop_ray
    from coevolve.services.serving.app import load_serve_config, start_serving, stop_serving
    from coevolve.store.store import HarnessStore

    cfg = load_serve_config(config, ["port=0", *overrides])
    store = Path(tempfile.mkdtemp(prefix="constrained-bench-"))
    HarnessStore(store).close()
    os.environ["COEVOLVE_STORE"] = str(store)
    os.environ.pop("COEVOLVE_SERVE_URL", None)
    start_ray(None, None, log_to_driver=False)  # replica logs stay in Ray's log folder, off stdout
    try:
        progress(f"starting the Serve app from {config} ...")
        state = start_serving(cfg, store)
        progress(f"serving {', '.join(state['models'])} at {state['url']} (ready in {state['ready_s']}s)")
        yield
    finally:
        stop_serving(store)
        stop_ray()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="synthetic/weak")
    ap.add_argument("--family", default="iot")
    ap.add_argument("--n", type=int, default=20, help="val instances")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--temperature", type=float, default=None, help="both modes (default: the provider's)")
    ap.add_argument("--max-tokens", type=int, default=None, help="reply cap, both modes (default: the server's)")
    ap.add_argument("--max-turns", type=int, default=None, help="turn limit, both modes (default: the harness's)")
    ap.add_argument("--concurrency", type=int, default=16, help="rollouts in flight")
    ap.add_argument("--store", default=None, help="store whose serve.json names the server (vllm/ models)")
    ap.add_argument("--serve", default=None, help="start this Serve profile for the run (deploy/serve/*.yaml)")
    ap.add_argument("-s", "--set", dest="overrides", action="append", default=[], help="key=value for --serve")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    from coevolve.edits import EditError
    from coevolve.services.logs import configure_logging
    from coevolve.services.serving.app import ServingError
    from coevolve.tasks import family_names

    configure_logging(json_lines=False, level="warning")
    if args.family not in family_names():
        print(f"error: unknown family {args.family!r} (families: {', '.join(family_names())})", file=sys.stderr)
        return 2
    if args.n < 1 or args.seeds < 1 or args.concurrency < 1:
        print("error: --n, --seeds and --concurrency must be at least 1", file=sys.stderr)
        return 2
    if args.store:
        os.environ["COEVOLVE_STORE"] = args.store
    try:
        modes = harnesses(args.family, args.temperature, args.max_tokens, args.max_turns)
    except EditError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    results: dict[str, Any] = {}
    try:
        with served(args.serve, args.overrides):
            for mode, harness in modes.items():
                progress(f"{mode}: {args.n} x {args.seeds} rollouts of {args.model} on {args.family} ...")
                results[mode] = measure(args.model, args.family, args.n, args.seeds, harness, args.concurrency)
    except (ServingError, ValueError) as e:  # DecodingUnsupported is a ValueError
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    out = {"model": args.model, "family": args.family, "n": args.n, "seeds": args.seeds,
           "temperature": args.temperature, "max_tokens": args.max_tokens, "max_turns": args.max_turns,
           "modes": results}
    if args.json:
        print(json.dumps(out, sort_keys=True))
        return 0
    print(f"{args.model} on {args.family}: {args.n} val instances x {args.seeds} seeds, "
          f"temperature {args.temperature if args.temperature is not None else 'provider default'}, "
          f"reply cap {args.max_tokens or 'server default'}")
    print(f"{'mode':12} {'turns':>6} {'valid turns [95% CI]':>28} {'one valid call [95% CI]':>28} "
          f"{'unreadable':>10} {'pass':>7} {'turns/rollout':>13} {'wall':>7}")
    for mode, r in results.items():
        v, o = r["valid_ci95"], r["one_valid_ci95"]
        print(f"{mode:12} {r['turns']:6d} {r['valid_share']:9.1%} [{v[0]:5.1%}, {v[1]:5.1%}] {r['valid']:5d}"
              f" {r['one_valid_share']:9.1%} [{o[0]:5.1%}, {o[1]:5.1%}] {r['one_valid']:5d}"
              f" {r['unreadable']:10d} {r['pass_rate']:7.1%} {r['mean_turns']:13.1f} {r['wall_s']:6.1f}s")
        if r["calls_by_tool"]:
            print(f"  calls: {', '.join(f'{k} {v}' for k, v in r['calls_by_tool'].items())}")
        if r["infra"]:
            print(f"  {r['infra']} infra rollouts: {r['errors']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
