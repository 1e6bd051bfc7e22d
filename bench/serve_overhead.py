"""The served weak model against this machine's ceiling: prefill, decode and adapters as shares of what
torch's bf16 GEMMs at the model's shapes can do here, measured in the same run.

**Ceiling** (torch, `--threads` threads, the served dtype): the matrix products the model cannot skip,
timed as plain torch products at its shapes (from its config.json):
- linear: q, k, v, o, gate, up, down of every layer, and the LM head for the positions that produce a
  token (GEMMs on distinct weight tensors, so no layer reads another's from cache);
- attention: every layer's Q·Kᵀ and P·V (batched over key/value heads, the query heads of a group
  stacked) on distinct K/V tensors per layer and sequence, over the prompt's length; in prefill only
  the causal half counts (half the timed full square).
The three rates:
- prefill: one prompt of the served prompt's length through every layer (LM head on its last position);
- decode, 16 ways: 16 sequences, one token each over a context of the prompt's length;
- decode, 1 way: one sequence, one token (memory-bound: every weight and the sequence's K/V are read).
Norms, rotary embeddings, activations and sampling are left out, so the ceiling is high and the ratios
conservative; `--json` also gives the linear-only ceiling (`ceiling_linear_tok_s`).
The ceiling is measured before the engine starts and again after it stops; the larger is used.

**Served** (the project's path: Ray Serve LLM app from `--config`, HTTP, litellm through
`litellm_route`, as the model gateway calls it), on one real rollout prompt: `--family`'s L0 oracle
harness (its system prompt and tools, constrained decoding's schema) and its first val instance:
- prefill: a new prompt (a nonce at its start defeats the prefix cache), one token out: prompt tokens/s;
- decode, 1 way: the same cached prompt with 65 vs 1 tokens out: 64 / the difference;
- decode, 16 ways, free: 16 prompts (cached), all in flight, 64 tokens each (`ignore_eos`);
- decode, 16 ways, constrained: the same with the harness's tool-call schema (`response_format`),
  tokens out / time (the grammar ends each reply: fewer than 64 tokens);
- adapters: a random LoRA adapter (rank 8 on every linear layer) made here, asked for as LoRA on the
  request and as the same adapter merged into the weights (`merged_adapters`), prefill and 1-way decode,
  each as a ratio to the base model's.

    .venv/bin/python bench/serve_overhead.py --model .coevolve/models/smollm2 [--json]

Progress on stderr; a table of tok/s, ceiling and ratio on stdout (`--json`: one JSON object). Needs the
machine to itself: anything else running lowers the served figures, not the ceiling's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("LITELLM_LOG", "ERROR")

ADAPTER = "bench-random-r8"
DECODE_TOKENS, WAYS, REPEATS = 64, 16, 3


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------- ceiling
def linear_shapes(config: dict[str, Any]) -> list[tuple[int, int]]:
    """(in, out) of every linear layer of one decoder layer of a Llama/Qwen2-style model."""
    h, inter = config["hidden_size"], config["intermediate_size"]
    heads = config["num_attention_heads"]
    kv = config.get("num_key_value_heads", heads)
    head_dim = config.get("head_dim") or h // heads
    return [(h, heads * head_dim), (h, kv * head_dim), (h, kv * head_dim), (heads * head_dim, h), (h, inter), (h, inter), (inter, h)]


def gemm_seconds(config: dict[str, Any], rows: int, head_rows: int, dtype: Any, repeats: int = 5) -> float:
    """Best time of the model's linear layers on `rows` positions (LM head on `head_rows`)."""
    import torch

    layers = config["num_hidden_layers"]
    weights = [torch.randn(o, i, dtype=dtype) * 0.02 for i, o in linear_shapes(config)]
    per_layer = [w.clone() for _ in range(layers) for w in weights]  # distinct tensors: no cache reuse across layers
    head = torch.randn(config["vocab_size"], config["hidden_size"], dtype=dtype) * 0.02
    x = torch.randn(rows, config["hidden_size"], dtype=dtype)
    xi = torch.randn(rows, config["intermediate_size"], dtype=dtype)
    best = float("inf")
    with torch.inference_mode():
        for _ in range(repeats + 1):
            t0 = time.perf_counter()
            for w in per_layer:
                torch.nn.functional.linear(xi if w.shape[1] == config["intermediate_size"] else x, w)
            torch.nn.functional.linear(x[:head_rows], head)
            best = min(best, time.perf_counter() - t0)
    return best


