"""The model gateway: one `complete(model_ref, messages, tools)` through litellm for every provider.

Routes by `ModelRef`:
- `synthetic/<profile>[@adapter]` -> the `coevolve_synthetic` litellm custom provider (litellm already
  ships a hosted provider named `synthetic`, so ours is registered under another name);
- `vllm/<model>[@adapter]` -> the Ray Serve vLLM app (`coevolve.services.serving.app.litellm_route`);
- anything else (`gemini/...`, `openai/...`, `anthropic/...`) -> litellm as is.

litellm's own per-call bookkeeping costs several ms of CPU, mostly response-cost calculation, which at
thousands of concurrent rollouts is cores of pure overhead. Providers we own (synthetic) stamp their
cost on the response, which litellm then uses instead of pricing it; costs can be overridden per model.

Infra failures are retried here, for every caller (executor, tau2 customer, proposer, judge, expert): timeouts,
connection errors and resets, 429, 5xx, and answers that are not a chat completion (a body that is not
JSON or is cut off — litellm reports both as a 500 —, or a response without choices). Each attempt is
numbered in the `X-Coevolve-Attempt` header (fault injectors draw per attempt; servers ignore it),
with exponential backoff and jitter, `RetryPolicy.attempts` in all (`COEVOLVE_RETRY`, e.g.
"attempts=6,backoff_s=0.05" overrides it). Other errors (400, 401, 403, 404, a context-window
overflow) are not retried. When the attempts run out, `ModelUnavailable` is raised and the executor
records an `infra` trajectory, which never counts as a task failure; a context-window overflow raises
`ContextWindowExceeded` instead, which ends the rollout as a task failure (the conversation the
harness let grow is the agent's doing). What the model *wrote* is never
an infra failure: a tool call whose arguments a real model cut off or malformed reaches the agent
loop as the model's message and becomes an error observation; only a transport fault (the response
itself unreadable) is retried.

Decoding (`decoding=DecodingPolicy`, the harness's; absent for a default policy): `temperature` and
`max_tokens` are sent when set. In constrained mode (`tool_calls="constrained"`) the request asks for
structured output over the union of the offered tools (`coevolve.llm.constrained`: `response_format`
json_schema, an `anyOf` of one `{"name": const, "arguments": <its schema>}` object per tool), and the
JSON answer comes back as an assistant message with exactly that one tool call, so callers see the same
shape as in free mode; an answer that is not one call of an offered tool (a server that ignored the
schema, a reply cut at its cap) comes back as text without a call, with `constrained_error` in the
completion's meta — what the model wrote, never an infra failure. Which models can be constrained
(`constrained_unsupported`): the synthetic models and the Ray Serve vLLM app (`vllm/`), any vLLM
server litellm reaches as `hosted_vllm/`, the models litellm's model map lists as supporting a
response schema (`litellm.supports_response_schema`), and the routes named in
`$COEVOLVE_CONSTRAINED_MODELS` (comma-separated `provider/model` or `provider/*`, for an
OpenAI-compatible server with structured outputs that litellm does not know). Any other model raises
`DecodingUnsupported`, one line naming the mode, before a request is sent.

Secrets: provider keys come from the environment or a secrets file (`COEVOLVE_SECRETS_FILE`, default
`~/.config/coevolve/secrets.env`, KEY=VALUE lines), loaded into the environment variables litellm
reads, never overriding what the environment already has, and never logged. Error messages that
leave the gateway (logs, `ModelUnavailable`, hence trajectories and the store) have every loaded
secret value redacted.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import replace
from typing import Any

import structlog

from coevolve.agents.fit import Budget
from coevolve.errors import BadInput
from coevolve.llm import constrained as cs
from coevolve.llm.contract import (
    Completion,
    ContextWindowExceeded,
    DecodingUnsupported,
    ModelUnavailable,
    RetryPolicy,
)
from coevolve.llm.faults import ATTEMPT_HEADER
from coevolve.services.providers import SYNTHETIC_PROVIDER, litellm_lib
from coevolve.services.secrets import redact
from coevolve.settings import environment, variable
from coevolve.values import TOOL_CALL_MODES, DecodingPolicy, ModelRef

log = structlog.get_logger(role="gateway")

CONSTRAINED_ENV = variable("constrained_models")
# Providers whose servers take a `response_format` json_schema: our synthetic models, the Ray Serve vLLM
# app, and vLLM servers reached through litellm's hosted_vllm provider.
CONSTRAINED_PROVIDERS = frozenset({"synthetic", "vllm", "hosted_vllm"})
RETRY_ENV = variable("retry")


def retry_policy_from_env(default: RetryPolicy | None = None) -> RetryPolicy:
    """`COEVOLVE_RETRY="attempts=6,backoff_s=0.05,backoff_max_s=1,call_timeout_s=60"` over the default."""
    policy = default or RetryPolicy()
    text = environment().retry.strip()
    if not text:
        return policy
    fields = {"attempts": int, "backoff_s": float, "backoff_max_s": float, "call_timeout_s": float}
    changes: dict[str, Any] = {}
    for item in text.split(","):
        key, _, raw = item.strip().partition("=")
        if key not in fields:
            raise BadInput(f"{RETRY_ENV}: unknown field {key!r} (fields: {', '.join(fields)})")
        try:
            changes[key] = fields[key](raw)
        except ValueError:
            raise BadInput(f"{RETRY_ENV}: {item!r} is not a number") from None
    policy = replace(policy, **changes)
    if policy.attempts < 1 or policy.backoff_s < 0 or policy.call_timeout_s <= 0:
        raise BadInput(f"{RETRY_ENV}: attempts must be >= 1, backoff >= 0, call_timeout_s > 0")
    return policy


_response_schema_support: dict[str, bool] = {}


def constrained_unsupported(model: str) -> str | None:
    """Why `model` cannot be asked for constrained tool calls, or None when it can (module docstring)."""
    ref = ModelRef.parse(model)
    route = f"{ref.provider}/{ref.model}"
    if ref.provider in CONSTRAINED_PROVIDERS:
        return None
    declared = {x.strip() for x in environment().constrained_models.split(",") if x.strip()}
    if route in declared or f"{ref.provider}/*" in declared:
        return None
    if route not in _response_schema_support:
        litellm = litellm_lib()
        try:
            _response_schema_support[route] = bool(litellm.supports_response_schema(model=route))
        except Exception:  # noqa: BLE001 - a model litellm does not know: it cannot vouch for it
            _response_schema_support[route] = False
    if _response_schema_support[route]:
        return None
    return (
        f"model {model} cannot honour decoding {cs.MODE}: it needs structured output (response_format "
        f"json_schema), which litellm does not list for {route}; use tool_calls=free, a vllm/ or "
        f"hosted_vllm/ model, or name the route in ${CONSTRAINED_ENV} if its server supports it"
    )


def decoding_params(model: str, tools: list[dict[str, Any]], decoding: DecodingPolicy | None) -> dict[str, Any]:
    """The request parameters of a decoding policy (none for the default); `DecodingUnsupported` when
    the model cannot honour it."""
    if decoding is None:
        return {}
    if decoding.tool_calls not in TOOL_CALL_MODES:
        raise DecodingUnsupported(f"decoding tool_calls {decoding.tool_calls!r} is not one of {TOOL_CALL_MODES}")
    params: dict[str, Any] = {}
    if decoding.temperature is not None:
        params["temperature"] = decoding.temperature
    if decoding.max_tokens is not None:
        params["max_tokens"] = decoding.max_tokens
    if decoding.tool_calls == "constrained":
        reason = constrained_unsupported(model)
        if reason:
            raise DecodingUnsupported(reason)
        try:
            params["response_format"] = cs.response_format(tools)
        except ValueError as e:
            raise DecodingUnsupported(f"model {model}: {e}") from None
    return params


def constrained_completion(completion: Completion, tools: list[dict[str, Any]], messages: list[dict[str, Any]]) -> Completion:
    """A constrained reply as the tool-call message it stands for; unreadable: its text, no call, and
    `constrained_error` in meta (module docstring)."""
    text = completion.message.get("content") or ""
    try:
        message = cs.tool_call_message(text, tools, messages)
    except cs.ConstrainedAnswerError as e:
        finish = completion.meta.get("finish_reason")
        detail = f"{e}" + (f" (finish_reason {finish})" if finish and finish != "stop" else "")
        log.debug("constrained answer unreadable", error=detail)
        return replace(
            completion,
            message={"role": "assistant", "content": text},
            meta={**completion.meta, "constrained_error": detail},
        )
    return replace(completion, message=message)


class MalformedResponse(RuntimeError):
    """The provider answered, but not with a chat completion (a transport fault, retried)."""


_RETRY_STATUS = {408, 409, 425, 429}


def infra_kind(e: BaseException) -> str | None:
    """The kind of infra failure `e` is (retried), or None for an error a retry cannot fix."""
    import litellm

    if isinstance(e, (TimeoutError, asyncio.TimeoutError, litellm.Timeout)):
        return "timeout"
    if isinstance(e, litellm.RateLimitError):
        return "429"
    if isinstance(e, MalformedResponse):
        return "malformed"
    if isinstance(e, (litellm.BadRequestError, litellm.AuthenticationError, litellm.PermissionDeniedError,
                      litellm.NotFoundError, litellm.UnprocessableEntityError)):
        return None
    if isinstance(e, (litellm.APIConnectionError, ConnectionError)):
        return "connection"
    status = getattr(e, "status_code", None)
    if isinstance(status, int):
        return "5xx" if status >= 500 else ("http" if status in _RETRY_STATUS else None)
    if isinstance(e, litellm.APIError):
        return "5xx"
    return None


class Gateway:
    """Implements `coevolve.llm.contract.ModelClient`; retries infra failures (module docstring)."""

    def __init__(
        self,
        cost_per_token: dict[str, tuple[float, float]] | None = None,
        timeout_s: float | None = None,
        retry: RetryPolicy | None = None,
    ):
        self.cost_per_token = dict(cost_per_token or {})
        self.retry = retry_policy_from_env(retry)
        if timeout_s is not None:
            self.retry = replace(self.retry, call_timeout_s=timeout_s)
        self.retries = 0  # infra failures retried by this gateway (all calls)

    @property
    def timeout_s(self) -> float:
        return self.retry.call_timeout_s

    def warm_up(self) -> None:
        litellm_lib()

    def route(self, model: str) -> dict[str, Any]:
        ref = ModelRef.parse(model)
        if ref.provider == "synthetic":
            return {
                "model": f"{SYNTHETIC_PROVIDER}/{ref.model}" + (f"@{ref.adapter}" if ref.adapter else ""),
                "allowed_openai_params": ["tools", "tool_choice", "seed"],
            }
        if ref.provider == "vllm":
            from coevolve.services.serving.app import litellm_route

            return litellm_route(ref)
        if ref.adapter:
            raise BadInput(f"provider {ref.provider!r} does not serve adapters ({model})")
        return {"model": f"{ref.provider}/{ref.model}"}

    def _kwargs(self, route: dict[str, Any], attempt: int, kw: dict[str, Any]) -> dict[str, Any]:
        out = {"max_retries": 0, **route, **kw}  # one retry loop, ours: the SDK's would repeat attempts unnumbered
        if route["model"].startswith(SYNTHETIC_PROVIDER) or "api_base" in route:  # servers we run or front
            out["extra_headers"] = {**(kw.get("extra_headers") or {}), ATTEMPT_HEADER: str(attempt)}
        return out

    def _failed(self, model: str, attempt: int, e: BaseException) -> float:
        """The delay before the next attempt; raises the call's error when giving up."""
        kind = infra_kind(e)
        detail = redact(f"{type(e).__name__}: {e}")[:500]
        attempts = attempt + 1
        model = redact(model)
        error_class = ContextWindowExceeded if isinstance(e, litellm_lib().ContextWindowExceededError) else ModelUnavailable
        err = error_class(
            f"model {model} failed after {attempts} attempt{'s' * (attempts > 1)} ({kind or 'not retryable'}): {detail}"
        )
        if kind is None or attempts >= self.retry.attempts:
            log.warning("model call failed", model=model, attempts=attempts, kind=kind or "not retryable", error=detail[:200])
            raise err from None
        delay = min(self.retry.backoff_max_s, self.retry.backoff_s * 2**attempt) * (0.5 + random.random() / 2)
        self.retries += 1
        log.info("model call failed, retrying", model=model, attempt=attempts, kind=kind, delay=round(delay, 3))
        return delay

    async def acomplete(
        self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, seed: int = 0,
        decoding: DecodingPolicy | None = None, **kw: Any,
    ) -> Completion:
        litellm = litellm_lib()
        route = self.route(model)
        kw = {**decoding_params(model, tools, decoding), **kw}
        attempt = 0
        while True:
            started = time.perf_counter()
            try:
                resp = await litellm.acompletion(
                    messages=messages, tools=tools or None, seed=seed, timeout=self.timeout_s,
                    **self._kwargs(route, attempt, kw),
                )
                return self._finish(model, resp, time.perf_counter() - started, tools, messages, decoding)
            except Exception as e:  # noqa: BLE001 - classified: infra is retried, the rest raised at once
                delay = self._failed(model, attempt, e)
            await asyncio.sleep(delay)
            attempt += 1

    @staticmethod
    def budget(model: str, role: str) -> Budget:
        """A role model's context window and prompt counter (`coevolve.services.context_windows`): what
        the roles (judge, expert, proposer) wired to this gateway fit their prompts to."""
        from coevolve.services.context_windows import lookup  # lazy: it imports the serving modules

        return lookup(model, role)

    def complete(
        self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]], seed: int = 0, *,
        decoding: DecodingPolicy | None = None, **kw: Any,
    ) -> Completion:
        litellm = litellm_lib()
        route = self.route(model)
        kw = {**decoding_params(model, tools, decoding), **kw}
        attempt = 0
        while True:
            started = time.perf_counter()
            try:
                resp = litellm.completion(
                    messages=messages, tools=tools or None, seed=seed, timeout=self.timeout_s,
                    **self._kwargs(route, attempt, kw),
                )
                return self._finish(model, resp, time.perf_counter() - started, tools, messages, decoding)
            except Exception as e:  # noqa: BLE001 - classified: infra is retried, the rest raised at once
                delay = self._failed(model, attempt, e)
            time.sleep(delay)
            attempt += 1

    def _finish(
        self, model: str, resp: Any, latency: float, tools: list[dict[str, Any]], messages: list[dict[str, Any]],
        decoding: DecodingPolicy | None,
    ) -> Completion:
        completion = self._normalise(model, resp, latency)
        if decoding is None or decoding.tool_calls != "constrained":
            return completion
        try:
            finish = resp.choices[0].finish_reason
        except (AttributeError, IndexError):
            finish = None
        if finish:
            completion = replace(completion, meta={**completion.meta, "finish_reason": finish})
        return constrained_completion(completion, tools, messages)

    def _normalise(self, model: str, resp: Any, latency: float) -> Completion:
        try:
            choice = resp.choices[0]
            msg = choice.message
            tool_calls = [
                {
                    "id": tc.id,
                    "type": "function",
                    "function": {"name": tc.function.name, "arguments": tc.function.arguments or "{}"},
                }
                for tc in (msg.tool_calls or ())
            ]
        except (AttributeError, IndexError, KeyError, TypeError) as e:
            raise MalformedResponse(f"the response is not a chat completion ({type(e).__name__})") from None
        message: dict[str, Any] = {"role": "assistant", "content": msg.content or ""}
        if tool_calls:
            message["tool_calls"] = tool_calls
        usage = getattr(resp, "usage", None)
        pt = int(getattr(usage, "prompt_tokens", 0) or 0)
        ct = int(getattr(usage, "completion_tokens", 0) or 0)
        meta = dict(getattr(msg, "provider_specific_fields", None) or {})
        meta["latency_s"] = latency
        return Completion(message, pt, ct, self.cost(model, resp, pt, ct), meta)

    def cost(self, model: str, resp: Any, prompt_tokens: int, completion_tokens: int) -> float:
        """Dollar cost: the per-model override if given, else what litellm (or our provider) priced."""
        if model in self.cost_per_token:
            inp, out = self.cost_per_token[model]
            return prompt_tokens * inp + completion_tokens * out
        hidden = getattr(resp, "_hidden_params", None) or {}
        return float(hidden.get("response_cost") or 0.0)
