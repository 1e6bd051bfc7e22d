"""Serving overhead: generated tokens/s through Ray Serve + HTTP + litellm vs vLLM's offline `LLM`.

Same model, same prompts (chat messages with tools), greedy, a fixed number of new tokens per prompt
(`ignore_eos`), all prompts in flight at once on both sides: the offline engine gets them as one
`LLM.chat` batch, the served side as concurrent `litellm.acompletion` calls (the gateway's route).
The offline engine runs first and is shut down before Serve starts, so both get the whole machine.
Printed: both rates and their ratio served / offline.

    python bench/serve_overhead.py [--model MODEL_DIR] [--prompts 16] [--tokens 64] [--json]

Output: progress lines on stderr, the figures on stdout (`--json`: one JSON object on stdout). vLLM
logs warnings only; Ray Serve's controller, proxy and replica log into Ray's log folder, named in a
progress line, not onto the terminal.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("LITELLM_LOG", "ERROR")  # its INFO lines trip the JSON log formatter vLLM installs


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def prompts(n: int) -> list[list[dict]]:
    from tests.lifecycle_rows import SYSTEM

    machines = [f"m{i}" for i in range(n)]
    return [
        [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Check machine {m} for anomalies."},
        ]
        for m in machines
    ]


def offline(model: str, msgs: list[list[dict]], tokens: int, max_len: int) -> tuple[float, int]:
    from vllm import LLM, SamplingParams

    from tests.lifecycle_rows import TOOLS

    llm = LLM(model=model, dtype="float32", enforce_eager=True, max_model_len=max_len, max_num_seqs=len(msgs))
    sp = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True)
    llm.chat(msgs[:2], sp, tools=TOOLS, use_tqdm=False)  # warm-up
    t0 = time.perf_counter()
    outs = llm.chat(msgs, sp, tools=TOOLS, use_tqdm=False)
    dt = time.perf_counter() - t0
    n = sum(len(o.outputs[0].token_ids) for o in outs)
    del llm
    gc.collect()
    return n / dt, n


async def _served(route: dict, msgs: list[list[dict]], tokens: int) -> tuple[float, int]:
    import litellm

    from tests.lifecycle_rows import TOOLS

    async def one(m):
        return await litellm.acompletion(
            messages=m,
            tools=TOOLS,
            temperature=0.0,
            max_tokens=tokens,
            extra_body={"ignore_eos": True},
            **route,
        )

    await asyncio.gather(*(one(m) for m in msgs[:2]))  # warm-up
    t0 = time.perf_counter()
    resps = await asyncio.gather(*(one(m) for m in msgs))
    dt = time.perf_counter() - t0
    n = sum(r.usage.completion_tokens for r in resps)
    return n / dt, n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", help="model folder (default: a fresh tiny model)")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--max-len", type=int, default=1024)
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    args = ap.parse_args()

    from coevolve.services.logs import (
        configure_logging,
        output_to_file,
        quiet_libraries,
        quiet_serve_driver,
        ray_log_dir,
    )

    quiet_libraries()  # before vLLM, Ray Serve and litellm are imported
    configure_logging(json_lines=False, level="warning")
    from coevolve.services.serving.models import make_tiny

    work = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    model = args.model or str(make_tiny(work / "tiny"))
    msgs = prompts(args.prompts)

    log = work / "offline-vllm.log"
    progress(f"bench: {args.prompts} prompts x {args.tokens} tokens; vLLM offline LLM first (its output: {log}) ...")
    try:
        with output_to_file(log):
            off_rate, off_n = offline(model, msgs, args.tokens, args.max_len)
    except BaseException:
        progress(f"the offline run failed; the end of {log}:\n" + "\n".join(log.read_text().splitlines()[-30:]))
        raise
    progress(f"offline LLM: {off_n} tokens, {off_rate:.1f} tok/s; now Ray Serve + HTTP + litellm ...")

    from coevolve.cluster.runtime import start_ray, stop_ray
    from coevolve.services.serving.app import (
        apply_serve_env_defaults,
        litellm_route,
        load_serve_config,
        start_serving,
        stop_serving,
    )
    from coevolve.values import ModelRef

    apply_serve_env_defaults()
    start_ray(None, args.cpus, log_to_driver=False)  # Serve's and vLLM's worker output: Ray's log files
    quiet_serve_driver()
    progress(f"Ray started; Serve and replica logs in {ray_log_dir()}")
    cfg = load_serve_config(
        ROOT / "deploy/serve/cpu-tiny.yaml",
        [
            "port=0",
            f"models.0.source={model}",
            "models.0.model_id=bench",
            f"models.0.engine_cpus={args.cpus}",
            f"models.0.engine.max_model_len={args.max_len}",
            f"models.0.engine.max_num_seqs={args.prompts}",
        ],
    )
    store = work / "store"
    progress("deploying the Serve app (vLLM start-up in a replica) ...")
    start_serving(cfg, store)
    try:
        route = litellm_route(ModelRef.parse("vllm/bench"), store)
        srv_rate, srv_n = asyncio.run(_served(route, msgs, args.tokens))
    finally:
        with output_to_file(work / "shutdown.log"):  # Serve's and the raylet's goodbyes
            stop_serving(store)
            stop_ray()
    progress(f"Ray Serve + HTTP + litellm: {srv_n} tokens, {srv_rate:.1f} tok/s")
    out = {
        "model": model,
        "prompts": args.prompts,
        "tokens_per_prompt": args.tokens,
        "offline_tok_s": round(off_rate, 1),
        "served_tok_s": round(srv_rate, 1),
        "ratio": round(srv_rate / off_rate, 3),
    }
    if args.json:
        print(json.dumps(out))
        return
    print(
        f"served / offline generated tokens/s: {out['ratio']:.2f} "
        f"(served {out['served_tok_s']}, offline {out['offline_tok_s']} tok/s; {args.prompts} prompts x {args.tokens} tokens)"
    )


if __name__ == "__main__":
    main()