def attention_seconds(config: dict[str, Any], queries: int, context: int, sequences: int, dtype: Any, repeats: int = 5) -> float:
    """Best time of every layer's attention products, Q·Kᵀ then P·V, for `sequences` sequences of `queries`
    new positions over `context` positions (grouped-query: a group's query heads stacked on its K/V head)."""
    import torch

    layers, heads = config["num_hidden_layers"], config["num_attention_heads"]
    kv = config.get("num_key_value_heads", heads)
    d = config.get("head_dim") or config["hidden_size"] // heads
    q = torch.randn(sequences * kv, heads // kv * queries, d, dtype=dtype)
    keys = [torch.randn(sequences * kv, d, context, dtype=dtype) for _ in range(layers)]
    values = [torch.randn(sequences * kv, context, d, dtype=dtype) for _ in range(layers)]
    best = float("inf")
    with torch.inference_mode():
        for _ in range(repeats + 1):
            t0 = time.perf_counter()
            for k, v in zip(keys, values, strict=True):
                torch.bmm(torch.bmm(q, k), v)
            best = min(best, time.perf_counter() - t0)
    return best


def ceiling(config: dict[str, Any], prompt_tokens: int, threads: int, dtype_name: str) -> dict[str, float]:
    """Tokens/s of prefill, 16-way and 1-way decode if the model did nothing but its linear and attention
    products at torch's speed here (`linear_*`: the linear layers alone)."""
    import torch

    torch.set_num_threads(threads)
    dtype = getattr(torch, dtype_name)
    linear = {
        "prefill": gemm_seconds(config, prompt_tokens, 1, dtype, repeats=3),
        "decode_16": gemm_seconds(config, WAYS, WAYS, dtype),
        "decode_1": gemm_seconds(config, 1, 1, dtype),
    }
    attention = {
        "prefill": attention_seconds(config, prompt_tokens, prompt_tokens, 1, dtype, repeats=3) / 2,  # causal half
        "decode_16": attention_seconds(config, 1, prompt_tokens, WAYS, dtype),
        "decode_1": attention_seconds(config, 1, prompt_tokens, 1, dtype),
    }
    tokens = {"prefill": prompt_tokens, "decode_16": WAYS, "decode_1": 1}
    return {**{k: tokens[k] / (linear[k] + attention[k]) for k in tokens},
            **{f"linear_{k}": tokens[k] / linear[k] for k in tokens}}


# -------------------------------------------------------------------------------------- served
def rollout_prompt(family: str) -> tuple[list[dict], list[dict], dict[str, Any]]:
    """The first turn's messages and tools of `family`'s first L0 val instance under the rule's oracle
    harness, and the constrained-call response_format of those tools."""
    from coevolve.agents.executor import TASK_ID_LINE, openai_tool
    from coevolve.llm.constrained import response_format
    from coevolve.tasks import get_family
    from coevolve.tasks.helpers import LEVELS, selection_harnesses

    fam, h = get_family(family), selection_harnesses(family)["oracle"]
    inst = fam.generate("val", 1, **LEVELS["L0"])[0]
    tools = [openai_tool(t) for t in h.tools]
    msgs = [{"role": "system", "content": h.render_system()},
            {"role": "user", "content": f"{inst.instruction}\n\n{TASK_ID_LINE.format(id=inst.id)}"}]
    return msgs, tools, response_format(tools)


def nonce_first(msgs: list[dict]) -> list[dict]:
    """A new prompt: a nonce at the start of the system message (nothing of it is in the prefix cache)."""
    return [{**msgs[0], "content": f"[{uuid.uuid4().hex[:8]}] {msgs[0]['content']}"}, *msgs[1:]]


def nonce_last(msgs: list[dict], i: int) -> list[dict]:
    """The same prompt but for its last words (a shared, cached prefix), one per in-flight sequence."""
    return [*msgs[:-1], {**msgs[-1], "content": f"{msgs[-1]['content']}\n(request {i})"}]


async def call(route: dict, msgs: list[dict], tools: list[dict], max_tokens: int, fmt: dict | None = None) -> tuple[float, Any]:
    import litellm

    extra: dict[str, Any] = {}
    if fmt is None:
        extra["extra_body"] = {"ignore_eos": True}
    else:
        extra["response_format"] = fmt
    t0 = time.perf_counter()
    r = await litellm.acompletion(messages=msgs, tools=tools, temperature=0.0, max_tokens=max_tokens, seed=0, **route, **extra)
    return time.perf_counter() - t0, r


async def served_rates(route: dict, msgs: list[dict], tools: list[dict], fmt: dict, full: bool) -> dict[str, float]:
    """Prefill and 1-way decode (and, with `full`, 16-way free and constrained decode) tok/s."""
    prefill = []
    for _ in range(REPEATS):
        dt, r = await call(route, nonce_first(msgs), tools, 1)
        prefill.append(r.usage.prompt_tokens / dt)
    cached = nonce_first(msgs)
    await call(route, cached, tools, 1)
    one = [(await call(route, cached, tools, 1))[0] for _ in range(REPEATS)]
    many = [(await call(route, cached, tools, DECODE_TOKENS + 1))[0] for _ in range(REPEATS)]
    out = {"prefill": statistics.median(prefill), "decode_1": DECODE_TOKENS / (statistics.median(many) - statistics.median(one)),
           "prompt_tokens": r.usage.prompt_tokens}
    if not full:
        return out
    batch = [nonce_last(cached, i) for i in range(WAYS)]
    await asyncio.gather(*(call(route, m, tools, 1) for m in batch))  # cache their prompts
    for key, f in (("decode_16", None), ("decode_16_constrained", fmt)):
        rates = []
        for _ in range(REPEATS):
            t0 = time.perf_counter()
            rs = await asyncio.gather(*(call(route, m, tools, DECODE_TOKENS, f) for m in batch))
            rates.append(sum(r.usage.completion_tokens for _, r in rs) / (time.perf_counter() - t0))
        out[key] = statistics.median(rates)
    return out


def lora_adapter(base: str, out: Path, rank: int, *, identity: bool = False) -> None:
    """A LoRA adapter of `rank` on every linear layer of the model at `base`, written to `out`: random
    (seed 0) so that it changes the model's output, or with `identity` peft's default initialisation
    (B = 0), which leaves the output unchanged."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    config = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=targets, init_lora_weights=identity)
    get_peft_model(model, config).save_pretrained(out)


def model_folder(path: str) -> Path | None:
    """`path` as a model folder, or None after saying on stderr how to import SmolLM2 there."""
    model = Path(path)
    if (model / "config.json").is_file():
        return model
    print(f"error: {model} is not a model folder (import SmolLM2: coevolve models import-smollm2 {model})", file=sys.stderr)
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=".coevolve/models/smollm2", help="model folder")
    ap.add_argument("--config", default=str(ROOT / "deploy/serve/cpu-smollm2.yaml"), help="serve profile")
    ap.add_argument("--family", default="iot", help="whose L0 oracle rollout prompt is served")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2, help="torch threads of the ceiling")
    ap.add_argument("--set", "-s", action="append", default=[], metavar="KEY=VALUE",
                    help="override the serve profile, e.g. models.0.engine.enforce_eager=false (repeatable)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    model = model_folder(a.model)
    if model is None:
        return 2

    from coevolve.services.logs import (
        configure_logging,
        output_to_file,
        quiet_libraries,
        quiet_serve_driver,
        ray_log_dir,
    )

    quiet_libraries()
    configure_logging(json_lines=False, level="warning")
    from coevolve.services.serving.app import load_serve_config

    cfg = load_serve_config(a.config, ["port=0", f"models.0.source={model.resolve()}", f"models.0.merged_adapters=[{ADAPTER}]", *a.set])
    dtype = str(cfg.models[0].engine.get("dtype", "bfloat16"))
    config = json.loads((model / "config.json").read_text())
    msgs, tools, fmt = rollout_prompt(a.family)
    from transformers import AutoTokenizer

    encoded = AutoTokenizer.from_pretrained(model).apply_chat_template(nonce_first(msgs), tools=tools, tokenize=True, return_dict=True)
    prompt_tokens = len(encoded["input_ids"])
    progress(f"ceiling: {dtype} GEMMs at {model.name}'s shapes on {a.threads} threads, prompt of {prompt_tokens} tokens ...")
    ceil = ceiling(config, prompt_tokens, a.threads, dtype)

    from coevolve.cluster.runtime import start_ray, stop_ray
    from coevolve.services.serving.app import (
        apply_serve_env_defaults,
        litellm_route,
        start_serving,
        stop_serving,
    )

    work = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    store = work / "store"
    (store / "adapters").mkdir(parents=True)
    progress("a random LoRA adapter (rank 8, every linear layer) ...")
    lora_adapter(str(model), store / "adapters" / ADAPTER, 8)
    apply_serve_env_defaults()
    start_ray(None, a.threads, log_to_driver=False)
    quiet_serve_driver()
    progress(f"deploying {a.config} with the adapter merged beside the base (logs: {ray_log_dir()}) ...")
    try:
        start_serving(cfg, store)
        mid = cfg.models[0].model_id
        base = litellm_route(f"vllm/{mid}", store)
        lora = {**base, "model": f"openai/{mid}:{ADAPTER}"}  # the adapter on the request (vLLM's LoRA path)
        merged = litellm_route(f"vllm/{mid}@{ADAPTER}", store)  # routed to the merged engine
        progress("serving: base ...")
        served = asyncio.run(served_rates(base, msgs, tools, fmt, full=True))
        progress("serving: adapter on the request ...")
        on_request = asyncio.run(served_rates(lora, msgs, tools, fmt, full=False))
        progress("serving: adapter merged ...")
        as_merged = asyncio.run(served_rates(merged, msgs, tools, fmt, full=False))
    finally:
        with output_to_file(work / "shutdown.log"):
            stop_serving(store)
            stop_ray()
    again = ceiling(config, prompt_tokens, a.threads, dtype)
    ceil = {k: max(v, again[k]) for k, v in ceil.items()}
    rows = [
        ("prefill", served["prefill"], "prefill"),
        ("decode, 1 way", served["decode_1"], "decode_1"),
        ("decode, 16 ways, free", served["decode_16"], "decode_16"),
        ("decode, 16 ways, constrained", served["decode_16_constrained"], "decode_16"),
        ("adapter on the request: prefill", on_request["prefill"], "prefill"),
        ("adapter on the request: decode, 1 way", on_request["decode_1"], "decode_1"),
        ("adapter merged: prefill", as_merged["prefill"], "prefill"),
        ("adapter merged: decode, 1 way", as_merged["decode_1"], "decode_1"),
    ]
    out = {
        "model": str(model), "dtype": dtype, "threads": a.threads, "prompt_tokens": prompt_tokens,
        "served_prompt_tokens": served["prompt_tokens"], "family": a.family,
        "overrides": a.set,
        "ceiling_tok_s": {k: round(v, 1) for k, v in ceil.items() if not k.startswith("linear_")},
        "ceiling_linear_tok_s": {k[len("linear_"):]: round(v, 1) for k, v in ceil.items() if k.startswith("linear_")},
        "rows": [{"what": w, "tok_s": round(x, 1), "ceiling_tok_s": round(ceil[k], 1), "ratio": round(x / ceil[k], 3),
                  "ratio_linear": round(x / ceil[f"linear_{k}"], 3)} for w, x, k in rows],
        "adapter_vs_base": {
            "on_request_prefill": round(on_request["prefill"] / served["prefill"], 3),
            "on_request_decode_1": round(on_request["decode_1"] / served["decode_1"], 3),
            "merged_prefill": round(as_merged["prefill"] / served["prefill"], 3),
            "merged_decode_1": round(as_merged["decode_1"] / served["decode_1"], 3),
        },
    }
    if a.json:
        print(json.dumps(out))
        return 0
    print(f"{model.name}, {dtype}, {a.threads} threads, {a.family} L0 oracle prompt of {prompt_tokens} tokens\n")
    print("| measured | tok/s | ceiling tok/s | ratio | ratio to the linear layers alone |\n|---|---|---|---|---|")
    for r in out["rows"]:
        print(f"| {r['what']} | {r['tok_s']} | {r['ceiling_tok_s']} | {r['ratio']:.2f} | {r['ratio_linear']:.2f} |")
    print("\nadapter / base: " + ", ".join(f"{k} {v:.2f}" for k, v in out["adapter_vs_base"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
