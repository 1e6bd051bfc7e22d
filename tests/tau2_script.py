"""The scripted tau2 agent shared by the tau2 parity tests: a ModelClient whose k-th reply is the
script's k-th (text, call) message, then a closing question."""

from __future__ import annotations

import json
from typing import Any

CLOSING = "Is there anything else I can help you with?"


def step_of(steps: list[Any], k: int) -> tuple[str | None, dict[str, Any] | None]:
    return steps[k] if k < len(steps) else (CLOSING, None)


class ScriptClient:
    """The scripted agent as a ModelClient: its k-th reply is the script's k-th message."""

    def __init__(self, steps: list[Any]):
        self.steps = steps

    async def acomplete(self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, seed: int) -> Any:
        from coevolve.llm.contract import Completion

        k = sum(1 for m in messages if m.get("role") == "assistant")
        text, call = step_of(self.steps, k)
        msg: dict[str, Any] = {"role": "assistant", "content": text}
        if call is not None:
            msg["tool_calls"] = [{"id": f"c{k}", "type": "function",
                                  "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])}}]
        return Completion(msg, 0, 0)
