"""IoT anomaly detection: find sustained out-of-range sensor readings and upload a report.

Services: a readings table (machines x sensors x hourly timestamps) in sqlite, a parameters sheet with
normal ranges (and per-machine overrides), a mock object store. The checker reads the uploaded object,
never the agent's words.
"""

from __future__ import annotations

import json
import random
import sqlite3
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar

from harness_store.values import Outcome, TaskInstance, ToolSpec
from tasks.base import (
    FINISH_TOOL,
    Constraint,
    DomainFact,
    Knowledge,
    PlanStep,
    TaskEnv,
    TaskFamily,
    ToolArgError,
    ToolResult,
    read_only_authorizer,
)

SENSORS = {
    "temperature": (40.0, 80.0),
    "vibration": (0.5, 5.0),
    "pressure": (90.0, 110.0),
    "current": (5.0, 15.0),
}
TRAP_RATE = {1: 0.15, 2: 0.3, 3: 0.5}
MIN_RUN = 3
MAX_ROWS = 5000
QUERY_ALL = "SELECT machine, sensor, ts, value FROM readings ORDER BY machine, sensor, ts"


@dataclass(frozen=True)
class Run:
    machine: str
    sensor: str
    start: int  # index into timestamps
    values: tuple[float | None, ...]


@dataclass(frozen=True)
class IotWorld:
    plant: str
    day: str
    machines: tuple[str, ...]
    sensors: tuple[str, ...]
    timestamps: tuple[str, ...]
    ranges: dict[str, tuple[float, float]]
    overrides: dict[tuple[str, str], tuple[float, float]]
    readings: dict[tuple[str, str], tuple[float | None, ...]]
    want_peak: bool
    key: str
    traps: tuple[str, ...]


def _fmt(v: float | None) -> str:
    return "NULL" if v is None else f"{v:g}"


class IotFamily(TaskFamily):
    name = "iot"
    title = "IoT sensor anomaly detection"
    default_params: ClassVar[dict[str, Any]] = {"difficulty": 2, "size": 1}
    facts = (
        DomainFact(
            "sustained_only",
            "An anomaly is a run of at least 3 consecutive out-of-range readings of one sensor; "
            "shorter excursions are noise and are not reported.",
            ("at least 3 consecutive", "3 consecutive readings", "consecutive out-of-range"),
        ),
        DomainFact(
            "inclusive_ranges",
            "Normal ranges are inclusive: a reading exactly at the min or max limit is normal.",
            ("ranges are inclusive", "exactly at the limit", "inclusive limits"),
            common=True,
        ),
        DomainFact(
            "machine_overrides",
            "Machine-specific overrides in the parameters sheet replace the default range for that "
            "machine and sensor.",
            ("overrides replace", "machine-specific override", "override range"),
        ),
        DomainFact(
            "null_is_offline",
            "NULL readings mean the sensor was offline; they are never anomalies.",
            ("null readings", "sensor was offline", "offline, not anomal"),
        ),
    )
    constraints = (
        Constraint(
            "include_peak",
            "When the task asks for peak values, every anomaly entry carries a `peak` field.",
            ("every field the task asks", "include peak", "peak field"),
        ),
    )

    # ------------------------------------------------------------------ generation
    def world(self, seed: int, params: dict[str, Any]) -> IotWorld:
        return _world(seed, json.dumps(params, sort_keys=True))

    def instruction(self, world: IotWorld, instance_id: str) -> str:
        fields = "`machine`, `sensor`, `start` (the timestamp of the first anomalous reading)"
        if world.want_peak:
            fields += " and `peak` (the reading furthest outside the range)"
        return (
            f"Plant {world.plant}: check the sensor readings of {world.day} for anomalies against the "
            f"parameters sheet. Upload a JSON list with one object per anomaly, with the fields {fields}, "
            f"to the object store at key `{world.key}`. Then call finish."
        )

    def make_env(self, instance: TaskInstance) -> IotEnv:
        return IotEnv(instance, self.world(instance.seed, instance.params))

    def baseline_tools(self) -> tuple[ToolSpec, ...]:
        return TOOLS

    # ------------------------------------------------------------------ solution
    def plan(self, instance: TaskInstance, knowledge: Knowledge) -> list[PlanStep]:
        w = self.world(instance.seed, instance.params)
        report = detect(w, knowledge)
        return [
            PlanStep("read_parameters", {}),
            PlanStep("sql_query", {"query": QUERY_ALL}),
            PlanStep(
                "upload_report",
                {"key": w.key, "content": json.dumps(report)},
                facts=tuple(f.id for f in self.facts),
                uses=(0, 1),
                constraint="include_peak" if w.want_peak else None,
            ),
            PlanStep("finish", {"summary": f"anomaly report uploaded to {w.key}"}),
        ]

    def check(self, env: TaskEnv) -> Outcome:
        assert isinstance(env, IotEnv)
        w = env.world
        truth = detect(w, self.full_knowledge())
        raw = env.objects.get(w.key)
        if raw is None:
            return Outcome(False, 0.0, {"reason": f"no object at {w.key}", "keys": sorted(env.objects)})
        try:
            got = json.loads(raw)
            if not isinstance(got, list) or not all(isinstance(x, dict) for x in got):
                raise ValueError("not a list of objects")
        except ValueError as e:
            return Outcome(False, 0.0, {"reason": f"report is not a JSON list of objects: {e}"})
        want = {_entry_key(x) for x in truth}
        have = {_entry_key(x) for x in got}
        tp = len(want & have)
        precision = tp / len(have) if have else (1.0 if not want else 0.0)
        recall = tp / len(want) if want else 1.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        exact = want == have and len(got) == len(truth)
        return Outcome(
            exact,
            1.0 if exact else round(f1, 4),
            {
                "missing": sorted(map(list, want - have)),
                "extra": sorted(map(list, have - want)),
                "traps": list(w.traps),
            },
        )


