"""bench/level_selection.py: the real-weights experiment's selection rule (design §4), and its cells
as resumable eval runs."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("level_selection", ROOT / "bench" / "level_selection.py")
sel = importlib.util.module_from_spec(spec)
sys.modules["level_selection"] = sel
spec.loader.exec_module(sel)

LEVELS = ["L0", "L1", "L2", "L3"]
FAMS = ["iot", "payroll", "budget", "stock", "website", "browser"]


def rates(level: str, values: list[float]) -> dict[tuple[str, str], tuple[float, bool]]:
    """Cells that ran all their looks: each qualifies by its point estimate."""
    return {(level, f): (v, sel.verdict({"rollouts": 100, "pass_at_1": v})) for f, v in zip(FAMS, values)}


def test_lowest_level_with_two_qualifying_families_nearest_half_first():
    r = rates("L0", [0.0, 0.12, 0.5, 0.9, 0.95, 0.48])
    d = sel.choose_level(r, LEVELS, FAMS)
    assert d["complete"] and d["level"] == "L0"
    assert d["families"] == ["budget", "browser", "payroll"]  # at most three, nearest 50% first
    assert d["qualifying"]["L0"] == ["payroll", "budget", "stock", "browser"]  # 10% and 90% are inside


def test_ties_follow_the_candidate_order_and_bounds_are_inclusive():
    d = sel.choose_level(rates("L0", [0.1, 0.9, 0.0, 0.0, 0.0, 0.0]), LEVELS, FAMS)
    assert d["level"] == "L0" and d["families"] == ["iot", "payroll"]
    d = sel.choose_level(rates("L0", [0.09, 0.91, 0.0, 1.0, 0.0, 0.0]), LEVELS, FAMS)
    assert d["qualifying"]["L0"] == [] and not d["complete"]  # L0 fails; L1 not measured yet


def test_a_level_with_one_qualifier_passes_the_decision_up_the_ladder():
    r = rates("L0", [0.3, 0.0, 0.0, 0.0, 0.0, 0.0]) | rates("L1", [0.3, 0.0, 0.95, 0.0, 0.2, 0.0])
    d = sel.choose_level(r, LEVELS, FAMS)
    assert d["level"] == "L1" and d["families"] == ["iot", "website"]


def test_missing_cells_leave_the_decision_open_and_no_level_is_a_decision():
    r = rates("L0", [0.5, 0.5, 0.5, 0.5, 0.5])  # browser not measured
    assert sel.choose_level(r, LEVELS, FAMS) == {"level": None, "families": [], "complete": False,
                                                  "qualifying": {"L0": FAMS[:5]}}
    zero = {k: v for lv in LEVELS for k, v in rates(lv, [0.0] * 6).items()}
    d = sel.choose_level(zero, LEVELS, FAMS)
    assert d["complete"] and d["level"] is None


def test_a_look_stops_a_cell_only_when_its_99_percent_interval_decides():
    assert sel.look_decision(0, 20) is None  # 0/20: the 99% interval reaches 25%
    assert sel.look_decision(0, 40) is None  # 95% would stop here (upper 8.8%); 99% reaches 14%
    assert sel.look_decision(0, 60) == "below"  # upper 9.95%
    assert sel.look_decision(1, 60) is None
    assert sel.look_decision(60, 60) == "above" and sel.look_decision(59, 60) is None
    assert sel.look_decision(10, 20) == "inside"  # 50% of 20: [25%, 75%]
    assert sel.look_decision(4, 20) is None  # 20% of 20: [5.7%, 51%] reaches below 10%
    assert sel.look_decision(12, 40) == "inside" and sel.look_decision(6, 40) is None  # 30% and 15% of 40
    assert sel.look_decision(0, 0) is None


def test_a_cell_qualifies_by_the_look_that_stopped_it_else_by_its_point_estimate_after_all_looks():
    assert sel.verdict({"stopped": "inside", "rollouts": 40, "pass_at_1": 0.5}) is True
    assert sel.verdict({"stopped": "below", "rollouts": 60, "pass_at_1": 0.0}) is False
    assert sel.verdict({"stopped": "above", "rollouts": 60, "pass_at_1": 1.0}) is False
    assert sel.verdict({"stopped": "point", "rollouts": 100, "pass_at_1": 0.08}) is False
    assert sel.verdict({"stopped": "point", "rollouts": 100, "pass_at_1": 0.1}) is True  # inclusive
    assert sel.verdict({"stopped": "point", "rollouts": 10, "pass_at_1": 0.5}) is None  # a pilot decides nothing
    assert sel.verdict({"stopped": "point", "rollouts": 100, "infra": 20, "pass_at_1": 0.5}) is None


def test_a_family_stopped_inside_qualifies_whatever_its_rate_and_ranks_by_its_rate():
    decided = rates("L0", [0.0] * 6) | {("L0", "stock"): (0.45, True), ("L0", "iot"): (0.3, True)}
    d = sel.choose_level(decided, LEVELS, FAMS)
    assert d["level"] == "L0" and d["families"] == ["stock", "iot"]


@pytest.mark.timeout(300)
def test_cells_run_as_evals_and_a_rerun_measures_nothing_again(tmp_path, capsys):
    store, out = tmp_path / "store", tmp_path / "cells.jsonl"
    args = ["--model", "synthetic/weak", "--store", str(store), "--out", str(out), "--levels", "L0",
            "--families", "iot,budget", "--harnesses", "oracle", "--n", "3", "--workers", "1", "--json"]
    assert sel.main(args) == 0
    cells = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(c["family"], c["harness"], c["params"], c["rollouts"], c["stopped"], len(c["looks"])) for c in cells] == [
        ("iot", "oracle", {"difficulty": 1, "size": 0}, 6, "point", 1),
        ("budget", "oracle", {"difficulty": 1, "size": 0}, 6, "point", 1)]
    printed = json.loads(capsys.readouterr().out)
    # cells smaller than the rule's 50 x 2 decide nothing (a pilot), whatever their rates
    assert printed["decision"] == {"level": None, "families": [], "complete": False, "qualifying": {"L0": []}}
    from coevolve.store.store import HarnessStore

    with HarnessStore(store, create=False) as hs:
        runs = hs.list_runs("eval")
        assert len(runs) == 2 and all(r.config["params"] == {"difficulty": 1, "size": 0} for r in runs)
        for c in cells:
            assert hs.resolve_harness(f"{c['family']}:selection-oracle", c["family"]).id == c["harness_id"]
    assert sel.main(args) == 0
    assert len(out.read_text().splitlines()) == 2  # measured cells are read back, not run again
    with HarnessStore(store, create=False) as hs:
        assert len(hs.list_runs("eval")) == 2


def test_bad_arguments_are_one_error_line(tmp_path, capsys):
    assert sel.main(["--levels", "L9", "--out", str(tmp_path / "x.jsonl"), "--table"]) == 2
    assert capsys.readouterr().err.startswith("error:")


@pytest.mark.parametrize("text, error", [
    ("size", "is not key=value"), ("size=x", "not an integer"), ("size=0,size=1", "twice"), ("=0", "is not key=value"),
])
def test_eval_params_refuse_bad_text(text, error):
    from coevolve.jobs import parse_params

    with pytest.raises(ValueError, match=error):
        parse_params(text)


def test_eval_params_are_checked_against_the_family_before_any_work(tmp_path):
    from coevolve.jobs import EvalRequest, parse_params, validate_eval

    assert parse_params(" size=0, difficulty=1 ,") == (("difficulty", 1), ("size", 0))
    for params, error in [((("shards", 1),), "has no parameter 'shards'"), ((("size", 99),), "out of range")]:
        req = EvalRequest("iot", "val", 2, "baseline", ("synthetic/weak",), 1, 0, None, params=params)
        with pytest.raises(ValueError, match=error):
            validate_eval(req, tmp_path / "store")
    assert not (tmp_path / "store").exists()
    plan = validate_eval(EvalRequest("iot", "val", 2, "baseline", ("synthetic/weak",), 1, 0, None,
                                     params=(("size", 0),)), tmp_path / "store")
    assert [i.id for i in plan.instances["iot"]] == ["iot/val/0:size=0", "iot/val/1:size=0"]


@pytest.mark.timeout(300)
def test_a_cell_runs_look_by_look_and_a_rerun_reads_finished_looks_back(tmp_path, capsys):
    from coevolve.store.store import HarnessStore

    store = tmp_path / "store"
    cell = sel.run_cell(store, "synthetic/weak", "L0", "iot", "oracle", 1, 12, 16)
    assert cell["stopped"] == "point" and cell["rollouts"] == 24  # 12 instances x 2 seeds
    assert [lk["instances"] for lk in cell["looks"]] == [[0, 9], [10, 11]]
    assert cell["looks"][-1]["scored"] == 24 - cell["infra"] and cell["looks"][-1]["passed"] == cell["passed"]
    with HarnessStore(store, create=False) as hs:
        runs = hs.list_runs("eval")
        assert [(r.config["n"], r.config.get("start", 0)) for r in runs] == [(10, 0), (2, 10)]
    assert [lk["run_id"] for lk in cell["looks"]] == [r.run_id for r in runs]
    # the cell carries its turns (a fresh machine's store no longer has the rollouts); equal to a re-read
    assert cell["turns"]["rollouts"] == cell["rollouts"] and cell["turns"]["loop_ended"] == cell["loop_ended"]
    assert cell["turns"]["assistant_turns"] == round(cell["mean_turns"] * cell["rollouts"])
    key = ("synthetic/weak", "L0", "iot", "oracle")
    row = sel.turn_table({key: cell}, store, "synthetic/weak").splitlines()[-1]
    assert row.startswith("| L0 | iot | oracle | ") and f"/{cell['rollouts']} [" in row
    assert int(row.split("|")[4]) == cell["turns"]["assistant_turns"]
    bare = {k: v for k, v in cell.items() if k != "turns"}
    assert sel.turn_table({key: bare}, store, "synthetic/weak") == sel.turn_table({key: cell}, store, "synthetic/weak")
    assert "not in this store" in sel.turn_table({key: bare}, tmp_path / "elsewhere", "synthetic/weak")
    again = sel.run_cell(store, "synthetic/weak", "L0", "iot", "oracle", 1, 12, 16)
    assert {k: v for k, v in again.items() if k != "seconds"} == {k: v for k, v in cell.items() if k != "seconds"}
    with HarnessStore(store, create=False) as hs:
        assert len(hs.list_runs("eval")) == 2  # the finished looks were read back, nothing ran again


def test_an_eval_can_start_inside_the_split(tmp_path):
    from coevolve.jobs import EvalRequest, validate_eval

    plan = validate_eval(EvalRequest("iot", "val", 2, "baseline", ("synthetic/weak",), 1, 0, None, start=48), tmp_path / "s")
    assert [i.id for i in plan.instances["iot"]] == ["iot/val/48", "iot/val/49"]
    for start, error in [(49, "run past iot's val split"), (-1, "must be >= 0")]:
        with pytest.raises(ValueError, match=error):
            validate_eval(EvalRequest("iot", "val", 2, "baseline", ("synthetic/weak",), 1, 0, None, start=start), tmp_path / "s")


def test_a_baseline_cell_runs_one_look_only_where_its_oracle_cell_stopped_below():
    m = "vllm/smollm2"
    cells = {(m, "L0", "iot", "oracle"): {"stopped": "below"}, (m, "L0", "budget", "oracle"): {"stopped": "inside"},
             (m, "L1", "iot", "oracle"): {"stopped": "point"}}
    assert sel.cell_instances(cells, m, "L0", "iot", "baseline", 50) == sel.LOOK == 10
    assert sel.cell_instances(cells, m, "L0", "iot", "oracle", 50) == 50
    assert [sel.cell_instances(cells, m, lv, f, "baseline", 50) for lv, f in [("L0", "budget"), ("L1", "iot"), ("L0", "stock")]] == [50] * 3
    assert sel.cell_instances(cells, "other/model", "L0", "iot", "baseline", 50) == 50
