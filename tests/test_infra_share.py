"""Infrastructure failures are never a score: a co-evolution whose rollouts fail for infrastructure above
`INFRA_SHARE` fails with the cause counted and named, and an eval's record and table say its pass rate is
no score."""

from __future__ import annotations

import dataclasses

import pytest

from coevolve.analysis.stats import INFRA_SHARE, infra_note
from coevolve.config import load_profile
from coevolve.pipeline import CoEvolution, InfraFailure
from coevolve.store.store import HarnessStore
from tests.test_spend_resume import Counted, backend


class Flaky(Counted):
    """Every `every`-th rollout comes back as an infra failure (the endpoint was down)."""

    def __init__(self, every: int):
        super().__init__()
        self.every, self.n = every, 0

    def evaluate(self, jobs, model):
        out = []
        for t in super().evaluate(jobs, model):
            self.n += 1
            if self.n % self.every == 0:
                t = dataclasses.replace(t, error="infra", error_detail="connection refused: 127.0.0.1:9", outcome=None)
            out.append(t)
        return out


def co_run(monkeypatch, tmp_path, every: int):
    monkeypatch.setenv("COEVOLVE_STORE", str(tmp_path))
    profile = load_profile("local", ["families=[iot]", "evolve.rollouts=60", "evolve.val_n=4", "evolve.train_batch=4",
                                     "budget.cycles=1", "data.rows=6", "data.samples=1", "repeats=1"])
    store = HarnessStore(tmp_path)
    run_id = store.create_run("coevolve", profile.model_dump())
    return CoEvolution(profile, store, run_id, backend(store, Flaky(every))).run()


def test_a_run_whose_rollouts_fail_for_infrastructure_fails_naming_the_cause(monkeypatch, tmp_path):
    with pytest.raises(InfraFailure, match=r"failed for infrastructure .*most often \(\d+\): connection refused: 127.0.0.1:9"):
        co_run(monkeypatch, tmp_path, every=5)  # 20%


def test_a_few_infra_failures_are_data_not_a_failed_run(monkeypatch, tmp_path):
    assert co_run(monkeypatch, tmp_path, every=50)["stop_reason"] == "done"  # 2%


def test_the_threshold_is_a_share_of_the_rollouts():
    assert INFRA_SHARE == 0.1
    assert infra_note(10, 100) is None and infra_note(11, 100).startswith("11 of 100 rollouts failed for infrastructure")
    assert infra_note(0, 0) is None
