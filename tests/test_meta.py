"""Harness evolution: proposer parsing (recorded responses), acceptance, budgets, resume, usage."""

from __future__ import annotations

from pathlib import Path

import pytest

from coevolve.agents.meta import Budget, EvolveConfig, HarnessEvolution, LLMProposer
from coevolve.agents.meta.acceptance import PairedResult, SignTest, sign_test_p
from coevolve.agents.meta.proposer import parse_response, proposer_messages
from coevolve.analysis.usage import edit_usage
from coevolve.llm.contract import Completion
from coevolve.store.store import HarnessStore
from coevolve.tasks import get_family
from coevolve.values import AddHook, AddRecipe, HarnessEdit, HookSpec, Recipe
from tests.rollouts import FunctionClient, InProcessEvaluator, proposer_complete, rollout_all

FIXTURES = Path(__file__).parent / "fixtures" / "proposer"
IOT = get_family("iot")


# ------------------------------------------------------------------ recorded proposer responses
def test_fenced_answer_with_prose_parses_into_applicable_edits():
    props = parse_response((FIXTURES / "gemini_fenced.txt").read_text(), IOT.baseline_harness())
    assert [p.error for p in props] == [None, None, None]
    assert isinstance(props[0].edit.ops[0], AddRecipe)
    assert props[1].candidate.hooks[0].kind == "validate_args"
    assert props[1].candidate.hooks[0].params["reminder"] == "Fix {tool} and retry."
    assert props[2].candidate.max_turns == 30 and props[2].candidate.section("style")


def test_invalid_edits_are_rejected_with_reasons_and_the_rest_kept():
    props = parse_response((FIXTURES / "partly_invalid.txt").read_text(), IOT.baseline_harness())
    errors = [p.error for p in props]
    assert "unknown op 'rewrite_model'" in errors[0]
    assert "no tool 'teleport'" in errors[1]
    assert "runs on 'before_call'" in errors[2]
    assert errors[3] is None and props[3].candidate.context.strategy == "summarise"


def test_answer_without_json_is_one_rejected_proposal():
    props = parse_response((FIXTURES / "prose_only.txt").read_text(), IOT.baseline_harness())
    assert len(props) == 1 and props[0].edit is None and "no JSON" in props[0].error


def test_proposer_prompt_carries_the_evidence_and_k():
    msgs = proposer_messages({"family": "iot", "failures": [{"instance": "iot/val/1"}]}, k=2)
    assert "up to 2 independent candidate edits" in msgs[0]["content"]
    assert "handbook" not in msgs[0]["content"].split("Operations")[-1]  # the tool note comes only with the tools
    assert "iot/val/1" in msgs[1]["content"]


# ------------------------------------------------------------------ acceptance
def test_sign_test_values_and_early_decisions():
    assert sign_test_p(4, 0) == pytest.approx(1 / 16)
    assert sign_test_p(0, 0) == 1.0
    rule = SignTest(alpha=0.1)
    assert rule.decide(PairedResult(4, 0, 6)) == "accept"
    assert rule.decide(PairedResult(3, 0, 7)) == "reject"
    assert rule.decide(PairedResult(0, 3, 7, winnable=2, losable=2)) == "reject"  # cannot win enough
    assert rule.decide(PairedResult(6, 0, 4, winnable=1, losable=1)) == "accept"  # cannot lose enough
    assert rule.decide(PairedResult(2, 0, 8, winnable=10)) is None
    assert rule.decide(PairedResult(3, 0, 7, winnable=0, losable=5)) == "reject"  # no wins left to get


# ------------------------------------------------------------------ the loop
class Recorded:
    """Replays one recorded proposer answer for every call (GEPA-style record/replay)."""

    def __init__(self, text: str):
        self.text = text
        self.calls = 0

    def __call__(self, model, messages, tools, seed):
        self.calls += 1
        return Completion({"role": "assistant", "content": self.text}, 1000, 200, 0.01)


def small_config(**kw):
    base = {"family": "iot", "model": "synthetic/weak", "train_batch": 12, "val_n": 40, "candidates": 3, "plateau": 2}
    budget = kw.pop("budget", Budget(iterations=6, rollouts=1500))
    return EvolveConfig(**{**base, **kw}, budget=budget)


def make_loop(tmp_path, config, proposer=None, evaluator=None):
    store = HarnessStore(tmp_path / "store")
    run_id = store.create_run("evolve", config.to_json())
    proposer = proposer or LLMProposer(config.proposer, FunctionClient(proposer_complete), IOT.handbook)
    return HarnessEvolution(config, evaluator or InProcessEvaluator(), proposer, store, run_id), store


