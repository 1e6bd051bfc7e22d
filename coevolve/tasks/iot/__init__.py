"""IoT anomaly detection: find sustained out-of-range sensor readings and upload a report.

Services: a readings table (machines x sensors x hourly timestamps) in sqlite, a parameters sheet with
normal ranges (and per-machine overrides), a mock object store. The checker reads the uploaded object,
never the agent's words. The package: `world` (generation), `env` (services and tools), `plan` (the
reference solution as steps), `checker` (the grader), `handbook.md` (the domain documentation).
"""

from __future__ import annotations

from typing import Any, ClassVar

from coevolve.tasks.base import Concept, Constraint, DomainFact, Knowledge, PlanStep, TaskEnv, TaskFamily
from coevolve.tasks.iot.checker import check
from coevolve.tasks.iot.env import HELPER_TOOLS, TOOLS, IotEnv
from coevolve.tasks.iot.plan import detect, plan
from coevolve.tasks.iot.world import IotWorld, build_world
from coevolve.values import Outcome, TaskInstance, ToolSpec

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
            reversals=(
                # every out-of-range reading, even one on its own, is an anomaly
                Concept(
                    (
                        ("every", "each", "any", "single", "one ", "individual", "isolated", "lone",
                         "one-off"),
                        ("out-of-range reading", "out of range reading", "reading outside",
                         "reading out of", "reading beyond", "reading that is out",
                         "reading that falls outside", "value outside", "excursion", "spike", "blip"),
                        ("anomal", "report", "flag", "enough", "suffic"),
                    ),
                    unless=("consecutiv", "in a row", "three", "3", "run of", "sustained", "streak",
                            "at least"),
                ),
            ),
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
            reversals=(
                # a reading exactly at a limit is out of range
                Concept((
                    ("exactly at", "exactly on", "exactly equal", "equal to the m", "equal to its m",
                     "equal to a limit", "equal to the limit", "equal to either", "equals the m",
                     "equals a limit", "at the limit", "on the limit", "at a limit", "on a limit",
                     "at its limit", "at the min", "at the max", "at the boundary", "on the boundary",
                     "hits the limit", "boundary value", "the limit itself", "the limits themselves"),
                    ("out of range", "out-of-range", "outside the range", "outside the normal", "anomal",
                     "abnormal", "violat", "breach", "flag", "report", "not normal", "not in range",
                     "not within"),
                ), unless=("normal", "acceptable", "fine", "in range", "within range", "within the range",
                           "inclusive", "strictly", "only if", "only when", "beyond", "past the",
                           "above the max", "below the min", "ok")),
                # the ranges exclude their limits
                Concept((
                    ("range", "limit", "interval", "bound"),
                    ("exclusive", "not inclusive", "isn't inclusive", "aren't inclusive", "open interval",
                     "strictly inside", "strictly within", "strictly between"),
                )),
            ),
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
            reversals=(
                # the default range holds for every machine
                Concept(
                    (
                        ("default",),
                        ("every machine", "all machines", "each machine", "any machine", "always",
                         "everywhere", "regardless", "whatever the machine"),
                        ("range", "limit", "band"),
                    ),
                    unless=("unless", "otherwise", "fall back", "falls back", "if no", "when no", "where no",
                            "absent", "no override", "none exists", "not defined", "isn't defined", "only"),
                ),
                # the overrides do not count
                Concept((
                    ("override", "per-machine", "machine-specific", "machine specific", "own range",
                     "own limit", "specific range"),
                    ("informational", "for information", "for reference only", "no effect", "irrelevant",
                     "not binding", "be ignored", "are ignored", "can be ignored", "disregarded",
                     "ignore the override", "ignore any override", "ignore overrides",
                     "ignore the per-machine", "ignore per-machine", "ignore the machine-specific",
                     "ignore machine-specific"),
                )),
                # the default instead of the override
                Concept((
                    ("default",),
                    ("instead of the override", "rather than the override", "instead of any override",
                     "rather than any override", "over the override", "not the override",
                     "instead of the machine", "rather than the machine", "instead of the per-machine",
                     "rather than the per-machine"),
                )),
            ),
        ),
        DomainFact(
            "null_is_offline",
            "NULL readings mean the sensor was offline; they are never anomalies.",
            Concept((
                ("null", "missing reading", "missing value", "empty reading", "blank", "no value", "gap"),
                ("never", "not an anomal", "not anomal", "no anomal", "not count", "ignore", "skip", "exclude",
                 "disregard", "not out-of-range", "not out of range", "not report", "not flag", "offline"),
            )),
            reversals=(
                # a NULL reading is an anomaly
                Concept((
                    ("null", "missing reading", "missing value", "empty reading", "blank reading"),
                    ("is an anomal", "are anomal", "as an anomal", "as anomal", "count as an anomal",
                     "counts as an anomal", "reported", "report it", "report them", "report null",
                     "report each", "report every", "flag", "out of range", "out-of-range", "anomalous",
                     "abnormal", "a fault", "an alarm"),
                )),
            ),
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
            ),
            reversals=(
                # anomaly entries go without a peak
                Concept((
                    ("peak",),
                    ("omit", "leave out", "leave the peak", "leave peak", "drop the peak", "without a peak",
                     "without the peak", "no peak", "exclude", "never add", "never include", "never carr",
                     "don't add", "do not add", "don't include", "do not include", "not needed",
                     "isn't needed", "not required", "isn't required", "unnecessary", "only the sensor"),
                )),
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

    def optional_tools(self) -> tuple[ToolSpec, ...]:
        """Helper tools the environment offers beside the baseline's (domain computation over data the base
        tools expose); an `add_tool` edit naming one adds it to a harness (`coevolve.tasks.helpers`)."""
        return HELPER_TOOLS

    def plan(self, instance: TaskInstance, knowledge: Knowledge) -> list[PlanStep]:
        return plan(self.world(instance.seed, instance.params), knowledge)

    def check(self, env: TaskEnv) -> Outcome:
        assert isinstance(env, IotEnv)
        return check(env, self.full_knowledge())
