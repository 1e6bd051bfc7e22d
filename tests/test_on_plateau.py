"""The loop's plateau option and its acceptance-reach warning (issue 20's follow-up): `on_plateau="stop"`
ends the run after `plateau` iterations without an accept, as before; `"continue"` goes on with fresh
train batches until a budget ends the run, and a killed run still resumes to the same harness; a val
set too small for the family-wise threshold is reported before any rollout is spent."""

from __future__ import annotations

import dataclasses

import pytest
from structlog.testing import capture_logs

from coevolve.agents.meta import Budget, EvolveConfig, HarnessEvolution, LLMProposer
from coevolve.agents.meta.acceptance import BootstrapTest, FamilyRule, PairedResult, SignTest, min_wins
from coevolve.store.store import HarnessStore
from coevolve.tasks import get_family
from tests.rollouts import FunctionClient, InProcessEvaluator, proposer_complete
from tests.test_meta import Crash, CrashingEvaluator, Recorded

IOT = get_family("iot")
HARMFUL = '{"edits": [{"rationale": "cut turns", "ops": [{"op": "set_max_turns", "max_turns": 2}]}]}'


def config(**kw):
    base = {"family": "iot", "model": "synthetic/weak", "train_batch": 12, "val_n": 20, "candidates": 3, "plateau": 2}
    budget = kw.pop("budget", Budget(iterations=50, rollouts=400))
    return EvolveConfig(**{**base, **kw}, budget=budget)


def make_loop(path, cfg, proposer=None, evaluator=None):
    store = HarnessStore(path / "store")
    run_id = store.create_run("evolve", cfg.to_json())
    proposer = proposer or LLMProposer(cfg.proposer, FunctionClient(proposer_complete), IOT.handbook)
    return HarnessEvolution(cfg, evaluator or InProcessEvaluator(), proposer, store, run_id), store


def test_stop_is_the_default_and_journals_as_before():
    cfg = config()
    assert cfg.on_plateau == "stop"
    assert "on_plateau" not in cfg.to_json()  # a default config is recorded as before the option
    assert EvolveConfig.from_json(cfg.to_json()) == cfg
    cont = dataclasses.replace(cfg, on_plateau="continue")
    assert cont.to_json()["on_plateau"] == "continue" and EvolveConfig.from_json(cont.to_json()) == cont
    with pytest.raises(ValueError, match="on_plateau"):
        config(on_plateau="wait")


def test_continue_spends_the_budget_where_stop_stops(tmp_path):
    """An edit the rule always rejects: stop ends after `plateau` iterations with rollouts left;
    continue runs the same first iterations, then goes on with new train batches to the budget."""
    stop_loop, stop_store = make_loop(tmp_path / "stop", config(), LLMProposer("x/recorded", FunctionClient(Recorded(HARMFUL))))
    stop = stop_loop.run()
    assert stop.stop_reason == "plateau" and stop.iterations == 2 and stop.plateaus == 0
    assert stop.rollouts_used < 400 - 100
    assert stop_store.events(stop_loop.run_id, "plateau") == []

    cont_loop, cont_store = make_loop(tmp_path / "cont", config(on_plateau="continue"),
                                      LLMProposer("x/recorded", FunctionClient(Recorded(HARMFUL))))
    ev = cont_loop.evaluator
    cont = cont_loop.run()
    assert cont.stop_reason == "budget:rollouts"
    assert ev.rollouts == cont.rollouts_used <= 400
    assert 400 - cont.rollouts_used < 12  # what is left is less than the batch that did not fit
    assert cont.iterations > stop.iterations and cont.plateaus == cont.iterations // 2
    assert [e.payload["iteration"] for e in cont_store.events(cont_loop.run_id, "plateau")] == \
        list(range(1, cont.iterations, 2))
    # up to the stop, both runs did the same work: the same decisions on the same train batches
    stop_dec = [e.payload for e in stop_store.events(stop_loop.run_id, "decision")]
    cont_dec = [e.payload for e in cont_store.events(cont_loop.run_id, "decision")]
    assert stop_dec and cont_dec[: len(stop_dec)] == stop_dec
    assert cont.harness_id == stop.harness_id == IOT.baseline_harness().id


