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


def rates(level: str, values: list[float]) -> dict[tuple[str, str], float]:
    return {(level, f): v for f, v in zip(FAMS, values)}


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


@pytest.mark.timeout(300)
def test_cells_run_as_evals_and_a_rerun_measures_nothing_again(tmp_path, capsys):
    store, out = tmp_path / "store", tmp_path / "cells.jsonl"
    args = ["--model", "synthetic/weak", "--store", str(store), "--out", str(out), "--levels", "L0",
            "--families", "iot,budget", "--harnesses", "oracle", "--n", "3", "--workers", "1", "--json"]
    assert sel.main(args) == 0
    cells = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(c["family"], c["harness"], c["params"], c["rollouts"]) for c in cells] == [
        ("iot", "oracle", {"difficulty": 1, "size": 0}, 6), ("budget", "oracle", {"difficulty": 1, "size": 0}, 6)]
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