def _entry_key(x: dict[str, Any]) -> tuple:
    peak = x.get("peak")
    peak = round(float(peak), 3) if isinstance(peak, (int, float)) else peak
    return (str(x.get("machine")), str(x.get("sensor")), str(x.get("start")), peak)


@lru_cache(maxsize=512)
def _world(seed: int, params_json: str) -> IotWorld:
    params = json.loads(params_json)
    rng = random.Random(seed)
    difficulty = int(params["difficulty"])
    size = int(params["size"])
    trap_rate = TRAP_RATE.get(difficulty, 0.5)
    plant = f"P{rng.randint(1, 9)}"
    day = f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    machines = tuple(f"M{i + 1:02d}" for i in range(2 + size))
    sensors = tuple(list(SENSORS)[: 3 if size < 3 else 4])
    n_ts = 12 * size
    timestamps = tuple(f"{day}T{h % 24:02d}:00" if h < 24 else f"{day}+{h // 24}T{h % 24:02d}:00" for h in range(n_ts))
    ranges = {}
    for s in sensors:
        lo, hi = SENSORS[s]
        jitter = (hi - lo) * 0.1
        ranges[s] = (round(lo + rng.uniform(-jitter, jitter), 1), round(hi + rng.uniform(-jitter, jitter), 1))

    def normal(s: str) -> float:
        lo, hi = ranges[s]
        margin = (hi - lo) * 0.1
        return round(rng.uniform(lo + margin, hi - margin), 2)

    readings = {(m, s): [normal(s) for _ in range(n_ts)] for m in machines for s in sensors}
    used: set[tuple[str, str]] = set()

    def free_cell() -> tuple[str, str]:
        cells = [c for c in readings if c not in used]
        c = rng.choice(cells)
        used.add(c)
        return c

    def outside(s: str, lo: float, hi: float) -> float:
        span = hi - lo
        if rng.random() < 0.5:
            return round(hi + rng.uniform(0.1, 0.3) * span, 2)
        return round(lo - rng.uniform(0.1, 0.3) * span, 2)

    # true anomalies: sustained runs
    for _ in range(rng.randint(1, 2) * size):
        m, s = free_cell()
        length = rng.randint(MIN_RUN, MIN_RUN + 1)
        start = rng.randrange(0, n_ts - length)
        lo, hi = ranges[s]
        for i in range(start, start + length):
            readings[(m, s)][i] = outside(s, lo, hi)
    traps: list[str] = []
    overrides: dict[tuple[str, str], tuple[float, float]] = {}
    if rng.random() < trap_rate:  # single spikes: noise
        traps.append("spike")
        for _ in range(size):
            m, s = free_cell()
            lo, hi = ranges[s]
            readings[(m, s)][rng.randrange(n_ts)] = outside(s, lo, hi)
    if rng.random() < trap_rate:  # a run sitting exactly on the limit: normal
        traps.append("boundary")
        m, s = free_cell()
        lo, hi = ranges[s]
        start = rng.randrange(0, n_ts - MIN_RUN)
        for i in range(start, start + MIN_RUN + 1):
            readings[(m, s)][i] = hi
    if rng.random() < trap_rate:  # an override widens the range: the run is normal for that machine
        traps.append("override")
        m, s = free_cell()
        lo, hi = ranges[s]
        span = hi - lo
        overrides[(m, s)] = (lo, round(hi + 0.5 * span, 1))
        start = rng.randrange(0, n_ts - MIN_RUN)
        for i in range(start, start + MIN_RUN + 1):
            readings[(m, s)][i] = round(hi + rng.uniform(0.1, 0.3) * span, 2)
    if rng.random() < trap_rate:  # sensor offline
        traps.append("null")
        m, s = free_cell()
        start = rng.randrange(0, n_ts - MIN_RUN)
        for i in range(start, start + MIN_RUN + 1):
            readings[(m, s)][i] = None
    want_peak = rng.random() < trap_rate
    if want_peak:
        traps.append("peak")
    key = f"reports/{plant.lower()}/{day}/anomalies.json"
    return IotWorld(
        plant=plant,
        day=day,
        machines=machines,
        sensors=sensors,
        timestamps=timestamps,
        ranges=ranges,
        overrides=overrides,
        readings={k: tuple(v) for k, v in readings.items()},
        want_peak=want_peak,
        key=key,
        traps=tuple(traps),
    )