def test_rejected_edit_never_changes_the_current_harness(tmp_path):
    harmful = '{"edits": [{"rationale": "cut turns", "ops": [{"op": "set_max_turns", "max_turns": 2}]}]}'
    config = small_config(budget=Budget(iterations=2, rollouts=1000))
    loop, store = make_loop(tmp_path, config, LLMProposer("x/recorded", FunctionClient(Recorded(harmful))))
    result = loop.run()
    assert result.harness_id == IOT.baseline_harness().id
    assert result.accepted == [] and result.rejected >= 1
    decisions = store.events(loop.run_id, "decision")
    assert decisions and all(e.payload["outcome"] == "reject" for e in decisions)
    assert len(store.list_harnesses("iot")) == 1


def test_evolution_with_synthetic_meta_improves_weak_val(tmp_path):
    loop, store = make_loop(tmp_path, small_config())
    result = loop.run()
    assert result.evolved_val >= result.baseline_val + 0.2, (result.baseline_val, result.evolved_val)
    lineage = store.lineage(result.harness_id)
    assert lineage[0].id == result.baseline_id
    assert all(r.val_gain and r.val_gain > 0 for r in lineage[1:])
    assert result.rollouts_used <= 1500


@pytest.mark.parametrize("limit", [100, 333])
def test_rollout_budget_is_never_exceeded(tmp_path, limit):
    loop, _ = make_loop(tmp_path, small_config(plateau=100, budget=Budget(iterations=50, rollouts=limit)))
    ev = loop.evaluator
    result = loop.run()
    assert result.stop_reason == "budget:rollouts"
    assert ev.rollouts == result.rollouts_used <= limit


def test_token_and_dollar_budgets_overshoot_by_at_most_one_call(tmp_path):
    rec = Recorded('{"edits": []}')
    config = small_config(plateau=100, budget=Budget(iterations=50, proposer_tokens=2500))
    loop, _ = make_loop(tmp_path, config, LLMProposer("x/r", FunctionClient(rec)))
    result = loop.run()
    assert result.stop_reason == "budget:proposer_tokens"
    assert 2500 <= result.spend["proposer_tokens"] < 2500 + 1200  # one recorded call is 1200 tokens
    config = small_config(plateau=100, budget=Budget(iterations=50, usd=0.02))
    loop, _ = make_loop(tmp_path / "b", config, LLMProposer("x/r", FunctionClient(Recorded('{"edits": []}'))))
    result = loop.run()
    assert result.stop_reason == "budget:usd"


class Crash(BaseException):
    pass


class CrashingEvaluator(InProcessEvaluator):
    def __init__(self, crash_at: int):
        super().__init__()
        self.crash_at = crash_at

    def evaluate(self, jobs, model):
        if self.calls + 1 == self.crash_at:
            raise Crash()
        return super().evaluate(jobs, model)


@pytest.mark.parametrize("crash_at", [2, pytest.param(9, marks=pytest.mark.slow)])  # a late crash: ~22 s more
def test_killed_run_resumes_from_the_store_to_the_same_final_harness(tmp_path, crash_at):
    config = small_config()
    reference, _ = make_loop(tmp_path / "ref", config)
    expected = reference.run()

    loop, _ = make_loop(tmp_path / "crash", config, evaluator=CrashingEvaluator(crash_at))
    with pytest.raises(Crash):
        loop.run()
    # a new process would only have the store and the run id
    resumed = HarnessEvolution(config, InProcessEvaluator(), LLMProposer(config.proposer, FunctionClient(proposer_complete), IOT.handbook),
                               HarnessStore(tmp_path / "crash" / "store", create=False), loop.run_id)
    result = resumed.run(resume=True)
    assert result.harness_id == expected.harness_id
    assert result.evolved_val == expected.evolved_val


def test_edit_usage_rates():
    base = IOT.baseline_harness()
    hook = HarnessEdit((AddHook(HookSpec("before_call", "validate_args")),))
    fact = next(f for f in IOT.facts if f.id == "sustained_only")
    recipe = HarnessEdit((AddRecipe(Recipe(fact.id, fact.statement)),))
    from coevolve.edits import apply_edit

    h = apply_edit(apply_edit(base, hook), recipe)
    val = IOT.generate("val", 40)
    trajs = rollout_all(val, h, "synthetic/weak")
    rates = edit_usage([hook, recipe], trajs)
    fired = sum(any("hook:validate_args" in e for turn in t.turns for e in turn.events) for t in trajs)
    assert rates[0]["used"] == fired > 0
    with_spikes = sum("spike" in IOT.answer_key(i)["traps"] for i in val)
    assert 0 < rates[1]["used"] <= with_spikes  # the recipe matters only where spikes occur
    expert = edit_usage([hook, recipe], rollout_all(val, h, "synthetic/expert"))
    assert expert[0]["used"] < rates[0]["used"]  # the expert rarely makes malformed calls
    assert expert[1]["used"] == 0  # and knows the rule without the recipe
