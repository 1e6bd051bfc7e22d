"""Adapters served merged into the base weights (real-weights design §10.4): the merged model answers as
the adapter on the request does, and the serving config and routes send `model@adapter` to it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tiny_with_adapter(tmp_path_factory):
    """The tiny random model and a random (untrained, B != 0) LoRA adapter on it."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from coevolve.services.serving.models import make_tiny

    root = tmp_path_factory.mktemp("merge")
    base = make_tiny(root / "tiny")
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    cfg = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "o_proj", "up_proj"], init_lora_weights=False)
    peft_model = get_peft_model(model, cfg)
    with torch.no_grad():  # large enough that greedy decoding changes
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.mul_(50.0)
    peft_model.save_pretrained(root / "adapter")
    return base, root / "adapter", root


def greedy(model, tokenizer, prompt: str, n: int = 24) -> list[int]:
    import torch

    ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=n, do_sample=False, pad_token_id=tokenizer.eos_token_id or 0)
    return out[0, ids.shape[1]:].tolist()


def test_the_merged_model_answers_as_the_adapter_on_the_request(tiny_with_adapter):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from coevolve.services.serving.models import MERGED_MARK, merge_adapter

    base, adapter, root = tiny_with_adapter
    merged = merge_adapter(base, adapter, root / "merged")
    assert json.loads((merged / MERGED_MARK).read_text())["adapter"] == str(adapter.resolve())
    assert (merged / "chat_template.jinja").is_file() or json.loads((merged / "tokenizer_config.json").read_text()).get("chat_template")
    tok = AutoTokenizer.from_pretrained(base)
    torch.manual_seed(0)
    prompt = "Find the anomalies for machine m1. SELECT * FROM readings"
    plain = greedy(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), tok, prompt)
    on_request = greedy(PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), adapter), tok, prompt)
    as_merged = greedy(AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32), tok, prompt)
    assert on_request != plain  # the adapter changes the answer, so the equality below can fail
    assert as_merged == on_request
    assert not list(root.glob(".merged.tmp"))  # written aside, then renamed


def test_merge_refuses_what_is_not_a_model_or_an_adapter(tiny_with_adapter, tmp_path):
    from coevolve.services.serving.models import merge_adapter

    base, adapter, _ = tiny_with_adapter
    with pytest.raises(FileNotFoundError, match="no adapter_config.json"):
        merge_adapter(base, tmp_path, tmp_path / "out")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        merge_adapter(tmp_path, adapter, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_merged_adapter_is_an_engine_of_its_own_and_requests_for_it_are_routed_there(tiny_with_adapter, tmp_path):
    import shutil

    from coevolve.services.serving.app import (
        STATE_FILE,
        ServingError,
        litellm_route,
        llm_configs,
        load_serve_config,
        merged_dir,
        prepare_merged,
    )

    base, adapter, _ = tiny_with_adapter
    adapters = tmp_path / "adapters"
    shutil.copytree(adapter, adapters / "fix-1")
    cfg = load_serve_config(REPO / "deploy/serve/cpu-tiny.yaml", [f"models.0.source={base}", "models.0.merged_adapters=[fix-1]"])
    merged = prepare_merged(cfg, adapters)
    assert merged == {"tiny@fix-1": "tiny--fix-1"}
    assert (merged_dir(adapters, "tiny", "fix-1") / "config.json").is_file()
    built = llm_configs(cfg, adapters)
    assert [c.model_loading_config.model_id for c in built] == ["tiny", "tiny--fix-1"]
    assert built[1].model_loading_config.model_source == str(merged_dir(adapters, "tiny", "fix-1"))
    assert built[1].lora_config is None and "enable_lora" not in built[1].engine_kwargs
    assert built[1].engine_kwargs["dtype"] == built[0].engine_kwargs["dtype"]
    (tmp_path / STATE_FILE).write_text(json.dumps({"url": "http://127.0.0.1:8123", "merged": merged}))
    assert litellm_route("vllm/tiny@fix-1", tmp_path)["model"] == "openai/tiny--fix-1"
    assert litellm_route("vllm/tiny@other", tmp_path)["model"] == "openai/tiny:other"  # not merged: LoRA on the request
    assert litellm_route("vllm/tiny", tmp_path)["model"] == "openai/tiny"
    missing = load_serve_config(REPO / "deploy/serve/cpu-tiny.yaml", [f"models.0.source={base}", "models.0.merged_adapters=[nope]"])
    with pytest.raises(ServingError, match="merged adapter 'nope' is not in"):
        prepare_merged(missing, adapters)
    with pytest.raises(ServingError, match="merged_adapters"):
        load_serve_config(REPO / "deploy/serve/cpu-tiny.yaml", ["models.0.merged_adapters=[../x]"])
