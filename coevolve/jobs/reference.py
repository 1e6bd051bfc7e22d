"""The reference solver's row beside an eval's (`coevolve eval --reference`): each family's plan run
through its tools on the eval's instances, no model and no Ray."""

from __future__ import annotations

from typing import Any

from coevolve.jobs.eval import tau2_block
from coevolve.values import TaskInstance, Trajectory


def reference_result(fam: str, instances: list[TaskInstance], split: str) -> dict[str, Any]:
    """The reference solver's score on the same instances (no model: the plan run through the tools)."""
    from coevolve.tasks import get_family

    family = get_family(fam)
    outcomes = [family.reference_solve(i)[0] for i in instances]
    passed = sum(o.passed for o in outcomes)
    out = {"family": fam, "model": "reference", "split": split, "n": len(instances), "passed": passed,
           "pass_rate": round(passed / len(instances), 4), "errors": {}, "run_id": None}
    trajs = [Trajectory(i, "reference", "reference", 0, (), (), o) for i, o in zip(instances, outcomes)]
    if (block := tau2_block(fam, trajs, split, 1)) is not None:  # the gold actions replayed: never tau2's number
        why = "the reference solver replays tau2's gold actions: a check of the tasks, not an agent"
        block["comparable"], block["not_comparable"] = False, [why, *block["not_comparable"]]
        block["note"] = "not comparable with tau2's leaderboard: " + "; ".join(block["not_comparable"])
        out["tau2"] = block
    return out

