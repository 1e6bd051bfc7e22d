"""The IoT solution as a plan of steps, and the report an agent with some knowledge writes."""

from __future__ import annotations

import json
from typing import Any

from coevolve.tasks.base import Knowledge, PlanStep
from coevolve.tasks.iot.world import MIN_RUN, IotWorld

QUERY_ALL = "SELECT machine, sensor, ts, value FROM readings ORDER BY machine, sensor, ts"
FACTS = ("sustained_only", "inclusive_ranges", "machine_overrides", "null_is_offline")


def plan(w: IotWorld, knowledge: Knowledge) -> list[PlanStep]:
    report = detect(w, knowledge)
    return [
        PlanStep("read_parameters", {}),
        PlanStep("sql_query", {"query": QUERY_ALL}),
        PlanStep(
            "upload_report",
            {"key": w.key, "content": json.dumps(report)},
            facts=FACTS,
            uses=(0, 1),
            constraint="include_peak" if w.want_peak else None,
        ),
        PlanStep("finish", {"summary": f"anomaly report uploaded to {w.key}"}),
    ]


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