@pytest.mark.parametrize("crash_at", [3, pytest.param(14, marks=pytest.mark.slow)])  # make test: one crash point
def test_a_killed_continue_run_resumes_to_the_same_harness(tmp_path, crash_at):
    cfg = config(on_plateau="continue", plateau=1, val_n=12, budget=Budget(iterations=50, rollouts=450))
    reference, _ = make_loop(tmp_path / "ref", cfg)
    expected = reference.run()
    assert expected.stop_reason == "budget:rollouts" and expected.plateaus >= 1 and expected.accepted

    loop, _ = make_loop(tmp_path / "crash", cfg, evaluator=CrashingEvaluator(crash_at))
    with pytest.raises(Crash):
        loop.run()
    resumed = HarnessEvolution(cfg, InProcessEvaluator(), LLMProposer(cfg.proposer, FunctionClient(proposer_complete), IOT.handbook),
                               HarnessStore(tmp_path / "crash" / "store", create=False), loop.run_id)
    result = resumed.run(resume=True)
    assert (result.harness_id, result.evolved_val, result.plateaus, result.rollouts_used, result.iterations) == (
        expected.harness_id, expected.evolved_val, expected.plateaus, expected.rollouts_used, expected.iterations)


def test_min_wins_is_the_sign_tests_m():
    for k, m in ((1, 4), (2, 5), (3, 5), (5, 6)):  # 2^-m < 0.1 / k
        rule = FamilyRule(SignTest(0.1), k)
        assert min_wins(rule, 12) == m
        assert rule.accepts(PairedResult(m, 0, 12 - m)) and not rule.accepts(PairedResult(m - 1, 0, 13 - m))
        assert min_wins(rule, m) == m and min_wins(rule, m - 1) is None
    assert min_wins(FamilyRule(BootstrapTest(0.1), 3), 12) == 3
    assert min_wins(FamilyRule(SignTest(0.1), 3, family_wise=False), 12) == 4


def test_a_val_set_too_small_for_the_rule_is_reported_before_any_rollout(tmp_path):
    cfg = config(val_n=2, val_seeds=2, budget=Budget(iterations=2, rollouts=200))  # 4 pairs; k = 3 needs 5 wins
    loop, store = make_loop(tmp_path, cfg, LLMProposer("x/recorded", FunctionClient(Recorded(HARMFUL))))
    warning = loop.acceptance_reach()
    assert loop.evaluator.rollouts == 0
    assert warning["check"] == "val pairs" and warning["pairs"] == 4 and warning["wins_needed"] is None
    assert warning["k"] == 3 and "cannot reach" in warning["message"]
    with capture_logs() as logs:
        loop.run()
    assert [e.payload for e in store.events(loop.run_id, "warning")][:1] == [warning]
    assert any(entry["log_level"] == "warning" and entry["detail"] == warning["message"] for entry in logs)
    # with one candidate 4 wins reach alpha = 0.1 (2^-4 < 0.1): no warning about the pairs
    one, _ = make_loop(tmp_path / "one", dataclasses.replace(cfg, candidates=1))
    assert one.acceptance_reach() is None


class _AllPassOnVal(InProcessEvaluator):
    """The real executor, but every val rollout passes: the starting harness leaves no pair to win."""

    def evaluate(self, jobs, model):
        out = super().evaluate(jobs, model)
        return [dataclasses.replace(t, error="none", outcome=dataclasses.replace(t.outcome, passed=True))
                if inst.split == "val" and t.outcome is not None else t for (inst, _, _), t in zip(jobs, out)]


def test_a_starting_harness_with_too_few_failed_pairs_is_reported(tmp_path):
    cfg = config(val_n=6, budget=Budget(iterations=1, rollouts=200))  # 12 pairs: enough in principle
    loop, store = make_loop(tmp_path, cfg, LLMProposer("x/recorded", FunctionClient(Recorded(HARMFUL))), evaluator=_AllPassOnVal())
    assert loop.acceptance_reach() is None
    loop.run()
    warnings = [e.payload for e in store.events(loop.run_id, "warning")]
    assert [w["check"] for w in warnings] == ["winnable pairs"]
    assert warnings[0]["winnable"] == 0 and warnings[0]["wins_needed"] == 5 and warnings[0]["pairs"] == 12
    # the real baseline fails enough of the 12 pairs to be beaten: no warning
    real, real_store = make_loop(tmp_path / "real", cfg, LLMProposer("x/recorded", FunctionClient(Recorded(HARMFUL))))
    real.run()
    assert real_store.events(real.run_id, "warning") == []
