"""The IoT services: a read-only readings table in sqlite, the parameters sheet, an object store."""

from __future__ import annotations

import sqlite3
from typing import Annotated, Any

from coevolve.tasks.base import FINISH_TOOL, TaskEnv, ToolArgError, ToolResult, read_only_db
from coevolve.tasks.iot.world import IotWorld, _fmt
from coevolve.tasks.tools import Param, tool_specs
from coevolve.values import TaskInstance, ToolSpec

MAX_ROWS = 5000
Machine = Annotated[str, Param(description="a machine code such as M01")]
Sensor = Annotated[str, Param(description="a sensor name such as temperature")]


def create_tables(db: sqlite3.Connection, world: IotWorld) -> None:
    db.execute("CREATE TABLE readings (machine TEXT, sensor TEXT, ts TEXT, value REAL)")
    db.executemany(
        "INSERT INTO readings VALUES (?, ?, ?, ?)",
        [(m, s, world.timestamps[i], v) for (m, s), vals in world.readings.items() for i, v in enumerate(vals)],
    )


class IotEnv(TaskEnv):
    def __init__(self, instance: TaskInstance, world: IotWorld):
        super().__init__(instance)
        self.world = world
        self.objects: dict[str, str] = {}
        self.db = read_only_db(world, create_tables)

    def tool_specs(self) -> tuple[ToolSpec, ...]:
        return (*TOOLS, FINISH_TOOL, *HELPER_TOOLS)

    def tool_sql_query(self, query: Annotated[str, Param(minLength=1)]) -> ToolResult:
        """Run a read-only SQL query on the sqlite table readings(machine, sensor, ts, value)."""
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
        """Read the parameters sheet (normal ranges per sensor and per-machine overrides) as CSV."""
        w = self.world
        lines = ["# normal ranges", "sensor,min,max"]
        lines += [f"{s},{lo:g},{hi:g}" for s, (lo, hi) in w.ranges.items()]
        lines += ["", "# overrides", "machine,sensor,min,max"]
        lines += [f"{m},{s},{lo:g},{hi:g}" for (m, s), (lo, hi) in sorted(w.overrides.items())]
        return "\n".join(lines)

    def tool_upload_report(self, key: Annotated[str, Param(pattern="^[A-Za-z0-9_./-]+$")], content: str) -> str:
        """Upload a text object to the object store at the given key."""
        if not isinstance(key, str) or not key or len(key) > 300:
            raise ToolArgError("key must be a non-empty string")
        if not isinstance(content, str):
            raise ToolArgError("content must be a string")
        self.objects[key] = content
        return f"uploaded {len(content)} bytes to {key}"

    def tool_list_objects(self) -> str:
        """List the keys in the object store."""
        return "\n".join(sorted(self.objects)) or "(empty)"

    # ------------------------------------------------------------------ helper tools (not in the baseline)
    def _cell(self, machine: Any, sensor: Any) -> tuple[str, str]:
        w = self.world
        if not isinstance(machine, str) or machine not in w.machines:
            raise ToolArgError(f"unknown machine {str(machine)[:40]!r} (machines: {', '.join(w.machines)})")
        if not isinstance(sensor, str) or sensor not in w.sensors:
            raise ToolArgError(f"unknown sensor {str(sensor)[:40]!r} (sensors: {', '.join(w.sensors)})")
        return machine, sensor

    def tool_applicable_range(self, machine: Machine, sensor: Sensor) -> str:
        """The normal range in force for one machine and sensor, from the parameters sheet: the machine's
        override row if it has one, else the sensor's default range."""
        m, s = self._cell(machine, sensor)
        lo, hi = self.world.ranges[s]
        if (m, s) in self.world.overrides:
            olo, ohi = self.world.overrides[(m, s)]
            return f"{m} {s}: min {olo:g}, max {ohi:g} (override row; the default for {s} is {lo:g} to {hi:g})"
        return f"{m} {s}: min {lo:g}, max {hi:g} (the default for {s}; no override row)"

    def tool_out_of_range_runs(
        self,
        machine: Machine,
        sensor: Sensor,
        min: float,
        max: float,
        min_length: Annotated[int, Param(minimum=1, description="shortest run listed (default 1)")] = 1,
    ) -> str:
        """The runs of consecutive readings of one machine's sensor that lie strictly outside [min, max] (a
        reading equal to min or max is inside; a NULL reading is never outside and ends a run), with each
        run's start and end timestamps, its length in readings and its peak (the reading furthest from the
        middle of [min, max]). Only runs of at least min_length readings are listed."""
        m, s = self._cell(machine, sensor)
        for name, v in (("min", min), ("max", max)):
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise ToolArgError(f"{name} must be a number")
        if min > max:
            raise ToolArgError("min must not be greater than max")
        if not isinstance(min_length, int) or isinstance(min_length, bool) or min_length < 1:
            raise ToolArgError("min_length must be a whole number of readings, at least 1")
        runs = out_of_range_runs(self.world.readings[(m, s)], float(min), float(max))
        kept = [r for r in runs if r[1] - r[0] >= min_length]
        w = self.world
        nulls = sum(v is None for v in w.readings[(m, s)])
        head = (f"{m} {s}, outside [{min:g}, {max:g}] (a reading equal to min or max is inside; NULL ends a run): "
                f"{len(kept)} run{'s' if len(kept) != 1 else ''} of at least {min_length} reading{'s' if min_length != 1 else ''}")
        lines = [head] + [
            f"- start {w.timestamps[i]}, end {w.timestamps[j - 1]}, {j - i} readings, peak {_fmt(peak)}" for i, j, peak in kept
        ]
        if nulls:
            lines.append(f"({nulls} NULL reading{'s' if nulls != 1 else ''})")
        return "\n".join(lines)


def out_of_range_runs(values: tuple[float | None, ...], lo: float, hi: float) -> list[tuple[int, int, float]]:
    """(first index, end index, peak) of each maximal run of readings strictly outside [lo, hi]; a NULL
    is never outside and ends a run; the peak is the reading furthest from the middle of [lo, hi]."""
    mid = (lo + hi) / 2
    out, i = [], 0
    while i < len(values):
        v = values[i]
        if v is None or lo <= v <= hi:
            i += 1
            continue
        j = i
        while j < len(values) and values[j] is not None and not lo <= values[j] <= hi:  # type: ignore[operator]
            j += 1
        run = [x for x in values[i:j] if x is not None]
        out.append((i, j, max(run, key=lambda x: abs(x - mid))))
        i = j
    return out


TOOLS = tool_specs(
    IotEnv.tool_sql_query, IotEnv.tool_read_parameters, IotEnv.tool_upload_report, IotEnv.tool_list_objects
)
HELPER_TOOLS = tool_specs(IotEnv.tool_applicable_range, IotEnv.tool_out_of_range_runs)
