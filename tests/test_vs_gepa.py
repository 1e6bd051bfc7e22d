"""bench/vs_gepa.py (issues 20 and 31): the machinery of the bench, quickly, on one family and tiny
budgets — every rollout of every optimiser goes through its meter and GEPA spends exactly the budget;
held-out proposals reach the proposer's history as tried on the race's side and on GEPA's; the null and
harmful proposers' edits do what they claim; the Wilson interval and the stratified bootstrap on inputs
whose answers are known by hand; a rerun skips the cells already finished; bad input exits 2."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("vs_gepa", ROOT / "bench" / "vs_gepa.py")
vg = importlib.util.module_from_spec(spec)
sys.modules["vs_gepa"] = vg
spec.loader.exec_module(vg)

pytest.importorskip("gepa")


class _Counting:
    def __init__(self, inner=None) -> None:
        self.inner = inner
        self.rollouts = 0

    def evaluate(self, jobs, model):
        self.rollouts += len(jobs)
        return self.inner.evaluate(jobs, model) if self.inner else list(jobs)


@pytest.fixture(scope="module")
def quiet():
    from coevolve.services.logs import configure_logging

    configure_logging(json_lines=False, level="error")


def test_meter_cuts_the_batch_that_passes_the_budget():
    from coevolve.agents.meta.loop import BudgetExhausted
    from coevolve.tasks import get_family

    fam = get_family("iot")
    inst, h = fam.generate("val", 1)[0], fam.baseline_harness()
    inner = _Counting()
    meter = vg.RolloutMeter(inner, budget=7)
    assert len(meter.evaluate([(inst, h, s) for s in range(5)], "m")) == 5
    with pytest.raises(BudgetExhausted):
        meter.evaluate([(inst, h, s) for s in range(5)], "m")
    assert (meter.used, inner.rollouts, meter.cut, meter.by_split, meter.left) == (7, 7, 2, {"val": 7}, 0)
    assert meter.exhausted and meter(None)


def test_candidate_round_trip_and_text_only_edits():
    from coevolve.edits import apply_edit
    from coevolve.tasks import get_family
    from coevolve.values import AddHook, AddRecipe, HarnessEdit, HookSpec, Recipe, SetSection

    base = get_family("budget").baseline_harness()
    edit = HarnessEdit((SetSection("pacing", "One call a turn.\n[not a header]"), AddRecipe(Recipe("r", "x: y"))))
    child = apply_edit(base, edit)
    assert vg.candidate_to_harness(base, vg.harness_to_candidate(child)) == child
    assert vg.candidate_to_harness(base, vg.harness_to_candidate(base)).id == base.id
    assert vg.text_only(edit)
    assert not vg.text_only(HarnessEdit((AddHook(HookSpec("on_finish", "finish_checklist", {"items": ["a"]})),)))


def test_every_rollout_goes_through_the_meters_and_gepa_spends_exactly_the_budget(tmp_path, quiet):
    """race, gepa and gepa+guard on iot at 40 rollouts: what the executor ran is the sum of the meters;
    GEPA ends at exactly the budget; the race and gepa+guard hold it themselves (a batch is launched only
    when it fits) and their own counts match the meter; proposer calls are counted per optimiser."""
    cfg = vg.Config(family="iot", seed=0, budget=40, val_n=3, val_seeds=2, train_batch=4, gepa_val_sizes=(3,))
    evaluator, proposer = vg._services(cfg)
    counting = _Counting(evaluator)
    race = vg.run_search(cfg, counting, proposer, tmp_path, "race")
    ge = vg.run_gepa(cfg, counting, proposer, cfg.val_n)
    guarded = vg.run_gepa_guard(cfg, counting, proposer)
    assert counting.rollouts == race.used + ge.used + guarded.used
    assert ge.used == cfg.budget and ge.own_count + ge.cut == cfg.budget and ge.stop.startswith("budget:rollouts")
    assert race.used == race.own_count and cfg.budget - 2 * cfg.candidates * cfg.race_chunk < race.used <= cfg.budget
    assert sum(race.by_split.values()) == race.used and race.by_split["val"] >= 6
    assert guarded.stats["gepa_rollouts"] <= cfg.budget // 2 < guarded.used + 2 or guarded.stats["guard"] is None
    assert guarded.used == guarded.stats["gepa_rollouts"] + guarded.stats["guard_rollouts"] <= cfg.budget
    for run in (race, ge, guarded):
        assert run.stats["proposer_calls"] >= 1 and run.stats["proposer_tokens"] > 0
    assert race.stats["own_proposer_calls"] == race.stats["proposer_calls"]


class _Recording(vg.ScriptedProposer):
    """The null proposer, with one hook edit (held out of the comparison) first in every answer, and
    the history of every call's evidence kept."""

    def __init__(self):
        super().__init__("iot", "null")
        self.histories = []

    def propose(self, evidence, harness, k, seed):
        from coevolve.edits import apply_edit, edit_to_json
        from coevolve.values import AddHook, HarnessEdit, HookSpec

        self.histories.append(list(evidence["history"]))
        hook = HarnessEdit((AddHook(HookSpec("on_turn", "progress_reminder", {"after_turns": 6})),), "remind", "other")
        out, used = super().propose(evidence, harness, k - 1, seed)
        return [vg.Proposal(hook, apply_edit(harness, hook), None, edit_to_json(hook)), *out], used


