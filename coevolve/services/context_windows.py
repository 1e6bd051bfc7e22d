"""Where a role model's context window and tokenizer come from (the policy that uses them is
`coevolve.agents.fit`). `lookup(model, role)` tries, first hit wins:

1. the explicit setting `COEVOLVE_CONTEXT_WINDOWS` ("model=tokens" items, comma-separated; `*`
   matches every model not named), which travels to the project's actors with the other COEVOLVE_*
   variables;
2. a synthetic model's profile (`synthetic/<profile>`: `SyntheticProfile.context_window`), counted as
   the synthetic model counts;
3. for `vllm/<model>`, the server (`coevolve.services.serving.app.serve_url`): `/v1/models` (`max_model_len` from a
   plain vLLM server, `metadata.max_request_context_length` from Ray Serve LLM), else the
   `max_model_len` its `/tokenize` answers; prompts are then counted by that `/tokenize`: with the
   messages and tools where it takes them (plain vLLM: the served chat template itself), else (Ray
   Serve LLM takes a prompt only) on the ChatML-with-tools text the project's served models use
   (`chatml`), plus `TEXT_MARGIN_PER_MESSAGE` tokens a message; where neither answers (Ray Serve LLM
   2.60 with vLLM 0.32 answers "does not support the 'tokenization' task": Ray reads
   `state.openai_serving_tokenization`, vLLM 0.32 names it `serving_tokenization`), by the tokenizer
   and chat template of the served model's local folder, which `coevolve serve`'s state file names;
4. litellm's model info for the route (`max_input_tokens`, else `max_tokens`);
5. `coevolve.agents.fit.DEFAULT_WINDOW`.

A tokenizer folder named in `COEVOLVE_TOKENIZERS` ("model=/path/to/hf-folder") counts that model's
prompts with its chat template, whatever the window's source. Lookups are kept for the process's
life; one that could not reach a server is not kept (the next call asks again).
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from typing import Any

import structlog

from coevolve.agents.fit import DEFAULT_WINDOW, Budget, reply_tokens, synthetic_count
from coevolve.errors import BadInput
from coevolve.settings import environment, variable
from coevolve.values import ModelRef

WINDOWS_ENV = variable("context_windows")
TOKENIZERS_ENV = variable("tokenizers")
HTTP_TIMEOUT_S = 5.0
TEXT_MARGIN_PER_MESSAGE = 4  # tokens, for a template other than ChatML (text-only /tokenize)
log = structlog.get_logger(role="context-windows")

_cache: dict[tuple[str, str, str, str], Budget] = {}
_lock = threading.Lock()


def _pairs(env: str) -> dict[str, str]:
    text = getattr(environment(), env.removeprefix("COEVOLVE_").lower()).strip()
    out: dict[str, str] = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        key, sep, value = item.rpartition("=")
        if not sep or not key.strip() or not value.strip():
            raise BadInput(f"{env}: {item!r} is not model=value")
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
        raise BadInput(f"{WINDOWS_ENV}: {raw!r} is not a whole number of tokens") from None
    if not 256 <= n <= 100_000_000:
        raise BadInput(f"{WINDOWS_ENV}: {n} tokens is outside 256..100000000")
    return n


def lookup(model: str, role: str) -> Budget:
    env = environment()
    key = (model, role, env.context_windows, env.tokenizers)
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
        from coevolve.testbed.policy import profile_for

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
                count = _server_counter(served["url"], ref.model, served["tokenize"])
                counted_by = "server /tokenize" + (" (ChatML text)" if served["tokenize"] == "text" else "")
            elif served["folder"]:
                count, counted_by = _folder_counter(served["folder"]), f"tokenizer of the served folder {served['folder']}"
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
    from coevolve.services.serving.app import ServingError, serve_url

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
    hello = [{"role": "user", "content": "hi"}]
    mode, probe = "chat", _tokenize(url, ref.model, hello, [])
    if probe is None:  # Ray Serve LLM's /tokenize takes a prompt, not messages
        mode, probe = "text", _tokenize(url, ref.model, hello, [], text=True)
    if window is None and probe is not None and isinstance(probe.get("max_model_len"), int):
        window, source = probe["max_model_len"], "server /tokenize max_model_len"
    return {"url": url, "window": window, "source": source, "tokenize": mode if probe is not None else None,
            "folder": _served_folder(ref.model)}


def _served_folder(model: str) -> str | None:
    """The served model's local folder when it holds a tokenizer (`coevolve serve`'s state file names it)."""
    from pathlib import Path

    from coevolve.services.serving.app import read_state

    try:
        folder = ((read_state() or {}).get("sources") or {}).get(model)
    except Exception:  # noqa: BLE001 - an unreadable state file: no folder
        return None
    if isinstance(folder, str) and (Path(folder) / "tokenizer_config.json").is_file():
        return folder
    return None


def _tokenize(url: str, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
              text: bool = False) -> dict[str, Any] | None:
    body: dict[str, Any] = {"model": model}
    if text:
        body |= {"prompt": chatml(messages, tools), "add_special_tokens": False}
    else:
        body |= {"messages": messages, "add_generation_prompt": True, **({"tools": tools} if tools else {})}
    try:
        out = _http(f"{url}/tokenize", body)
    except (urllib.error.URLError, OSError, ValueError):
        return None
    if not isinstance(out, dict) or not isinstance(out.get("count"), int):
        return None
    return {**out, "count": out["count"] + (TEXT_MARGIN_PER_MESSAGE * (len(messages) + 1) if text else 0)}


def _server_counter(url: str, model: str, mode: str):
    def count(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int | None:
        out = _tokenize(url, model, messages, tools, text=mode == "text")
        return None if out is None else out["count"]

    return count


def chatml(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
    """The prompt text the project's served models see (`coevolve.services.serving.models.TOOLS_CHAT_TEMPLATE`, ChatML
    with a tools section), rendered here for a server whose /tokenize takes text only. For a model
    served with another template the count is off by a few tokens per message: hence the margin."""
    global _template
    if _template is None:
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        from coevolve.services.serving.models import TOOLS_CHAT_TEMPLATE

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
        _template = env.from_string(TOOLS_CHAT_TEMPLATE)
    plain = [{**m, "content": m.get("content") or ""} for m in messages]
    return _template.render(messages=plain, tools=tools or None, add_generation_prompt=True)


_template: Any = None


# ------------------------------------------------------------------------------------ others
def _litellm_window(ref: ModelRef) -> tuple[int | None, str]:
    from coevolve.services.providers import litellm_lib

    litellm = litellm_lib()
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
