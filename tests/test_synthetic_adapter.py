"""A synthetic adapter learned through the training job interface changes the synthetic model."""

from __future__ import annotations

from coevolve.analysis.summary import recorded_causes
from coevolve.services.training import train_adapter
from coevolve.tasks import get_family
from coevolve.testbed.policy import learn_adapter, profile_for
from tests.rollouts import pass_rate, rollout_all

IOT = get_family("iot")


def row(content: str, calls: int = 1, train: bool = True) -> dict:
    tool_calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": "sql_query", "arguments": '{"query": "SELECT 1"}'}}
        for i in range(calls)
    ]
    return {
        "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": content, "tool_calls": tool_calls, "train": train},
        ],
        "tools": [],
        "provenance": {"kind": "corrected"},
    }


def test_learning_rules():
    fact = next(f for f in IOT.facts if f.id == "null_is_offline")
    learned = learn_adapter([row(fact.statement), row("nothing", train=True)], "synthetic/weak")
    assert learned["facts"] == ["null_is_offline"]
    assert learned["style"] == "stepwise"
    assert learned["error_rate"] < profile_for("weak").error_rate
    # facts in turns without loss are not learned; mostly batched turns shift the style
    learned = learn_adapter([row(fact.statement, calls=3, train=False), row("x", calls=3), row("y", calls=2)], "synthetic/weak")
    assert learned["facts"] == [] and learned["style"] == "batched"
    p = profile_for("weak", learned)
    assert p.style == "batched" and p.planning_capacity == profile_for("weak").planning_capacity


def test_adapter_served_as_model_at_adapter_raises_weak(tmp_path, monkeypatch, store):
    monkeypatch.setenv("COEVOLVE_STORE", str(store.root))
    statements = [f.statement for f in IOT.facts]
    rows = [row(s) for s in statements]
    ref = train_adapter(rows, "synthetic/weak", "knows-iot", None, store, backend="synthetic")
    assert store.get_adapter("knows-iot") == ref
    val = IOT.generate("val", 40)
    h = IOT.baseline_harness()
    base = pass_rate(rollout_all(val, h, "synthetic/weak"))
    tuned = pass_rate(rollout_all(val, h, "synthetic/weak@knows-iot"))
    assert tuned > base + 0.2


def test_batched_style_without_capacity_fails_by_planning_and_a_stepwise_prompt_repairs_it(monkeypatch, store):
    from coevolve.edits import apply_edit
    from coevolve.values import HarnessEdit, SetSection

    monkeypatch.setenv("COEVOLVE_STORE", str(store.root))
    rows = [row(f.statement, calls=3) for f in IOT.facts]  # imitation of a batched expert
    train_adapter(rows, "synthetic/weak", "imitated", None, store, backend="synthetic")
    val = IOT.generate("val", 30)
    h = IOT.baseline_harness()
    imitated = rollout_all(val, h, "synthetic/weak@imitated")
    assert any(c["category"] == "planning" for t in imitated for c in recorded_causes(t))
    stepwise = apply_edit(h, HarnessEdit((SetSection("planning", "Make one tool call per turn."),)))
    repaired = rollout_all(val, stepwise, "synthetic/weak@imitated")
    assert not any(c["category"] == "planning" for t in repaired for c in recorded_causes(t))
    assert pass_rate(repaired) > pass_rate(imitated)
