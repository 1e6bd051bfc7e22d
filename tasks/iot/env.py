"""The IoT services: a read-only readings table in sqlite, the parameters sheet, an object store."""

from __future__ import annotations

import sqlite3

from harness_store.values import TaskInstance, ToolSpec
from tasks.base import FINISH_TOOL, TaskEnv, ToolArgError, ToolResult, read_only_authorizer
from tasks.iot.world import IotWorld, _fmt

MAX_ROWS = 5000


class IotEnv(TaskEnv):
    def __init__(self, instance: TaskInstance, world: IotWorld):
        super().__init__(instance)
        self.world = world
        self.objects: dict[str, str] = {}
        self.db = sqlite3.connect(":memory:", check_same_thread=False)
        self.db.execute("CREATE TABLE readings (machine TEXT, sensor TEXT, ts TEXT, value REAL)")
        self.db.executemany(
            "INSERT INTO readings VALUES (?, ?, ?, ?)",
            [
                (m, s, world.timestamps[i], v)
                for (m, s), vals in world.readings.items()
                for i, v in enumerate(vals)
            ],
        )
        self.db.commit()
        self.db.set_authorizer(read_only_authorizer)

    def tool_specs(self) -> tuple[ToolSpec, ...]:
        return (*TOOLS, FINISH_TOOL)

    def tool_sql_query(self, query: str) -> ToolResult:
        if not isinstance(query, str) or not query.strip():
            raise ToolArgError("query must be a non-empty SQL string")
        try:
            cur = self.db.execute(query)
            rows = cur.fetchmany(MAX_ROWS + 1)
        except sqlite3.Error as e:
            return ToolResult(f"SQL error: {e}", error=True)
        cols = [d[0] for d in cur.description or ()]
        lines = [" | ".join(cols)] + [" | ".join(_fmt(v) if not isinstance(v, str) else v for v in r) for r in rows[:MAX_ROWS]]
        if len(rows) > MAX_ROWS:
            lines.append(f"... truncated at {MAX_ROWS} rows")
        return ToolResult("\n".join(lines) + f"\n({min(len(rows), MAX_ROWS)} rows)")

    def tool_read_parameters(self) -> str:
        w = self.world
        lines = ["# normal ranges", "sensor,min,max"]
        lines += [f"{s},{lo:g},{hi:g}" for s, (lo, hi) in w.ranges.items()]
        lines += ["", "# overrides", "machine,sensor,min,max"]
        lines += [f"{m},{s},{lo:g},{hi:g}" for (m, s), (lo, hi) in sorted(w.overrides.items())]
        return "\n".join(lines)

    def tool_upload_report(self, key: str, content: str) -> str:
        if not isinstance(key, str) or not key or len(key) > 300:
            raise ToolArgError("key must be a non-empty string")
        if not isinstance(content, str):
            raise ToolArgError("content must be a string")
        self.objects[key] = content
        return f"uploaded {len(content)} bytes to {key}"

    def tool_list_objects(self) -> str:
        return "\n".join(sorted(self.objects)) or "(empty)"


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "sql_query",
        "Run a read-only SQL query on the sqlite table readings(machine, sensor, ts, value).",
        {
            "type": "object",
            "properties": {"query": {"type": "string", "minLength": 1}},
            "required": ["query"],
            "additionalProperties": False,
        },
        "sql_query",
    ),
    ToolSpec(
        "read_parameters",
        "Read the parameters sheet (normal ranges per sensor and per-machine overrides) as CSV.",
        {"type": "object", "properties": {}, "additionalProperties": False},
        "read_parameters",
    ),
    ToolSpec(
        "upload_report",
        "Upload a text object to the object store at the given key.",
        {
            "type": "object",
            "properties": {
                "key": {"type": "string", "pattern": "^[A-Za-z0-9_./-]+$"},
                "content": {"type": "string"},
            },
            "required": ["key", "content"],
            "additionalProperties": False,
        },
        "upload_report",
    ),
    ToolSpec(
        "list_objects",
        "List the keys in the object store.",
        {"type": "object", "properties": {}, "additionalProperties": False},
        "list_objects",
    ),
)
