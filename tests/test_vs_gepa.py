"""bench/vs_gepa.py (issue 20): the budget accounting counts every rollout of both optimisers — a tiny
budget on one family ends coevolve's loop and GEPA at exactly that count, every rollout the executor
ran passed through the meter — and GEPA's candidates decode back to the harness they came from."""

from __future__ import annotations

import dataclasses
import importlib.util
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
    def __init__(self) -> None:
        self.rollouts = 0

    def evaluate(self, jobs, model):
        self.rollouts += len(jobs)
        return [j for j in jobs]


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
    assert (meter.used, inner.rollouts, meter.cut, meter.by_split) == (7, 7, 2, {"val": 7})
    assert meter.exhausted and meter(None)
    with pytest.raises(BudgetExhausted):
        meter.evaluate([(inst, h, 0)], "m")
    assert inner.rollouts == 7


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


def test_tiny_budget_ends_both_runs_at_exactly_that_count(tmp_path):
    from coevolve.services.logs import configure_logging

    configure_logging(json_lines=False, level="error")
    cfg = vg.Config(family="iot", seed=0, budget=29, val_n=3, val_seeds=2, train_batch=4, plateau=100)
    evaluator, proposer = vg._services(cfg)
    co, co_h = vg.run_coevolve(cfg, evaluator, proposer, tmp_path)
    ge, ge_h = vg.run_gepa(cfg, evaluator, proposer)
    assert evaluator.rollouts == 2 * cfg.budget  # all the executor ran, and nothing else, went through the meters
    for run in (co, ge):
        assert run.used == cfg.budget, run
        assert sum(run.by_split.values()) == cfg.budget
        assert run.stop.startswith("budget:rollouts")
        # the optimiser's own count misses only the cut batch, which the meter counts
        assert run.own_count + run.cut == cfg.budget
    assert co.by_split.get("val", 0) >= 6 and co.by_split.get("train", 0) >= 4
    assert ge.by_split.get("val", 0) >= 6 and ge.by_split.get("train", 0) >= 3  # the seed's val, a minibatch
    for run, hs in ((co, co_h), (ge, ge_h)):
        assert all(h in hs for _, h, _ in run.timeline)
        assert all(c in hs and p in hs for c, p in run.accepted)


def test_loop_variants_run_beside_gepa_on_the_same_instances(tmp_path):
    """`--loop-variants stop,continue`: one cell holds both loops and GEPA, measured on one test split;
    continue spends the budget where stop ends on its plateau, and the table prints each against GEPA
    and continue / stop."""
    cfg = vg.Config(family="iot", seed=0, budget=60, val_n=3, val_seeds=2, train_batch=4, plateau=1, test_n=3,
                    test_repeats=1, loop_variants=("stop", "continue"))
    cell = vg.compare(cfg, workdir=tmp_path)
    stop, cont = cell["coevolve"], cell["coevolve-continue"]
    assert stop["stop"] == "plateau" and stop["rollouts_used"] < cfg.budget
    assert cont["stop"] == "budget:rollouts" and cont["rollouts_used"] == cfg.budget == cell["gepa"]["rollouts_used"]
    assert cont["stats"]["plateaus"] >= 1 and cont["stats"]["iterations"] > stop["stats"]["iterations"]
    assert stop["baseline_test"] == cont["baseline_test"] == cell["gepa"]["baseline_test"]  # one test split
    rows = vg.summarise([cell])
    assert set(rows[0]["ratio_pairs"]) == {"coevolve / gepa", "coevolve-continue / gepa", "coevolve-continue / coevolve"}
    text = vg.table(rows)
    assert "**coevolve-continue / coevolve**" in text and "| iot | coevolve-continue |" in text
    assert vg.optimisers([cell]) == ["coevolve", "coevolve-continue", "gepa"]


def test_a_stopped_run_keeps_the_cells_of_its_own_config_only(tmp_path):
    """Resuming: cells written under the same config are kept (in config order), a cell of another
    setting and a torn last line are dropped, so a rerun redoes exactly the missing cells."""
    import dataclasses
    import json

    a, b, c = (vg.Config(family=f, seed=0, budget=40) for f in ("iot", "payroll", "budget"))
    other = dataclasses.replace(b, budget=41)
    path = tmp_path / "cells.jsonl"
    path.write_text("".join(json.dumps({"family": x.family, "seed": x.seed, "config": dataclasses.asdict(x)}) + "\n"
                            for x in (b, a, other)) + '{"family": "budget", "se')
    kept = vg.finished_cells(path, [a, b, c])
    assert [k["family"] for k in kept] == ["iot", "payroll"]
    assert kept[1]["config"]["budget"] == 40  # the payroll cell of budget 41 is not this run's
    assert vg.finished_cells(path, [dataclasses.replace(a, loop_variants=("stop", "continue"))]) == []
    assert vg.finished_cells(tmp_path / "none.jsonl", [a]) == []


def test_screen_variants_run_beside_gepa_and_leave_the_plain_loop_as_it_was(tmp_path):
    """`--loop-variants stop,stop+screen`: the screened loop (screen = GEPA's minibatch) is its own
    optimiser in the cell, on the same test split, printed against GEPA and plain coevolve; the plain
    loop's cell is what a run without the screened variant gives (but for its seconds)."""
    cfg = vg.Config(family="iot", seed=0, budget=60, val_n=3, val_seeds=2, train_batch=4, plateau=1, test_n=3,
                    test_repeats=1, minibatch=2, loop_variants=("stop", "stop+screen"))
    cell = vg.compare(cfg, workdir=tmp_path)
    plain, screened = cell["coevolve"], cell["coevolve-stop+screen"]
    s = screened["stats"]
    assert s["screen"] == cfg.minibatch and "screen" not in plain["stats"]
    assert s["screen_rollouts"] > 0 and s["screened_out"] + s["reached_val"] >= 1
    assert s["rejected"] >= s["screened_out"]  # a screened-out candidate counts as rejected
    assert screened["baseline_test"] == plain["baseline_test"] == cell["gepa"]["baseline_test"]
    rows = vg.summarise([cell])
    assert set(rows[0]["ratio_pairs"]) == {"coevolve / gepa", "coevolve-stop+screen / gepa", "coevolve-stop+screen / coevolve"}
    assert "| iot | coevolve-stop+screen |" in vg.table(rows)
    mech = vg.mechanics([cell])
    assert mech["coevolve-stop+screen"]["screened_out"] == s["screened_out"] and "screened_out" not in mech["coevolve"]

    alone = vg.compare(dataclasses.replace(cfg, loop_variants=("stop",)), workdir=tmp_path)
    assert alone["coevolve"] == plain
    assert [vg.loop_name(*vg.loop_variant(v)) for v in vg.LOOP_VARIANTS] == [
        "coevolve", "coevolve-continue", "coevolve-stop+screen", "coevolve-continue+screen"]
    with pytest.raises(ValueError, match="unknown loop variant"):
        vg.loop_variant("screen")
