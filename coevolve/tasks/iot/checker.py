"""The IoT grader: reads the uploaded object, never the agent's words, and reports per requirement.

Reasons name what is wrong with the agent's own report (its entries, their count) the way a failing
test would; they never name the anomalies it missed or why an instance was built the way it was."""

from __future__ import annotations

import json
from typing import Any

from coevolve.tasks.base import Knowledge, Requirement, graded
from coevolve.tasks.iot.env import IotEnv
from coevolve.tasks.iot.plan import detect
from coevolve.values import Outcome

PEAK_TOL = 1e-3


def _where(x: dict[str, Any]) -> tuple[str, str, str]:
    return (str(x.get("machine")), str(x.get("sensor")), str(x.get("start")))


def _label(k: tuple[str, str, str]) -> str:
    return f"{k[0]}/{k[1]} at {k[2]}"


def _listing(keys: list[tuple[str, str, str]], n: int = 5) -> str:
    shown = ", ".join(_label(k) for k in keys[:n])
    return shown + (f" and {len(keys) - n} more" if len(keys) > n else "")


def check(env: IotEnv, full: Knowledge) -> Outcome:
    w = env.world
    raw = env.objects.get(w.key)
    if raw is None:
        keys = ", ".join(sorted(env.objects)) or "none"
        return graded([Requirement("report_uploaded", False, f"no object at {w.key} (objects in the store: {keys})")], 0.0)
    try:
        got = json.loads(raw)
        if not isinstance(got, list) or not all(isinstance(x, dict) for x in got):
            raise ValueError("it is not a list of objects")
    except ValueError as e:
        return graded(
            [Requirement("report_uploaded", True), Requirement("report_is_json_list", False, f"the report at {w.key} is not a JSON list of objects: {e}")],
            0.0,
        )
    truth = detect(w, full)
    want = {_where(x): x for x in truth}
    have = [_where(x) for x in got]
    found = [k for k in have if k in want]
    false_alarms = [k for k in have if k not in want]
    missed = len(set(want) - set(have))
    duplicates = len(have) - len(set(have))
    reqs = [
        Requirement("report_uploaded", True),
        Requirement("report_is_json_list", True),
        Requirement(
            "every_anomaly_reported",
            missed == 0,
            f"{missed} of the {len(want)} anomalies in the data are missing from the report" if missed else "",
        ),
        Requirement(
            "no_false_alarms",
            not false_alarms and not duplicates,
            (f"{len(false_alarms)} reported entries are not anomalies: {_listing(false_alarms)}" if false_alarms else "")
            + (f"; {duplicates} entries are reported twice" if duplicates else ""),
        ),
    ]
    if w.want_peak:
        bad = []
        for x in got:
            k = _where(x)
            if k not in want:
                continue
            peak, expected = x.get("peak"), want[k].get("peak")
            if not isinstance(peak, (int, float)) or expected is None or abs(float(peak) - expected) > PEAK_TOL:
                bad.append(k)
        lacking = sum(1 for x in got if "peak" not in x)
        reason = ""
        if bad:
            reason = f"the task asks for a peak value in every entry; {len(bad)} entries have a missing or wrong peak: {_listing(bad)}"
            if lacking:
                reason += f" ({lacking} have no `peak` field at all)"
        reqs.append(Requirement("peak_values", not bad, reason))
    tp = len(set(found))
    precision = tp / len(have) if have else (1.0 if not want else 0.0)
    recall = tp / len(want) if want else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return graded(reqs, f1)
