"""bench/serve_overhead.py's ceiling counts exactly the served model's linear weights, and its attention."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("serve_overhead", ROOT / "bench" / "serve_overhead.py")
bench = importlib.util.module_from_spec(spec)
sys.modules["serve_overhead"] = bench
spec.loader.exec_module(bench)


def test_the_ceiling_times_every_linear_weight_of_the_model(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    from coevolve.services.serving.models import make_tiny

    folder = make_tiny(tmp_path / "tiny")
    config = json.loads((folder / "config.json").read_text())
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    in_layers = sum(m.weight.numel() for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and ".layers." in n)
    assert in_layers == config["num_hidden_layers"] * sum(i * o for i, o in bench.linear_shapes(config))
    rates = bench.ceiling(config, 64, 1, "float32")
    kinds = {"prefill", "decode_16", "decode_1"}
    assert set(rates) == kinds | {f"linear_{k}" for k in kinds} and all(r > 0 for r in rates.values())
    # attention costs time on top of the linear layers
    assert all(rates[k] < rates[f"linear_{k}"] for k in kinds)
    # more positions per weight read: prefill and batched decode outrun a single sequence
    assert rates["prefill"] > rates["decode_1"] and rates["decode_16"] > rates["decode_1"]


def test_attention_grows_with_the_context_and_the_sequences(tmp_path):
    import torch

    config = {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 64}
    t = lambda *a: min(bench.attention_seconds(config, *a, torch.float32, repeats=3) for _ in range(3))  # noqa: E731
    assert t(1, 4096, 1) > 4 * t(1, 256, 1)
    assert t(1, 1024, 16) > 4 * t(1, 1024, 1)


def test_the_prompt_is_a_real_rollout_prompt_and_nonces_defeat_or_keep_the_prefix():
    msgs, tools, fmt = bench.rollout_prompt("iot")
    assert msgs[0]["role"] == "system" and "iot/val/0" in msgs[1]["content"] and tools
    assert fmt["type"] == "json_schema"
    a, b = bench.nonce_first(msgs), bench.nonce_first(msgs)
    assert a[0]["content"][:10] != b[0]["content"][:10] and a[1:] == msgs[1:]
    c = bench.nonce_last(msgs, 3)
    assert c[:-1] == msgs[:-1] and c[-1]["content"].startswith(msgs[-1]["content"])