def detect(w: IotWorld, k: Knowledge) -> list[dict[str, Any]]:
    """The report an agent with knowledge `k` writes. Full knowledge gives the ground truth."""
    facts = k.facts
    min_run = MIN_RUN if "sustained_only" in facts else 1
    machines = w.machines
    if 1 in k.cut:  # the readings were not fully visible: only the first machines were read
        machines = machines[: max(1, len(machines) // 2)]
    report = []
    for m in machines:
        for s in w.sensors:
            lo, hi = w.ranges[s]
            if "machine_overrides" in facts and 0 not in k.cut:
                lo, hi = w.overrides.get((m, s), (lo, hi))
            values = w.readings[(m, s)]

            def bad(v: float | None, lo: float = lo, hi: float = hi) -> bool:
                if v is None:
                    return "null_is_offline" not in facts
                if "inclusive_ranges" in facts:
                    return v < lo or v > hi
                return v <= lo or v >= hi

            i = 0
            while i < len(values):
                if not bad(values[i]):
                    i += 1
                    continue
                j = i
                while j < len(values) and bad(values[j]):
                    j += 1
                if j - i >= min_run:
                    entry: dict[str, Any] = {"machine": m, "sensor": s, "start": w.timestamps[i]}
                    if w.want_peak and "include_peak" in k.constraints:
                        run = [v for v in values[i:j] if v is not None]
                        mid = (lo + hi) / 2
                        entry["peak"] = max(run, key=lambda v: abs(v - mid)) if run else None
                    report.append(entry)
                i = j
    return report


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
