"""Input that can grow is bounded where it enters a prompt: a tool observation and a checker's reason
are cut to a stated size with a marker that says how much was cut (issue 24.5)."""

from __future__ import annotations

from coevolve.tasks import get_family
from coevolve.tasks.base import (
    MAX_OBSERVATION_CHARS,
    MAX_REASON_CHARS,
    Requirement,
    TaskEnv,
    ToolResult,
    graded,
)
from coevolve.values import ToolSpec

BIG = 1_155_817


class Loud(TaskEnv):
    def tool_specs(self):
        return (ToolSpec("dump", "", {"type": "object", "properties": {}}, "dump"),
                ToolSpec("fail", "", {"type": "object", "properties": {}}, "fail"))

    def tool_dump(self):
        return "x" * BIG

    def tool_fail(self):
        return ToolResult("boom " + "y" * BIG, error=True)


def test_a_huge_observation_is_cut_with_a_marker_head_and_tail_kept():
    env = Loud(get_family("iot").instance_at("val", 0))
    for tool, prefix in (("dump", "x"), ("fail", "error: boom")):
        out = env.call(tool, {})
        assert len(out.content) <= MAX_OBSERVATION_CHARS + 100 and "characters cut]" in out.content
        assert out.content.startswith(prefix) and out.error == (tool == "fail")


def test_a_huge_checker_reason_is_cut_and_a_short_one_is_kept():
    outcome = graded([Requirement("a", False, "z" * BIG), Requirement("b", False, "short")])
    reasons = [r["reason"] for r in outcome.detail["requirements"]]
    assert len(reasons[0]) <= MAX_REASON_CHARS + 100 and "characters cut]" in reasons[0]
    assert reasons[1] == "short"

