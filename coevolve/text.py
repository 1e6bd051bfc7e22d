"""Text helpers every floor may use (stdlib only)."""

from __future__ import annotations

import json
from typing import Any


def bounded(text: str, limit: int) -> str:
    """`text` at most about `limit` characters: head and tail kept, the middle replaced by a marker
    that says how much was cut (the largest observation the families produce at size 3 is ~31k)."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]} …[{len(text) - 2 * half} characters cut]… {text[-half:]}"


def clipped(text: str, n: int) -> str:
    """`text` if at most `n` characters, else its two ends around a marker that counts the characters cut:
    the marker of the evidence and transcripts the roles read (`bounded`'s is that of observations and
    checkers' reasons; unifying them changes the prompts, hence every recorded search)."""
    return text if len(text) <= n else text[: n // 2] + f" …[{len(text) - n} chars]… " + text[-n // 2 :]


def json_object(text: str | None) -> dict[str, Any] | None:
    """`text` (a tool call's arguments; empty means `{}`) as a JSON object, or None when it is not one."""
    try:
        value = json.loads(text or "{}")
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
