"""The synthetic models as a litellm custom provider, so tests run litellm's real code path."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

from litellm import CustomLLM, ModelResponse
from litellm.types.utils import ChatCompletionMessageToolCall, Choices, Function, Message, Usage

from agents.synthetic import respond


def load_synthetic_adapter(adapter_id: str) -> dict[str, Any]:
    """A synthetic adapter is a JSON file written by the synthetic training backend."""
    root = Path(os.environ.get("COEVOLVE_STORE", ".coevolve")) / "adapters"
    path = root / adapter_id / "synthetic_adapter.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"synthetic adapter {adapter_id!r} not found at {path}") from None


class SyntheticLLM(CustomLLM):
    """Speaks the OpenAI tool-calling protocol for `synthetic/<profile>[@adapter]`.

    A `latency_ms` entry in the environment variable COEVOLVE_SYNTHETIC_LATENCY_MS simulates a slow
    model server (benchmarks); the sleep is asynchronous so concurrent rollouts overlap."""

    def _reply(self, model: str, messages: list, optional_params: dict) -> tuple[ModelResponse, float]:
        name, _, adapter_id = model.partition("@")
        adapter = load_synthetic_adapter(adapter_id) if adapter_id else None
        tools = optional_params.get("tools") or []
        seed = int(optional_params.get("seed") or 0)
        reply = respond(name, messages, tools, seed=seed, adapter=adapter)
        m = reply.message
        tool_calls = [
            ChatCompletionMessageToolCall(
                id=c["id"], type="function", function=Function(name=c["function"]["name"], arguments=c["function"]["arguments"])
            )
            for c in m.get("tool_calls") or ()
        ]
        message = Message(
            content=m.get("content"),
            role="assistant",
            tool_calls=tool_calls or None,
            provider_specific_fields={"testbed": reply.testbed} if reply.testbed else None,
        )
        resp = ModelResponse(
            id=f"synth-{uuid.uuid4().hex[:12]}",
            choices=[Choices(index=0, finish_reason="tool_calls" if tool_calls else "stop", message=message)],
            model=f"synthetic/{model}",
            created=int(time.time()),
            usage=Usage(
                prompt_tokens=reply.prompt_tokens,
                completion_tokens=reply.completion_tokens,
                total_tokens=reply.prompt_tokens + reply.completion_tokens,
            ),
        )
        # Stamping the cost spares litellm its own response-cost calculation (the bulk of its CPU per call).
        resp._hidden_params["response_cost"] = reply.cost_usd
        latency = float(os.environ.get("COEVOLVE_SYNTHETIC_LATENCY_MS", "0") or 0) / 1000
        return resp, latency

    def completion(self, model: str, messages: list, *args: Any, optional_params: dict | None = None, **kw: Any):
        resp, latency = self._reply(model, messages, optional_params or kw.get("optional_params") or {})
        if latency:
            time.sleep(latency)
        return resp

    async def acompletion(self, model: str, messages: list, *args: Any, optional_params: dict | None = None, **kw: Any):
        import asyncio

        resp, latency = self._reply(model, messages, optional_params or kw.get("optional_params") or {})
        if latency:
            await asyncio.sleep(latency)
        return resp