@pytest.mark.parametrize("side", ["race", "gepa"])
def test_held_out_proposals_reach_the_proposers_history_as_tried(tmp_path, quiet, side):
    cfg = vg.Config(family="iot", seed=0, budget=60, val_n=3, val_seeds=2, train_batch=4, kind="null")
    evaluator, _ = vg._services(cfg)
    proposer = _Recording()
    run = (vg.run_search(cfg, evaluator, proposer, tmp_path, "race") if side == "race"
           else vg.run_gepa(cfg, evaluator, proposer, cfg.val_n))
    assert run.stats["held_out"] >= 2 and len(proposer.histories) >= 2
    later = proposer.histories[-1]
    held = [h for h in later if h["outcome"] == "invalid" and h["ops"][0]["op"] == "add_hook"]
    assert held and all(len(h["base"]) == 12 for h in held) and vg.HELD_OUT in held[0]["reason"]
    assert proposer.histories[0] == []


def test_null_edits_change_nothing_the_agent_knows_and_harmful_ones_contradict_a_rule():
    from coevolve.tasks import family_names, get_family

    for name in family_names():
        family = get_family(name)
        base = family.baseline_harness()
        for mode in ("null", "harmful"):
            p = vg.ScriptedProposer(name, mode)
            proposals, used = p.propose({}, base, 3, seed=0)
            more, _ = p.propose({}, proposals[0].candidate, 3, seed=1)
            ids = {q.candidate.id for q in proposals + more}
            assert len(ids) == 6 and base.id not in ids and used.prompt_tokens == 0
            for q in proposals + more:
                assert vg.text_only(q.edit)
                if mode == "null":
                    assert vg._stances(family, q.candidate) == vg._stances(family, base)
                else:
                    assert all(r.stance(q.candidate.render_system()) is False for r in p.rules.values())


def test_wilson_interval_by_hand():
    low, high = vg.wilson_interval(0, 10)
    assert low == 0.0 and high == pytest.approx(0.2775, abs=1e-4)
    assert vg.wilson_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert vg.wilson_interval(0, 0) == (0.0, 1.0)


def test_stratified_bootstrap_by_hand():
    mean = lambda xs: sum(xs) / len(xs)
    # stratified: each family keeps its own two cells, so the pooled mean of {0, 0} and {1, 1} never moves
    b = vg.stratified_bootstrap({"a": [0, 0], "b": [1, 1]}, mean)
    assert (b["point"], b["low"], b["high"], b["undefined"]) == (0.5, 0.5, 0.5, 0)
    # one family {0, 1}: resampled means 0, 1/2, 1 with chances 1/4, 1/2, 1/4 -> the 95% interval [0, 1]
    b = vg.stratified_bootstrap({"a": [0, 1]}, mean, resamples=400, seed=1)
    assert (b["point"], b["low"], b["high"]) == (0.5, 0.0, 1.0)
    # a ratio whose denominator is <= 0 in a resample is undefined there and counted
    cells = {"a": [{"arms": {"race": {"final_gain": 1.0}, "g": {"final_gain": 0.0}}},
                   {"arms": {"race": {"final_gain": 1.0}, "g": {"final_gain": 1.0}}}]}
    b = vg.stratified_bootstrap(cells, vg.ratio_stat(vg.pooled_gain("race"), vg.pooled_gain("g")), resamples=400, seed=2)
    assert b["point"] == 2.0 and 60 < b["undefined"] < 140 and (b["low"], b["high"]) == (1.0, 2.0)
    assert vg.quantile([0, 1, 2, 3], 0.5) == 1.5 and vg.quantile([0, 1, 2, 3], 0.0) == 0
    best = vg.best_gepa_gain(["g", "race"])
    assert best(cells["a"]) == 1.0


def test_seeds_take_a_count_or_a_list():
    assert vg.parse_seeds("3") == [0, 1, 2]
    assert vg.parse_seeds("4,7,4") == [4, 7]
    assert vg.parse_seeds("5,") == [5]
    with pytest.raises(ValueError):
        vg.parse_seeds("0")


def test_a_rerun_skips_the_finished_cells(tmp_path, monkeypatch):
    """Cells are keyed by kind, family, seed and budget and kept only under the same config; a torn last
    line and a cell of another setting are run again; the rest is not."""
    configs = vg.build_configs(["iot", "payroll"], [0], [40, 60], 1, 1, ["iot"], 5, val_n=3)
    assert len(configs) == 8 and {c.kind for c in configs} == {"main", "null", "harmful"}
    fake = lambda c, workdir=None: {"kind": c.kind, "family": c.family, "seed": c.seed, "budget": c.budget,
                                    "config": dataclasses.asdict(c), "arms": {}, "seconds": 0}
    path = tmp_path / "cells.jsonl"
    other = dataclasses.replace(configs[1], val_n=4)
    path.write_text("".join(json.dumps(fake(c)) + "\n" for c in (configs[0], other, configs[5]))
                    + json.dumps(fake(configs[6]))[:30])
    ran = []
    monkeypatch.setattr(vg, "compare", lambda c, workdir=None: ran.append(vg.cell_key(c)) or fake(c))
    monkeypatch.setattr(vg, "_progress", lambda cell, started: None)
    cells = vg.run_cells(configs, path, jobs=1, started=0.0)
    assert [vg.cell_key(c) for c in cells] == [vg.cell_key(c) for c in configs]
    assert set(ran) == {vg.cell_key(c) for c in configs} - {vg.cell_key(configs[0]), vg.cell_key(configs[5])}
    ran.clear()
    vg.run_cells(configs, path, jobs=1, started=0.0)
    assert ran == []


@pytest.mark.parametrize("args", [["--budgets", "20"], ["--val-n", "50"], ["--seeds", "0"], ["--arms", "coevolve"],
                                  ["--gepa-val-sizes", "60"]])
def test_bad_input_exits_2_and_writes_nothing(tmp_path, args, capsys):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        vg.main(["--families", "iot", "--seeds", "1", "--budgets", "80", "--null-runs", "0", "--out", str(out), *args])
    assert e.value.code == 2 and not out.exists()
    assert "error:" in capsys.readouterr().err
