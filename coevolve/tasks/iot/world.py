"""IoT world generation: machines x sensors x hourly readings, a parameters sheet with per-machine
overrides, and the traps of the instance (a pure function of seed and knobs)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

SENSORS = {
    "temperature": (40.0, 80.0),
    "vibration": (0.5, 5.0),
    "pressure": (90.0, 110.0),
    "current": (5.0, 15.0),
}
TRAP_RATE = {1: 0.15, 2: 0.3, 3: 0.5}
MIN_RUN = 3
# size 0, the small-model level (docs/results/real-weights-design.md): 2 machines x 2 sensors x 4 hours,
# one sustained anomaly, at most one instance of each trap, each in a (machine, sensor) of its own
SMALL_SENSORS = 2
SMALL_HOURS = 4


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


def build_world(seed: int, params: dict[str, Any]) -> IotWorld:
    rng = random.Random(seed)
    size = int(params["size"])
    small = size == 0
    trap_rate = TRAP_RATE.get(int(params["difficulty"]), 0.5)
    plant = f"P{rng.randint(1, 9)}"
    day = f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    machines = tuple(f"M{i + 1:02d}" for i in range(2 + size))
    sensors = tuple(list(SENSORS)[: SMALL_SENSORS if small else 3 if size < 3 else 4])
    n_ts = SMALL_HOURS if small else 12 * size
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

    def room() -> bool:
        """Whether a trap still finds a (machine, sensor) of its own (always, except at size 0)."""
        return len(used) < len(readings)

    def outside(s: str, lo: float, hi: float) -> float:
        span = hi - lo
        if rng.random() < 0.5:
            return round(hi + rng.uniform(0.1, 0.3) * span, 2)
        return round(lo - rng.uniform(0.1, 0.3) * span, 2)

    # true anomalies: sustained runs
    for _ in range(1 if small else rng.randint(1, 2) * size):
        m, s = free_cell()
        length = MIN_RUN if small else rng.randint(MIN_RUN, MIN_RUN + 1)
        start = rng.randrange(0, n_ts - length + small)
        lo, hi = ranges[s]
        for i in range(start, start + length):
            readings[(m, s)][i] = outside(s, lo, hi)
    traps: list[str] = []
    overrides: dict[tuple[str, str], tuple[float, float]] = {}
    if rng.random() < trap_rate and room():  # single spikes: noise
        traps.append("spike")
        for _ in range(size or 1):
            m, s = free_cell()
            lo, hi = ranges[s]
            readings[(m, s)][rng.randrange(n_ts)] = outside(s, lo, hi)
    if rng.random() < trap_rate and room():  # a run sitting exactly on the limit: normal
        traps.append("boundary")
        m, s = free_cell()
        lo, hi = ranges[s]
        start = rng.randrange(0, n_ts - MIN_RUN)
        for i in range(start, start + MIN_RUN + 1):
            readings[(m, s)][i] = hi
    if rng.random() < trap_rate and room():  # an override widens the range: the run is normal for that machine
        traps.append("override")
        m, s = free_cell()
        lo, hi = ranges[s]
        span = hi - lo
        overrides[(m, s)] = (lo, round(hi + 0.5 * span, 1))
        start = rng.randrange(0, n_ts - MIN_RUN)
        for i in range(start, start + MIN_RUN + 1):
            readings[(m, s)][i] = round(hi + rng.uniform(0.1, 0.3) * span, 2)
    if rng.random() < trap_rate and room():  # sensor offline
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


