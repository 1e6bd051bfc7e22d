"""The synthetic models as a litellm custom provider, so tests run litellm's real code path.

With `COEVOLVE_FAULTS` set it also plays an unreliable endpoint (`services.faults`): per call, at the
configured rates and deterministically per (fault seed, request content, attempt), it answers slowly,
not at all (timeout), with 429 or 5xx, with a body that is not JSON or is cut inside its tool calls, or
resets the connection. Each failure reaches the caller as the exception litellm raises for the same
fault over HTTP (checked against the fault proxy), so the gateway sees one behaviour for both. The
model's reply itself never depends on the faults: a retried call gets the unfaulted reply.
"""

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
from services import faults as fx

_attempts = fx.AttemptCounter()


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
        import litellm

        name, _, adapter_id = model.partition("@")
        tools = optional_params.get("tools") or []
        seed = int(optional_params.get("seed") or 0)
        try:
            adapter = load_synthetic_adapter(adapter_id) if adapter_id else None
            reply = respond(name, messages, tools, seed=seed, adapter=adapter, adapter_id=adapter_id or None)
        except ValueError as e:  # an unknown model or adapter, a role it cannot play: not a transport fault
            raise litellm.BadRequestError(message=str(e), model=model, llm_provider="coevolve_synthetic") from None
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
        params = optional_params or kw.get("optional_params") or {}
        fault, hold = _fault(model, messages, params, kw)
        if hold:
            time.sleep(hold)
        resp, latency = self._reply(model, messages, params)
        if latency:
            time.sleep(latency)
        return _deliver(resp, fault, model)

    async def acompletion(self, model: str, messages: list, *args: Any, optional_params: dict | None = None, **kw: Any):
        import asyncio

        params = optional_params or kw.get("optional_params") or {}
        fault, hold = _fault(model, messages, params, kw)
        if hold:
            await asyncio.sleep(hold)
        resp, latency = self._reply(model, messages, params)
        if latency:
            await asyncio.sleep(latency)
        return _deliver(resp, fault, model)


def _fault(model: str, messages: list, params: dict, kw: dict) -> tuple[str | None, float]:
    """The injected fault for this call (None without COEVOLVE_FAULTS) and how long it holds the call."""
    spec = fx.spec_from_env()
    if spec is None:
        return None, 0.0
    key = fx.request_key({"model": model, "messages": messages, "tools": params.get("tools") or [], "seed": params.get("seed")})
    attempt = fx.attempt_from(kw.get("headers"))
    if attempt is None:
        attempt = _attempts.next(key)
    kind = spec.pick(key, attempt)
    if kind is None:
        return None, 0.0
    fx.record(kind, key, attempt, "synthetic")
    if kind == "latency":
        return kind, spec.latency_s
    if kind == "timeout":
        timeout = kw.get("timeout")
        limit = float(timeout) if isinstance(timeout, (int, float)) and timeout > 0 else spec.timeout_s
        return kind, min(spec.timeout_s, limit)
    return kind, 0.0


def _deliver(resp: ModelResponse, fault: str | None, model: str) -> ModelResponse:
    """The reply, or the exception litellm raises when the same fault happens over HTTP."""
    import litellm

    provider = "coevolve_synthetic"
    if fault in (None, "latency"):
        return resp
    if fault == "timeout":
        raise litellm.Timeout(message="Request timed out (injected fault)", model=model, llm_provider=provider)
    if fault == "429":
        raise litellm.RateLimitError(message="rate limited (injected fault)", llm_provider=provider, model=model)
    if fault == "5xx":
        raise litellm.ServiceUnavailableError(message="upstream error 503 (injected fault)", llm_provider=provider, model=model)
    if fault == "reset":
        raise litellm.InternalServerError(message="Connection error (injected fault: connection reset)", llm_provider=provider, model=model)
    # malformed / truncated: the body as it would arrive, parsed as a client would
    body = resp.model_dump_json().encode()
    body = fx.truncate_body(body) if fault == "truncated" else b'{"id": "chatcmpl-x", "choices": [<html>bad gateway</html>'
    try:
        json.loads(body)
    except ValueError as e:
        raise litellm.InternalServerError(
            message=f"error - {e} (injected fault: {fault} body)", llm_provider=provider, model=model
        ) from None
    return resp  # pragma: no cover - a cut body always fails to parse
