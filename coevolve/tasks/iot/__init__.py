"""IoT anomaly detection: find sustained out-of-range sensor readings and upload a report.

Services: a readings table (machines x sensors x hourly timestamps) in sqlite, a parameters sheet with
normal ranges (and per-machine overrides), a mock object store. The checker reads the uploaded object,
never the agent's words.
"""

from __future__ import annotations

from coevolve.tasks.base import TaskFamily
from coevolve.tasks.iot.checker import check
from coevolve.tasks.iot.env import HELPER_TOOLS, TOOLS, IotEnv
from coevolve.tasks.iot.plan import detect, plan
from coevolve.tasks.iot.world import IotWorld, build_world

__all__ = ["IotFamily", "detect"]


class IotFamily(TaskFamily):
    name = "iot"
    title = "IoT sensor anomaly detection"
    build_world = staticmethod(build_world)
    env_type = IotEnv
    base_tools = TOOLS
    helper_tools = HELPER_TOOLS
    planner = staticmethod(plan)
    checker = staticmethod(check)

    def instruction(self, world: IotWorld, instance_id: str) -> str:
        fields = "`machine`, `sensor`, `start` (the timestamp of the first anomalous reading)"
        if world.want_peak:
            fields += " and `peak` (the reading furthest outside the range)"
        return (
            f"Plant {world.plant}: check the sensor readings of {world.day} for anomalies against the "
            f"parameters sheet. Upload a JSON list with one object per anomaly, with the fields {fields}, "
            f"to the object store at key `{world.key}`. Then call finish."
        )
