"""The loop's screen (GEPA's minibatch gate): with `screen` N > 0 each candidate first runs the
first N train jobs the current harness failed in this iteration, and only a candidate that passes one of
them reaches the paired val comparison. Screen 0 runs no screen; the screen's rollouts are
counted, budget-checked and replayed on resume like every other batch; `coevolve evolve --screen` is
bounded."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coevolve.agents.meta import Budget, EvolveConfig, HarnessEvolution, LLMProposer
from coevolve.store.store import HarnessStore
from coevolve.tasks import get_family
from tests.rollouts import FunctionClient, InProcessEvaluator, proposer_complete
from tests.test_meta import Crash, CrashingEvaluator

IOT = get_family("iot")


def config(**kw):
    base = {"family": "iot", "model": "synthetic/weak", "train_batch": 8, "val_n": 6, "candidates": 3, "plateau": 2}
    budget = kw.pop("budget", Budget(iterations=3, rollouts=300))
    return EvolveConfig(**{**base, **kw}, budget=budget)


def make_loop(path: Path, cfg, evaluator=None, loop_cls=HarnessEvolution):
    store = HarnessStore(path / "store")
    run_id = store.create_run("evolve", cfg.to_json())
    proposer = LLMProposer(cfg.proposer, FunctionClient(proposer_complete), IOT.handbook)
    return loop_cls(cfg, evaluator or InProcessEvaluator(), proposer, store, run_id), store


def screen_batches(store: HarnessStore, run_id: str) -> list[tuple[str, int]]:
    return [(name, n) for name, _, n in store.trajectory_batches(run_id) if "-screen-" in name]


def test_screen_0_runs_no_screen_and_is_left_out_of_the_journal(tmp_path):
    cfg = config(budget=Budget(iterations=2, rollouts=300), seed=2)  # seed 2: a run that decides both ways
    assert cfg.screen == 0 and "screen" not in cfg.to_json()  # journalled as before the option
    assert EvolveConfig.from_json(cfg.to_json()) == cfg  # an older config resumes with the screen off
    on = dataclasses.replace(cfg, screen=3)
    assert on.to_json()["screen"] == 3 and EvolveConfig.from_json(on.to_json()) == on
    with pytest.raises(ValueError, match="screen must be >= 0"):
        config(screen=-1)

    now, now_store = make_loop(tmp_path / "now", cfg)
    result = now.run()
    events = [(e.kind, e.payload) for e in now_store.events(now.run_id)]
    assert screen_batches(now_store, now.run_id) == []
    assert all("screen" not in p for k, p in events if k == "decision")
    assert result.accepted and result.rejected  # the run decided both ways: a screen would have had work


def test_a_candidate_that_passes_no_screen_job_never_reaches_val(tmp_path):
    loop, store = make_loop(tmp_path, config(screen=3))
    ev = loop.evaluator
    result = loop.run()
    decisions = [e.payload for e in store.events(loop.run_id, "decision")]
    out = [d for d in decisions if d["outcome"] == "screened out"]
    compared = [d for d in decisions if d["outcome"] != "screened out"]
    assert out and compared  # this run screens some candidates out and lets others through
    val_harnesses = {t.harness_id for t in store.get_trajectories(loop.run_id) if t.instance.split == "val"}
    screened = [t for name, _ in screen_batches(store, loop.run_id) for t in store.get_trajectories(loop.run_id, name)]
    for d in out:
        assert d["screen"]["passed"] == 0 and d["screen"]["jobs"] >= 1 and "wins" not in d
        assert d["candidate"] not in val_harnesses  # not one val rollout of it
        assert not any(t.passed for t in screened if t.harness_id == d["candidate"])
    for d in compared:
        assert d["screen"]["passed"] >= 1 and d["candidate"] in val_harnesses
        # the family-wise k is the number of candidates of its iteration that reached val
        assert d["k"] == sum(1 for c in compared if c["iteration"] == d["iteration"])
    # the screen jobs are the iteration's train failures of the current harness, at the train seed
    for it in {d["iteration"] for d in decisions}:
        train = store.get_trajectories(loop.run_id, next(n for n, _, _ in store.trajectory_batches(loop.run_id)
                                                          if f"-it{it}-train-" in n))
        failed = [t.instance.id for t in train if not t.passed and t.error != "infra"][:3]
        jobs = [t for t in screened if t.seed == loop.cfg.seed + it and t.instance.split == "train"
                and t.harness_id in {d["candidate"] for d in decisions if d["iteration"] == it}]
        assert jobs and {t.instance.id for t in jobs} == set(failed)
    assert result.rejected == len(decisions) - len(result.accepted)
    assert ev.rollouts == result.rollouts_used == store.rollout_spend([loop.run_id])[0]


def test_the_screen_is_paid_from_the_budget_and_a_run_ends_at_exactly_its_budget(tmp_path):
    probe, probe_store = make_loop(tmp_path / "probe", config(screen=3))
    probe.run()
    sizes = [(name, n) for name, _, n in probe_store.trajectory_batches(probe.run_id)]
    first = next(k for k, (name, _) in enumerate(sizes) if "-screen-" in name)
    through_screen = sum(n for _, n in sizes[: first + 1])

    exact, exact_store = make_loop(tmp_path / "exact", config(screen=3, budget=Budget(iterations=3, rollouts=through_screen)))
    r = exact.run()
    assert r.stop_reason == "budget:rollouts" and r.rollouts_used == through_screen == exact.evaluator.rollouts
    assert [n for _, n in screen_batches(exact_store, exact.run_id)] == [sizes[first][1]]

    # one rollout less: the screen batch does not fit, is not launched, and no candidate reaches val
    short, short_store = make_loop(tmp_path / "short", config(screen=3, budget=Budget(iterations=3, rollouts=through_screen - 1)))
    r = short.run()
    assert r.stop_reason == "budget:rollouts" and r.rollouts_used == through_screen - sizes[first][1] == short.evaluator.rollouts
    assert screen_batches(short_store, short.run_id) == [] and short_store.events(short.run_id, "decision") == []


def test_a_run_killed_after_a_screen_resumes_to_the_same_harness_and_spend(tmp_path):
    cfg = config(screen=3, budget=Budget(iterations=3, rollouts=400))
    reference, ref_store = make_loop(tmp_path / "ref", cfg)
    expected = reference.run()
    names = [name for name, _, _ in ref_store.trajectory_batches(reference.run_id)]
    # the kill: the evaluator call right after iteration 1's screen (iteration 0 is checkpointed by then)
    crash_at = next(k for k, name in enumerate(names) if "-it1-screen-" in name) + 2
    loop, store = make_loop(tmp_path / "crash", cfg, evaluator=CrashingEvaluator(crash_at))
    with pytest.raises(Crash):
        loop.run()
    assert store.events(loop.run_id, "checkpoint") and screen_batches(store, loop.run_id)[-1][0].split("-")[1] == "it1"
    resumed = HarnessEvolution(cfg, InProcessEvaluator(), LLMProposer(cfg.proposer, FunctionClient(proposer_complete), IOT.handbook),
                               HarnessStore(tmp_path / "crash" / "store", create=False), loop.run_id)
    result = resumed.run(resume=True)
    assert (result.harness_id, result.evolved_val, result.rollouts_used, result.iterations, result.rejected) == (
        expected.harness_id, expected.evolved_val, expected.rollouts_used, expected.iterations, expected.rejected)
    # the train batch and the screen of iteration 1 came from the store: nothing was paid twice
    assert loop.evaluator.rollouts + resumed.evaluator.rollouts == reference.evaluator.rollouts
    # the killed iteration was redone to the same decisions (the kill came before any was journalled)
    assert [e.payload for e in store.events(loop.run_id, "decision")] == \
        [e.payload for e in ref_store.events(reference.run_id, "decision")]

def test_the_cli_refuses_a_screen_out_of_range_in_one_line(tmp_path):
    from coevolve.cli.app import app

    runner = CliRunner()
    for bad in ("-1", "65"):
        r = runner.invoke(app, ["evolve", "--screen", bad, "--store", str(tmp_path / "store")])
        assert r.exit_code == 2, r.output
        assert r.stderr.strip().splitlines() == [f"error: --screen must be in 0..64 (0: off), got {bad}"]
        assert not (tmp_path / "store").exists()  # refused before anything was written
