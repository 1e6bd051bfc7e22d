"""Information boundaries (docs/ARCHITECTURE.md §5): no proposer ever receives the testbed's answer key.

The answer key is everything in `Trajectory.ground_truth` (recorded causes, decisive turns, trap
labels) and the family's own catalogue (fact and constraint ids and statements). These tests capture
every message and tool result a proposer model receives during real evolution iterations and look
for any of it; and they check that the synthetic proposer's output does not change when the answer
key is removed from the world altogether."""

from __future__ import annotations

import json
import re

import pytest

from coevolve.agents.meta import EvolveConfig, HarnessEvolution, LLMProposer
from coevolve.agents.meta.evidence import build_evidence, describe_failure
from coevolve.agents.meta.loop import Budget
from coevolve.agents.meta.proposer import proposer_messages
from coevolve.services.gateway import Gateway
from coevolve.store.store import HarnessStore
from coevolve.tasks import get_family
from coevolve.testbed.counterfactual import with_counterfactuals
from tests.rollouts import FunctionClient, InProcessEvaluator, proposer_complete, rollout_all

FAM = get_family("iot")
ANSWER_KEY_MARKERS = ("ground_truth", "recorded_cause", "decisive_turn", "deviations", '"traps"', '"cause"', "relied_on", "oracle")


def answer_key_leaks(text: str, family) -> list[str]:
    found = [m for m in ANSWER_KEY_MARKERS if m in text]
    for item in (*family.facts, *family.constraints):
        if re.search(rf"\b{re.escape(item.id)}\b", text):
            found.append(item.id)
        if item.statement in text:
            found.append(f"statement of {item.id}")
    return found


class Recording:
    """Wraps the proposer's model call and keeps everything the model was sent."""

    def __init__(self):
        self.seen: list[str] = []

    def __call__(self, model, messages, tools, seed):
        self.seen.append(json.dumps([messages, tools], default=str))
        return proposer_complete(model, messages, tools, seed)


@pytest.fixture(scope="module")
def weak_failures():
    trajs = rollout_all(FAM.generate("train", 30), FAM.baseline_harness(), "synthetic/weak")
    failed = with_counterfactuals([t for t in trajs if not t.passed], FAM.baseline_harness(), client=Gateway())  # the whole key
    assert failed and all(t.ground_truth.get("deviations") for t in failed)  # there is an answer key to leak
    return failed


def test_evidence_carries_nothing_of_the_answer_key(weak_failures):
    for t in weak_failures:
        text = json.dumps(describe_failure(t))
        assert answer_key_leaks(text, FAM) == [], t.instance.id
    assert weak_failures[0].public_view().ground_truth == {}


@pytest.mark.parametrize("proposer", ["synthetic/meta", "synthetic/meta-generic"])
def test_nothing_a_proposer_receives_during_evolution_holds_the_answer_key(tmp_path, proposer):
    config = EvolveConfig(family="iot", model="synthetic/weak", proposer=proposer, val_n=20, train_batch=20,
                          budget=Budget(iterations=2, rollouts=1000))
    store = HarnessStore(tmp_path / "store")
    run_id = store.create_run("evolve", config.to_json())
    recording = Recording()
    HarnessEvolution(config, InProcessEvaluator(), LLMProposer(proposer, FunctionClient(recording), FAM.handbook), store, run_id).run()
    assert recording.seen
    for text in recording.seen:
        assert answer_key_leaks(text, FAM) == []


def test_synthetic_proposer_output_is_unchanged_when_the_answer_key_is_removed(weak_failures, monkeypatch):
    """Strip the ground truth from the trajectories and empty the family's fact and constraint lists:
    the synthetic proposer's whole tool dialogue and answer stay identical."""
    def dialogue(failures):
        evidence = build_evidence("iot", FAM.baseline_harness(), failures, [], 8)
        recording = Recording()
        proposals, _ = LLMProposer("synthetic/meta", FunctionClient(recording), FAM.handbook).propose(evidence, FAM.baseline_harness(), 3, seed=0)
        return recording.seen, [p.raw for p in proposals]

    with_key = dialogue(weak_failures)
    monkeypatch.setattr(type(FAM), "facts", ())
    monkeypatch.setattr(type(FAM), "constraints", ())
    without_key = dialogue([t.public_view() for t in weak_failures])
    assert with_key == without_key
    assert len(with_key[0]) == 3  # search, read, answer: it did use the handbook


def test_proposer_prompt_promises_no_recorded_causes():
    text = json.dumps(proposer_messages({"family": "iot", "failures": []}, 3, handbook=True)).lower()
    assert "recorded" not in text and "cause" not in text
