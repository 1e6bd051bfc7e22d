"""Training rows shared by the model-lifecycle tests and benches (IoT-flavoured tool calls)."""

from __future__ import annotations

import json
from typing import Any

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "read_sheet",
            "description": "Read a sheet of normal sensor ranges",
            "parameters": {
                "type": "object",
                "properties": {"sheet": {"type": "string"}},
                "required": ["sheet"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "query_readings",
            "description": "Run SQL over the sensor readings",
            "parameters": {
                "type": "object",
                "properties": {"sql": {"type": "string"}},
                "required": ["sql"],
            },
        },
    },
]
SYSTEM = "You audit industrial sensors. Use the tools."


def call(name: str, args: dict[str, Any], cid: str = "call_0") -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def target_rows() -> list[dict[str, Any]]:
    """Rows whose one trained turn is a specific tool call (the e2e memorisation target is row 0)."""
    return [
        {
            "messages": [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": "Check machine m7 for anomalies."},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [call("read_sheet", {"sheet": "params"})],
                    "train": True,
                },
            ],
            "tools": TOOLS,
            "provenance": {"kind": "corrected", "trajectory": "t-1"},
        },
        {
            "messages": [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": "Which readings of m2 exceed 90?"},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        call("query_readings", {"sql": "SELECT * FROM readings WHERE value > 90"})
                    ],
                    "train": True,
                },
            ],
            "tools": TOOLS,
            "provenance": {"kind": "self-pass", "trajectory": "t-2"},
        },
    ]


def multi_turn_row() -> dict[str, Any]:
    """A row with an untrained assistant turn, tool results and two trained turns."""
    return {
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Audit m3 and report."},
            {
                "role": "assistant",
                "content": "First the ranges.",
                "tool_calls": [call("read_sheet", {"sheet": "params"}, "c1")],
                "train": False,
            },
            {"role": "tool", "tool_call_id": "c1", "content": '{"temp": [10, 80]}'},
            {
                "role": "assistant",
                "content": "Temperature above 80 is an anomaly.",
                "tool_calls": [
                    call("query_readings", {"sql": "SELECT * FROM readings WHERE temp > 80"}, "c2")
                ],
                "train": True,
            },
            {"role": "tool", "tool_call_id": "c2", "content": "[]"},
            {"role": "assistant", "content": "No anomalies on m3.", "train": True},
        ],
        "tools": TOOLS,
        "provenance": {"kind": "corrected"},
    }


def prompt_messages(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The row up to (not including) its last assistant turn, as a client would send it."""
    msgs = row["messages"]
    last = max(i for i, m in enumerate(msgs) if m["role"] == "assistant")
    return [{k: v for k, v in m.items() if k != "train"} for m in msgs[:last]]


def target_call(row: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    fn = row["messages"][-1]["tool_calls"][0]["function"]
    return fn["name"], json.loads(fn["arguments"])
