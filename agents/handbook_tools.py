"""The handbook as tools any role's model can call: `search_handbook` and `read_handbook`.

Proposers and the expert rewriter reach a family's domain documentation only through these (DESIGN §5);
the executor's agent sees handbook text only when the harness includes it.
"""

from __future__ import annotations

import json
from typing import Any

from tasks.handbook import Handbook

HANDBOOK_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "search_handbook",
            "description": "Search the task family's handbook (the company's domain documentation). "
            "Returns the best-matching sections with a snippet each.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "minLength": 1, "description": "keywords or a question"},
                    "k": {"type": "integer", "minimum": 1, "maximum": 10, "description": "sections to return (5)"},
                },
                "required": ["query"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "read_handbook",
            "description": "Read one handbook section in full, by the id that search_handbook returned.",
            "parameters": {
                "type": "object",
                "properties": {"section": {"type": "string", "minLength": 1}},
                "required": ["section"],
                "additionalProperties": False,
            },
        },
    },
]


def run_handbook_tool(handbook: Handbook, name: str, raw_args: str | dict[str, Any]) -> str:
    """Execute one handbook tool call; bad calls come back as `error: ...` observations."""
    try:
        args = json.loads(raw_args) if isinstance(raw_args, str) else raw_args
        if not isinstance(args, dict):
            return "error: arguments must be a JSON object"
        if name == "search_handbook":
            return json.dumps(handbook.search(str(args.get("query", "")), int(args.get("k", 5))))
        if name == "read_handbook":
            s = handbook.read(str(args.get("section", "")))
            return f"## {s.title} (id: {s.id})\n{s.text}"
        return f"error: unknown tool {name!r} (tools: search_handbook, read_handbook)"
    except (ValueError, TypeError, OverflowError, RecursionError) as e:  # e.g. "k": 1e400 is infinity
        return f"error: {e}"
