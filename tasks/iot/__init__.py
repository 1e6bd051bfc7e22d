"""IoT anomaly detection: find sustained out-of-range sensor readings and upload a report.

Services: a readings table (machines x sensors x hourly timestamps) in sqlite, a parameters sheet with
normal ranges (and per-machine overrides), a mock object store. The checker reads the uploaded object,
never the agent's words. The package: `world` (generation), `env` (services and tools), `plan` (the
reference solution as steps), `checker` (the grader), `handbook.md` (the domain documentation).
"""

from __future__ import annotations

from typing import Any, ClassVar

from harness_store.values import Outcome, TaskInstance, ToolSpec
from tasks.base import Concept, Constraint, DomainFact, Knowledge, PlanStep, TaskEnv, TaskFamily
from tasks.iot.checker import check
from tasks.iot.env import TOOLS, IotEnv
from tasks.iot.plan import detect, plan
from tasks.iot.world import IotWorld, build_world

__all__ = ["IotEnv", "IotFamily", "IotWorld", "detect"]


class IotFamily(TaskFamily):
    name = "iot"
    title = "IoT sensor anomaly detection"
    default_params: ClassVar[dict[str, Any]] = {"difficulty": 2, "size": 1}
    facts = (
        DomainFact(
            "sustained_only",
            "An anomaly is a run of at least 3 consecutive out-of-range readings of one sensor; "
            "shorter excursions are noise and are not reported.",
            Concept((
                ("3", "three"),
                ("consecutiv", "in a row", "successiv", "back-to-back", "back to back", "uninterrupted",
                 "straight", "sustained", "run of", "stretch", "streak", "continuous"),
                ("reading", "measurement", "sample", "value", "hour", "point"),
            )),
        ),
        DomainFact(
            "inclusive_ranges",
            "Normal ranges are inclusive: a reading exactly at the min or max limit is normal.",
            Concept((
                ("inclusive", "exactly", "boundary", "boundaries", "equal to", "equals the", "sitting on",
                 "sits on", "on the limit", "at the limit", "on a limit", "at a limit", "on the edge"),
                ("normal", "in range", "in-range", "within range", "within the range", "acceptable", "not an anomal",
                 "not anomal", "belong to", "inside the", "not out of range", "not out-of-range", "strictly", "fine",
                 "not abnormal", "counts as in", "ok"),
            )),
            common=True,
        ),
        DomainFact(
            "machine_overrides",
            "Machine-specific overrides in the parameters sheet replace the default range for that "
            "machine and sensor.",
            Concept((
                ("override", "own range", "own limit", "own band", "specific range", "specific limit",
                 "machine-specific", "per-machine", "machine specific", "per machine", "dedicated range"),
                ("machine",),
                ("replace", "instead of", "in place of", "rather than", "take precedence", "takes precedence",
                 "supersede", "win", "overrule", "over the default", "is used for", "are used for", "applies to",
                 "apply to", "unless", "trump", "prevail"),
            )),
            rare=True,
        ),
        DomainFact(
            "null_is_offline",
            "NULL readings mean the sensor was offline; they are never anomalies.",
            Concept((
                ("null", "missing reading", "missing value", "empty reading", "blank", "no value", "gap"),
                ("never", "not an anomal", "not anomal", "no anomal", "not count", "ignore", "skip", "exclude",
                 "disregard", "not out-of-range", "not out of range", "not report", "not flag", "offline"),
            )),
        ),
    )
    constraints = (
        Constraint(
            "include_peak",
            "When the task asks for peak values, every anomaly entry carries a `peak` field.",
            Concept(
                (
                    ("peak",),
                    ("entry", "entries", "anomaly", "anomalies", "object", "record", "row", "report", "item"),
                    ("every", "each", "all ", "always", "must", "include", "carr", "need", "add", "require", "with"),
                ),
                unless=("never", "do not", "don't", "without", "omit"),
            ),
        ),
    )

    # ------------------------------------------------------------------ generation
    def build_world(self, seed: int, params: dict[str, Any]) -> IotWorld:
        return build_world(seed, params)

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

    def plan(self, instance: TaskInstance, knowledge: Knowledge) -> list[PlanStep]:
        return plan(self.world(instance.seed, instance.params), knowledge)

    def check(self, env: TaskEnv) -> Outcome:
        assert isinstance(env, IotEnv)
        return check(env, self.full_knowledge())
