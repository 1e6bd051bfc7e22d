# ruff: noqa: F811 - pytest fixtures imported from tests.lifecycle_fixtures
"""bench/warmup.py: the real-weights design's warm-up rows (design §4 step 6): reference trajectories of
payroll, stock and website only, at L0 and L1, train split, each under its family's oracle harness, every
assistant turn loss-bearing, one schema-valid call per assistant turn; and the warm-up itself (train with
peft on Ray Train, merge) on the tiny model."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from coevolve.tasks.helpers import selection_harnesses
from tests.lifecycle_fixtures import tiny_model  # noqa: F401 - fixture

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("warmup", ROOT / "bench" / "warmup.py")
warmup = importlib.util.module_from_spec(spec)
sys.modules["warmup"] = warmup
spec.loader.exec_module(warmup)


@pytest.fixture(scope="module")
def built():
    return warmup.warmup_rows(n=3)


def test_the_rows_are_passing_reference_rollouts_of_the_warmup_families_under_their_oracle_harness(built):
    rows, stats = built
    assert set(stats) == {f"{f}/{lv}" for f in ("payroll", "stock", "website") for lv in ("L0", "L1")}
    assert len(rows) == sum(s["passed"] for s in stats.values()) > 0
    oracle = {f: selection_harnesses(f)["oracle"].id for f in ("payroll", "stock", "website")}
    for row in rows:
        family, rest = row.provenance["instance"].split("/", 1)
        assert family in oracle and rest.startswith("train/")
        assert row.provenance["harness_id"] == oracle[family] and row.provenance["decoding"]["tool_calls"] == "constrained"
        params = dict(p.split("=") for p in rest.split(":", 1)[1].split(","))  # ids name non-default params
        assert params["size"] == "0" and params.get("difficulty", "2") in ("1", "2")
        assistant = [m for m in row.messages if m["role"] == "assistant"]
        assert assistant and all(m["train"] for m in assistant)
        tools = {t["function"]["name"] if "function" in t else t["name"] for t in row.tools}
        for m in assistant:  # one call of an offered tool with JSON object arguments, no text
            [call] = m["tool_calls"]
            assert call["function"]["name"] in tools and isinstance(json.loads(call["function"]["arguments"]), dict)
            assert not m.get("content")


def test_a_family_the_rule_runs_on_after_the_warmup_is_refused():
    with pytest.raises(ValueError, match="never trains on budget"):
        warmup.warmup_rows(families=("payroll", "budget"), n=1)


@pytest.mark.slow
def test_the_warmup_trains_its_adapter_and_merges_it_into_a_model_folder(tiny_model, tmp_path):
    out = warmup.warm_up(tiny_model, tmp_path / "warm", tmp_path / "store", n=1)
    assert out["rows"] == 6 and out["adapter"].startswith("warmup-")
    merged = json.loads((tmp_path / "warm" / "coevolve_merged.json").read_text())
    assert Path(merged["adapter"]).name == out["adapter"] and (tmp_path / "warm" / "config.json").is_file()
    # a rerun finds the adapter trained and only merges again
    assert warmup.warm_up(tiny_model, tmp_path / "warm", tmp_path / "store", n=1)["adapter"] == out["adapter"]
