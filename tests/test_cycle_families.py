"""A `coevolve run`'s families run at once: each reaches what it reaches alone, and a family's failure stops
the others at their next cell."""

from __future__ import annotations

import threading

import pytest

from coevolve.config import load_profile
from coevolve.pipeline import CoEvolution
from coevolve.store.store import HarnessStore
from tests.test_spend_resume import Counted, backend, timeless

SMALL = ["evolve.rollouts=60", "evolve.val_n=4", "evolve.train_batch=4", "budget.cycles=1", "data.rows=6",
         "data.samples=1", "repeats=1"]


class Meeting(Counted):
    """In-process rollouts whose first batch of each family waits until every family has asked for one:
    families run one after another never meet, and the wait times out. `failing`: a family whose
    rollouts raise after the meeting."""

    def __init__(self, families: list[str], failing: str | None = None):
        super().__init__()
        self.barrier, self.met, self.failing = threading.Barrier(len(families), timeout=60), set(), failing

    def evaluate(self, jobs, model):
        family = jobs[0][0].family
        if family not in self.met:
            self.met.add(family)
            self.barrier.wait()
        if family == self.failing:
            raise RuntimeError(f"{family}: the model server went away")
        return super().evaluate(jobs, model)


def co_run(monkeypatch, root, families: list[str], evaluator: Counted) -> tuple[dict, HarnessStore, str]:
    monkeypatch.setenv("COEVOLVE_STORE", str(root))
    profile = load_profile("local", [f"families=[{', '.join(families)}]", *SMALL])
    store = HarnessStore(root)
    run_id = store.create_run("coevolve", profile.model_dump())
    return CoEvolution(profile, store, run_id, backend(store, evaluator)).run(), store, run_id


def test_families_run_at_once_and_each_reaches_what_it_reaches_alone(monkeypatch, tmp_path):
    both, _, _ = co_run(monkeypatch, tmp_path / "both", ["iot", "stock"], Meeting(["iot", "stock"]))
    alone, _, _ = co_run(monkeypatch, tmp_path / "alone", ["stock"], Counted())
    assert both["stop_reason"] == alone["stop_reason"] == "done" and list(both["families"]) == ["iot", "stock"]
    assert timeless(both["families"])["stock"] == timeless(alone["families"])["stock"]


def test_a_familys_failure_is_the_runs_and_stops_the_other_families(monkeypatch, tmp_path):
    with pytest.raises(RuntimeError, match="stock: the model server went away"):
        co_run(monkeypatch, tmp_path, ["iot", "stock"], Meeting(["iot", "stock"], failing="stock"))
    (run,) = HarnessStore(tmp_path).list_runs("coevolve")
    cells = [e.payload["cell"] for e in HarnessStore(tmp_path).events(run.run_id, "cell")]
    assert not [c for c in cells if c.startswith("final:")]  # iot stopped at a cell boundary, before its end
