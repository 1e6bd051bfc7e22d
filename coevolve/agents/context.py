"""Context policies: what the model still sees of a rollout's messages before each call.

Policies never drop messages (the model keeps its own record of what it did); they elide the content
of old tool results, oldest first, and mark it, so that an agent — or a reader — can tell the data is
gone. Messages in the last `keep_last` are never touched.
"""

from __future__ import annotations

from typing import Any

from coevolve.values import ContextPolicy

ELIDED = "[elided"
SUMMARISED = "[summarised"
SUMMARY_CHARS = 160
PIN_MAX_TOKENS = 300


def approx_tokens(text: str) -> int:
    return len(text) // 4 + 1


def message_tokens(m: dict[str, Any]) -> int:
    n = approx_tokens(m.get("content") or "")
    for c in m.get("tool_calls") or ():
        n += approx_tokens(c["function"]["name"]) + approx_tokens(c["function"].get("arguments") or "")
    return n + 4


def is_cut(content: str) -> bool:
    return content.startswith((ELIDED, SUMMARISED))


def apply_policy(
    messages: list[dict[str, Any]], policy: ContextPolicy
) -> tuple[list[dict[str, Any]], list[str]]:
    """Return the messages the model sees and the events (what was elided or summarised)."""
    if policy.strategy == "keep-all":
        return messages, []
    tail_start = max(2, len(messages) - policy.keep_last)
    eligible = [i for i in range(2, tail_start) if messages[i].get("role") == "tool"]
    out = list(messages)
    events: list[str] = []
    if policy.strategy == "summarise":
        for i in eligible:
            content = out[i].get("content") or ""
            if len(content) > SUMMARY_CHARS * 2 and not is_cut(content):
                out[i] = {**out[i], "content": f"{SUMMARISED}, {approx_tokens(content)} tokens] {content[:SUMMARY_CHARS]}"}
                events.append(f"context:summarised:{i}")
        return out, events
    # truncate-middle and pin-notes: elide oldest tool results until the budget holds
    total = sum(message_tokens(m) for m in out)
    for i in eligible:
        if total <= policy.token_budget:
            break
        content = out[i].get("content") or ""
        tokens = approx_tokens(content)
        if is_cut(content) or (policy.strategy == "pin-notes" and tokens <= PIN_MAX_TOKENS):
            continue
        out[i] = {**out[i], "content": f"{ELIDED}: {tokens} tokens]"}
        total -= tokens
        events.append(f"context:elided:{i}")
    return out, events
