# ruff: noqa: F811 - pytest fixtures imported from tests.lifecycle_fixtures
"""Model folders and the lifecycle CLI (`serve`, `train`, `models`) on a throwaway Typer app."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tests.lifecycle_fixtures import (
    tiny_model,  # noqa: F401 - fixture
    write_rows,
)
from tests.lifecycle_rows import target_rows

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def cli() -> typer.Typer:
    from coevolve.cli.models import register

    app = typer.Typer()
    register(app)
    return app


def run(cli, *args: str):
    return CliRunner().invoke(cli, list(args))


def test_tiny_model_fits_vllm_cpu_and_has_a_tools_template(tiny_model):
    from transformers import AutoConfig, AutoTokenizer

    cfg = AutoConfig.from_pretrained(tiny_model)
    assert cfg.model_type == "qwen2"
    assert cfg.hidden_size // cfg.num_attention_heads in (32, 64, 80, 96, 112, 128)  # CPU attention sizes
    tok = AutoTokenizer.from_pretrained(tiny_model)
    text = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}],
        tools=target_rows()[0]["tools"],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert "<tools>" in text and '"name": "read_sheet"' in text and text.endswith("<|im_start|>assistant\n")
    assert tok.convert_tokens_to_ids("<tool_call>") != tok.unk_token_id
    assert len(tok) <= cfg.vocab_size


def test_bad_input_is_one_line_and_exit_2(cli, tmp_path, tiny_model):
    cases = [
        ("serve",),
        ("serve", "--config", str(tmp_path / "missing.yaml")),
        ("serve", "--config", str(REPO / "deploy/serve/cpu-tiny.yaml"), "-s", "models.0.source=/nowhere"),
        ("serve", "--config", str(REPO / "deploy/serve/cpu-tiny.yaml"), "--detach"),
        ("serve", "stop", "--store", str(tmp_path / "s")),
        ("train", "--rows", str(tmp_path / "none.jsonl"), "--base", str(tiny_model), "--out", "a"),
        (
            "train",
            "--rows",
            str(tmp_path / "none.jsonl"),
            "--base",
            str(tiny_model),
            "--out",
            "a",
            "--backend",
            "x",
        ),
        ("models", "make-tiny", str(REPO)),
        ("models", "register", str(tmp_path), "--id", "a", "--base", "tiny"),
    ]
    rows = write_rows(tmp_path / "rows.jsonl", target_rows())
    cases.append(("train", "--rows", str(rows), "--base", str(tiny_model), "--out", "a", "lr=-1"))
    cases.append(
        ("train", "--rows", str(rows), "--base", str(tmp_path), "--out", "a", "--store", str(tmp_path / "s"))
    )
    for args in cases:
        res = run(cli, *args)
        assert res.exit_code == 2, (args, res.output)
        lines = [ln for ln in res.output.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), (args, res.output)


def test_serve_status_without_a_server(cli, tmp_path):
    res = run(cli, "serve", "status", "--store", str(tmp_path), "--json")
    assert res.exit_code == 1 and json.loads(res.output) == {"running": False}


@pytest.mark.slow
def test_train_command_registers_an_adapter_vllm_can_load(cli, tmp_path, tiny_model, ray_session):
    store = tmp_path / "store"
    rows = write_rows(tmp_path / "rows.jsonl", target_rows())
    res = run(
        cli, "train", "--rows", str(rows), "--base", str(tiny_model), "--out", "cli-1", "--store", str(store),
        "epochs=1", "repeat=2", "rank=8",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "adapter cli-1 registered" in res.output
    out = run(cli, "models", "list", "--store", str(store), "--json").output
    listed = json.loads(next(ln for ln in out.splitlines() if ln.startswith("[")))  # Ray may log around it
    assert [a["id"] for a in listed] == ["cli-1"] and listed[0]["metrics"]["steps"] == 4  # 2 rows x repeat 2
    adapter = store / "adapters" / "cli-1"
    cfg = json.loads((adapter / "adapter_config.json").read_text())
    assert cfg["r"] == 8 and cfg["peft_type"] == "LORA"
    assert not any(k.startswith("modules_to_save") and cfg[k] for k in cfg)  # vLLM loads plain LoRA only
    # registering a copy under another id makes it a second servable adapter
    res = run(
        cli,
        "models",
        "register",
        str(adapter),
        "--id",
        "cli-2",
        "--base",
        str(tiny_model),
        "--store",
        str(store),
    )
    assert res.exit_code == 0, res.output
    assert (store / "adapters" / "cli-2" / "adapter_model.safetensors").is_file()
