"""The synthetic models as a litellm custom provider, so tests run litellm's real code path.

With `COEVOLVE_FAULTS` set it also plays an unreliable endpoint (`coevolve.llm.faults`): per call, at the
configured rates and deterministically per (fault seed, request content, attempt), it answers slowly,
not at all (timeout), with 429 or 5xx, with a body that is not JSON or is cut inside its tool calls, or
resets the connection. Each failure reaches the caller as the exception litellm raises for the same
fault over HTTP (checked against the fault proxy), so the gateway sees one behaviour for both. The
model's reply itself never depends on the faults: a retried call gets the unfaulted reply.

Decoding parameters are honoured as a server honours them:
- `response_format` json_schema (constrained tool calls, `coevolve.llm.constrained`): the schema must be a
  valid tool-call union over exactly the offered tools, else the request is refused (400). The policy
  then makes one call without argument slips (`coevolve.testbed.policy`), and the answer is that call as JSON
  text with no tool calls — the gateway's conversion does the rest, as for vLLM. Should the policy's
  call still not satisfy the schema (it names a tool the harness does not offer, or an edit changed a
  tool's parameters), it is forced into the schema as a decoder forced off the model's path would
  write it: the tool kept if offered (else the first offered one), arguments the schema does not
  admit dropped, missing required ones filled with a minimal value (`constrained.default_instance`);
  the answer is checked against the requested schema before it is sent.
- `temperature` replaces the profile's sampling temperature.
- `max_tokens`: a reply longer than the cap is cut there, as text without tool calls (a cut call does
  not parse), with finish_reason "length".
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

from litellm import CustomLLM, ModelResponse
from litellm.types.utils import ChatCompletionMessageToolCall, Choices, Function, Message, Usage

from coevolve.agents.context import approx_tokens
from coevolve.errors import BadInput
from coevolve.llm import constrained as cs
from coevolve.llm import faults as fx
from coevolve.settings import setting
from coevolve.testbed.policy import SyntheticReply
from coevolve.testbed.respond import respond
from coevolve.text import json_object
from coevolve.values import check_adapter_id

_attempts = fx.AttemptCounter()


def load_synthetic_adapter(adapter_id: str) -> dict[str, Any]:
    """A synthetic adapter is a JSON file written by the synthetic training backend."""
    check_adapter_id(adapter_id)
    root = Path(setting("store")) / "adapters"
    path = root / adapter_id / "synthetic_adapter.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise BadInput(f"synthetic adapter {adapter_id!r} not found at {path}") from None


class SyntheticLLM(CustomLLM):
    """Speaks the OpenAI tool-calling protocol for `synthetic/<profile>[@adapter]`.

    A `latency_ms` entry in the environment variable COEVOLVE_SYNTHETIC_LATENCY_MS simulates a slow
    model server (benchmarks); the sleep is asynchronous so concurrent rollouts overlap."""

    def _reply(self, model: str, messages: list, optional_params: dict) -> tuple[ModelResponse, float]:
        import litellm

        name, _, adapter_id = model.partition("@")
        tools = optional_params.get("tools") or []
        seed = int(optional_params.get("seed") or 0)
        finish_reason = None
        try:
            schema = cs.requested_schema(optional_params.get("response_format"))
            offered = _offered(schema, tools) if schema is not None else None
            temperature = _number(optional_params.get("temperature"), "temperature")
            max_tokens = _number(optional_params.get("max_tokens"), "max_tokens")
            adapter = load_synthetic_adapter(adapter_id) if adapter_id else None
            reply = respond(
                name, messages, tools, seed=seed, adapter=adapter, adapter_id=adapter_id or None,
                constrained=offered is not None, temperature=temperature,
            )
            if offered is not None:
                reply = _constrained(reply, offered, schema)
            if max_tokens is not None and reply.completion_tokens > max_tokens:
                reply, finish_reason = _cut(reply, int(max_tokens)), "length"
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
            choices=[
                Choices(index=0, finish_reason=finish_reason or ("tool_calls" if tool_calls else "stop"), message=message)
            ],
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
        latency = float(setting("synthetic_latency_ms") or 0) / 1000
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


def _number(value: Any, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"{name} must be a non-negative number, not {value!r}")
    return value


def _offered(schema: dict[str, Any], tools: list) -> dict[str, dict[str, Any]]:
    """The requested tool-call union, which must be over exactly the offered tools."""
    offered = cs.offered_calls(schema)
    names = [(t.get("function") or {}).get("name") for t in tools]
    if sorted(offered) != sorted(n for n in names if n):
        raise ValueError(f"the requested tool-call union names {sorted(offered)}, the offered tools are {sorted(names)}")
    for t in tools:
        if offered[t["function"]["name"]] != (t["function"].get("parameters") or {"type": "object"}):
            raise ValueError(f"the requested schema of tool {t['function']['name']!r} is not its parameters schema")
    return offered


def _constrained(reply: SyntheticReply, offered: dict[str, dict[str, Any]], schema: dict[str, Any]) -> SyntheticReply:
    """The policy's reply as the JSON answer of a schema-constrained decoder (module doc)."""
    calls = reply.message.get("tool_calls") or []
    fn = calls[0]["function"] if calls else {}
    name = fn.get("name")
    answer = {"name": name, "arguments": json_object(fn.get("arguments")) or {}}
    forced = name not in offered or cs.schema_error(answer["arguments"], offered[name]) is not None
    if forced:
        answer = _force(answer, offered)
    error = cs.schema_error(answer, schema)
    if error is not None:
        raise ValueError(f"the synthetic model could not satisfy the requested schema: {error}")
    text = json.dumps(answer, sort_keys=True)
    testbed = dict(reply.testbed or {}) or None
    if testbed is not None and forced:
        testbed["constrained_forced"] = True
    return SyntheticReply({"role": "assistant", "content": text}, reply.prompt_tokens, approx_tokens(text), testbed)


def _force(answer: dict[str, Any], offered: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The nearest call the schema admits: the tool if offered (else the first), its arguments the
    schema admits, and minimal values for the required ones missing; else the first tool whose
    minimal call is valid."""
    name = answer["name"] if answer["name"] in offered else next(iter(offered))
    params = offered[name]
    props = params.get("properties") or {}
    closed = params.get("additionalProperties") is False
    args = {
        k: v for k, v in answer["arguments"].items()
        if (k in props and cs.schema_error(v, props[k]) is None) or (k not in props and not closed)
    }
    for k in params.get("required") or ():
        args.setdefault(k, cs.default_instance(props.get(k, {})))
    if cs.schema_error(args, params) is None:
        return {"name": name, "arguments": args}
    for other, schema in offered.items():
        minimal = cs.default_instance(schema)
        if isinstance(minimal, dict) and cs.schema_error(minimal, schema) is None:
            return {"name": other, "arguments": minimal}
    return {"name": name, "arguments": args}  # the caller's check refuses it


def _cut(reply: SyntheticReply, max_tokens: int) -> SyntheticReply:
    """The reply cut at `max_tokens` (by the same 4-characters-a-token measure its length is)."""
    m = reply.message
    text = (m.get("content") or "") + "".join(
        f'<tool_call>{{"name": "{c["function"]["name"]}", "arguments": {c["function"]["arguments"]}}}</tool_call>'
        for c in m.get("tool_calls") or ()
    )
    cut = text[: max(0, (max_tokens - 1) * 4)]
    return SyntheticReply({"role": "assistant", "content": cut}, reply.prompt_tokens, max_tokens, reply.testbed)


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
