"""Where a role model's context window and tokenizer come from (the policy that uses them is
`agents.fit`). `lookup(model, role)` tries, first hit wins:

1. the explicit setting `COEVOLVE_CONTEXT_WINDOWS` ("model=tokens" items, comma-separated; `*`
   matches every model not named), which travels to the project's actors with the other COEVOLVE_*
   variables;
2. a synthetic model's profile (`synthetic/<profile>`: `SyntheticProfile.context_window`), counted as
   the synthetic model counts;
3. for `vllm/<model>`, the server (`services.serving.serve_url`): `/v1/models` (`max_model_len` from a
   plain vLLM server, `metadata.max_request_context_length` from Ray Serve LLM), else the
   `max_model_len` its `/tokenize` answers; prompts are then counted by that `/tokenize` (the served
   tokenizer and chat template, with the tools);
4. litellm's model info for the route (`max_input_tokens`, else `max_tokens`);
5. `agents.fit.DEFAULT_WINDOW`.

A tokenizer folder named in `COEVOLVE_TOKENIZERS` ("model=/path/to/hf-folder") counts that model's
prompts with its chat template, whatever the window's source. Lookups are kept for the process's
life; one that could not reach a server is not kept (the next call asks again).
"""

from __future__ import annotations

import json
import os
import threading
import urllib.error
import urllib.request
from typing import Any

import structlog

from agents.fit import DEFAULT_WINDOW, Budget, reply_tokens, synthetic_count
from harness_store.values import ModelRef

WINDOWS_ENV = "COEVOLVE_CONTEXT_WINDOWS"
TOKENIZERS_ENV = "COEVOLVE_TOKENIZERS"
HTTP_TIMEOUT_S = 5.0
log = structlog.get_logger(role="context-windows")

_cache: dict[tuple[str, str, str, str], Budget] = {}
_lock = threading.Lock()


def _pairs(env: str) -> dict[str, str]:
    text = os.environ.get(env, "").strip()
    out: dict[str, str] = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        key, sep, value = item.rpartition("=")
        if not sep or not key.strip() or not value.strip():
            raise ValueError(f"{env}: {item!r} is not model=value")
        out[key.strip()] = value.strip()
    return out


def explicit_window(model: str) -> int | None:
    pairs = _pairs(WINDOWS_ENV)
    raw = pairs.get(model, pairs.get("*"))
    if raw is None:
        return None
    try:
        n = int(raw)
    except ValueError:
        raise ValueError(f"{WINDOWS_ENV}: {raw!r} is not a whole number of tokens") from None
    if not 256 <= n <= 100_000_000:
        raise ValueError(f"{WINDOWS_ENV}: {n} tokens is outside 256..100000000")
    return n


def lookup(model: str, role: str) -> Budget:
    key = (model, role, os.environ.get(WINDOWS_ENV, ""), os.environ.get(TOKENIZERS_ENV, ""))
    with _lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit
    budget, keep = _lookup(model, role)
    if keep:
        with _lock:
            _cache[key] = budget
    log.info("role context window", role=role, model=model, window=budget.window, source=budget.source,
             reply=budget.reply, counted_by=budget.counted_by)
    return budget


def _lookup(model: str, role: str) -> tuple[Budget, bool]:
    try:
        ref: ModelRef | None = ModelRef.parse(model)
    except ValueError:
        ref = None
    window = explicit_window(model)
    source = f"setting {WINDOWS_ENV}" if window is not None else ""
    count, counted_by, keep = None, "estimate", True
    if ref is not None and ref.provider == "synthetic":
        from agents.synthetic import profile_for

        try:
            profile = profile_for(ref.model)
        except ValueError:
            profile = None
        if profile is not None:
            count, counted_by = synthetic_count, "synthetic count"
            if window is None:
                window, source = profile.context_window, "synthetic profile"
    elif ref is not None and ref.provider == "vllm":
        served = _served(ref)
        keep = served is not None
        if served is not None:
            if window is None and served["window"]:
                window, source = served["window"], served["source"]
            if served["tokenize"]:
                count, counted_by = _server_counter(served["url"], ref.model), "server /tokenize"
    elif ref is not None and window is None:
        window, source = _litellm_window(ref)
    folder = _pairs(TOKENIZERS_ENV).get(model)
    if folder:
        count, counted_by = _folder_counter(folder), f"tokenizer {folder}"
    if not window:
        window, source = DEFAULT_WINDOW, "default (unknown model)"
    return Budget(model, role, window, reply_tokens(role, window), source, count, counted_by), keep


# ------------------------------------------------------------------------------------ vLLM
def _http(url: str, body: dict[str, Any] | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT_S) as r:
        return json.loads(r.read())


def _served(ref: ModelRef) -> dict[str, Any] | None:
    """{"url", "window", "source", "tokenize"} from the server, or None when there is none to ask."""
    from services.serving import ServingError, serve_url

    try:
        url = serve_url()
    except ServingError:
        return None
    try:
        cards = _http(f"{url}/v1/models")["data"]
    except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError):
        return None
    window, source = None, ""
    for card in cards if isinstance(cards, list) else ():
        if not isinstance(card, dict) or card.get("id") != ref.model:
            continue
        if isinstance(card.get("max_model_len"), int):
            window, source = card["max_model_len"], "server /v1/models max_model_len"
        meta = card.get("metadata") or {}
        if window is None and isinstance(meta.get("max_request_context_length"), int):
            window, source = meta["max_request_context_length"], "server /v1/models max_request_context_length"
    probe = _tokenize(url, ref.model, [{"role": "user", "content": "hi"}], [])
    tokenize = probe is not None
    if window is None and probe is not None and isinstance(probe.get("max_model_len"), int):
        window, source = probe["max_model_len"], "server /tokenize max_model_len"
    return {"url": url, "window": window, "source": source, "tokenize": tokenize}


def _tokenize(url: str, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any] | None:
    body: dict[str, Any] = {"model": model, "messages": messages, "add_generation_prompt": True}
    if tools:
        body["tools"] = tools
    try:
        out = _http(f"{url}/tokenize", body)
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return out if isinstance(out, dict) and isinstance(out.get("count"), int) else None


def _server_counter(url: str, model: str):
    def count(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int | None:
        out = _tokenize(url, model, messages, tools)
        return None if out is None else out["count"]

    return count


# ------------------------------------------------------------------------------------ others
def _litellm_window(ref: ModelRef) -> tuple[int | None, str]:
    from services.gateway import _lib

    litellm = _lib()
    try:
        info = litellm.get_model_info(f"{ref.provider}/{ref.model}")
    except Exception:  # noqa: BLE001 - litellm raises a plain Exception for a model it does not map
        return None, ""
    for key in ("max_input_tokens", "max_tokens"):
        if isinstance(info.get(key), int) and info[key] > 0:
            return info[key], f"litellm model info {key}"
    return None, ""


_tokenizers: dict[str, Any] = {}


def _folder_counter(folder: str):
    def count(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        tok = _tokenizers.get(folder)
        if tok is None:
            from transformers import AutoTokenizer

            tok = _tokenizers[folder] = AutoTokenizer.from_pretrained(folder)
        ids = tok.apply_chat_template(_plain(messages), tools=tools or None, tokenize=True,
                                      add_generation_prompt=True, return_dict=False)
        return len(ids)

    return count


def _plain(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as a chat template takes them (tool-call arguments may stay JSON strings)."""
    return [{**m, "content": m.get("content") or ""} for m in messages]
