"""The model gateway: one `complete(model_ref, messages, tools)` through litellm for every provider.

Routes by `ModelRef`:
- `synthetic/<profile>[@adapter]` -> the `coevolve_synthetic` litellm custom provider (litellm already
  ships a hosted provider named `synthetic`, so ours is registered under another name);
- `vllm/<model>[@adapter]` -> the Ray Serve vLLM app (`services.serving.litellm_route`);
- anything else (`gemini/...`, `openai/...`, `anthropic/...`) -> litellm as is.

litellm's own per-call bookkeeping costs several ms of CPU, mostly response-cost calculation, which at
thousands of concurrent rollouts is cores of pure overhead. Providers we own (synthetic) stamp their
cost on the response, which litellm then uses instead of pricing it; costs can be overridden per model.
"""

from __future__ import annotations

import os
import time
from typing import Any

import structlog

from agents.executor import Completion
from harness_store.values import ModelRef

SYNTHETIC_PROVIDER = "coevolve_synthetic"
log = structlog.get_logger(role="gateway")

_litellm = None


def _lib():
    """Import and configure litellm once (its import takes seconds: keep it off `import services`)."""
    global _litellm
    if _litellm is None:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import litellm

        from services.synthetic_provider import SyntheticLLM

        litellm.suppress_debug_info = True
        litellm.telemetry = False
        litellm.drop_params = False
        litellm.disable_end_user_cost_tracking = True
        if not any(p.get("provider") == SYNTHETIC_PROVIDER for p in litellm.custom_provider_map):
            litellm.custom_provider_map.append({"provider": SYNTHETIC_PROVIDER, "custom_handler": SyntheticLLM()})
            from litellm.utils import custom_llm_setup

            custom_llm_setup()
        _litellm = litellm
    return _litellm


class Gateway:
    """Implements `agents.executor.ModelClient`."""

    def __init__(self, cost_per_token: dict[str, tuple[float, float]] | None = None, timeout_s: float = 600.0):
        self.cost_per_token = dict(cost_per_token or {})
        self.timeout_s = timeout_s

    def warm_up(self) -> None:
        _lib()

    def route(self, model: str) -> dict[str, Any]:
        ref = ModelRef.parse(model)
        if ref.provider == "synthetic":
            return {
                "model": f"{SYNTHETIC_PROVIDER}/{ref.model}" + (f"@{ref.adapter}" if ref.adapter else ""),
                "allowed_openai_params": ["tools", "tool_choice", "seed"],
            }
        if ref.provider == "vllm":
            from services.serving import litellm_route

            return litellm_route(ref)
        if ref.adapter:
            raise ValueError(f"provider {ref.provider!r} does not serve adapters ({model})")
        return {"model": f"{ref.provider}/{ref.model}"}

    async def acomplete(
        self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, seed: int = 0, **kw: Any
    ) -> Completion:
        litellm = _lib()
        route = self.route(model)
        started = time.perf_counter()
        resp = await litellm.acompletion(
            messages=messages, tools=tools or None, seed=seed, timeout=self.timeout_s, **route, **kw
        )
        return self._normalise(model, resp, time.perf_counter() - started)

    def complete(
        self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, seed: int = 0, **kw: Any
    ) -> Completion:
        litellm = _lib()
        route = self.route(model)
        started = time.perf_counter()
        resp = litellm.completion(
            messages=messages, tools=tools or None, seed=seed, timeout=self.timeout_s, **route, **kw
        )
        return self._normalise(model, resp, time.perf_counter() - started)

    def _normalise(self, model: str, resp: Any, latency: float) -> Completion:
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
