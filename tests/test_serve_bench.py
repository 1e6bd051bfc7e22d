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
    t = lambda *a: min(bench.attention_seconds(config, *a, torch.float32, repeats=3) for _ in range(3))
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


def test_the_adapter_cell_adapter_leaves_the_model_unchanged_but_is_a_full_lora(tmp_path):
    """bench/adapter_cell.py compares cells of equal work: its adapter is a rank-16 LoRA on every linear
    layer whose B is zero, so the model's logits are unchanged (a trained one would change the rollouts)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from coevolve.services.serving.models import make_tiny

    spec = importlib.util.spec_from_file_location("adapter_cell", ROOT / "bench" / "adapter_cell.py")
    cell = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cell)
    base = make_tiny(tmp_path / "tiny")
    cell.cell_adapter(str(base), tmp_path / "adapter")
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["r"] == 16 and set(config["target_modules"]) == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    ids = torch.arange(1, 17).unsqueeze(0)
    with torch.no_grad():
        want = model(ids).logits
        lora = PeftModel.from_pretrained(model, tmp_path / "adapter")
        assert any(n.endswith("lora_A.default.weight") and p.abs().sum() > 0 for n, p in lora.named_parameters())
        assert torch.equal(lora(ids).logits, want)
