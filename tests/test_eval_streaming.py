"""Rollouts stream to the store (issue 24.7, last part): `coevolve eval` stores its rollouts in batches
as they finish, so a store that fills up late in an eval keeps the batches stored before it; the error
is one line saying how many were kept; running the same eval again continues that run and runs only
the missing rollouts."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coevolve import jobs
from coevolve.agents.local import LocalEvaluator
from coevolve.cli.app import app
from coevolve.jobs import eval as eval_job
from coevolve.store import store as store_mod
from coevolve.store.store import HarnessStore, StoreError
from tests.rollouts import _GATEWAY

N, REPEATS, BATCH = 15, 2, 8  # 30 rollouts: stored as 8 + 8 + 8 + 6


class InProcessPool:
    """The rollout pool's `run` without Ray: every job through the real executor, each result handed to
    `on_result` as it is ready, in submission order (as the pool returns them)."""

    def __init__(self) -> None:
        self.evaluator = LocalEvaluator(_GATEWAY)
        self.ran = 0

    def run(self, jobs_, on_result=None, progress=False, description="", max_in_flight=None):
        out = []
        for k, job in enumerate(jobs_):
            (traj,) = self.evaluator.evaluate([(job.instance, job.harness, job.seed)], job.model)
            self.ran += 1
            out.append(traj)
            if on_result:
                on_result(k, traj)
        return out

    def shutdown(self) -> None:
        pass


class FillsUp(HarnessStore):
    """A store whose disk holds `room` more rollouts: a trajectory batch that does not fit fails as
    sqlite fails on a full disk (and takes nothing of the room)."""

    room: int | None = None

    def put_trajectories(self, run_id, trajectories, batch="main"):
        if FillsUp.room is not None:
            if len(trajectories) > FillsUp.room:
                with store_mod._sqlite_errors():
                    raise sqlite3.OperationalError("database or disk is full")
            FillsUp.room -= len(trajectories)
        return super().put_trajectories(run_id, trajectories, batch)


def plan(root: Path):
    req = jobs.EvalRequest("iot", "val", N, "baseline", ("synthetic/weak",), 1, 4, None, repeats=REPEATS)
    return jobs.validate_eval(req, root)


def eval_once(root: Path, store: HarnessStore, pool: InProcessPool):
    p = plan(root)
    return eval_job._eval_one(store, pool, p, "iot", p.harnesses["iot"], "synthetic/weak", progress=False)


@pytest.fixture(autouse=True)
def small_batches(monkeypatch):
    monkeypatch.setattr(eval_job, "EVAL_STORE_BATCH", BATCH)
    FillsUp.room = None
    yield
    FillsUp.room = None


def test_a_store_that_fills_up_on_the_last_batch_keeps_the_earlier_ones_and_the_rerun_does_only_the_rest(tmp_path):
    reference = eval_once(tmp_path / "ref", HarnessStore(tmp_path / "ref"), InProcessPool())

    root = tmp_path / "full"
    FillsUp.room = 27  # three batches of 8 fit, the fourth (the last 6 rollouts) does not
    with pytest.raises(StoreError) as failed:
        eval_once(root, FillsUp(root), InProcessPool())
    message = str(failed.value)
    assert "database or disk is full" in message and "keeps 24 of its 30 rollouts" in message
    assert "\n" not in message
    store = HarnessStore(root)
    (run,) = store.list_runs("eval")
    assert run.status == "failed" and store.rollout_spend([run.run_id])[0] == 24
    assert len(store.get_trajectories(run.run_id)) == 24

    FillsUp.room = None  # space freed: the same eval again
    pool = InProcessPool()
    again = eval_once(root, store, pool)
    assert pool.ran == N * REPEATS - 24  # only the missing rollouts ran
    assert again.run_id == run.run_id and store.get_run(run.run_id).status == "done"
    assert again.as_json()["passed"] == reference.as_json()["passed"]
    assert again.as_json()["per_instance"] == reference.as_json()["per_instance"]
    assert len(store.get_trajectories(run.run_id)) == N * REPEATS == store.rollout_spend([run.run_id])[0]
    assert store.check().ok

    pool = InProcessPool()
    fresh = eval_once(root, store, pool)  # a finished eval run again is a new measurement, not a cache hit
    assert fresh.run_id != run.run_id and pool.ran == N * REPEATS


def test_the_command_says_in_one_error_line_how_many_rollouts_were_kept(tmp_path, monkeypatch):
    monkeypatch.setattr("coevolve.jobs.runtime.start_ray", lambda address: None)
    monkeypatch.setattr("coevolve.services.pools.rollouts.RolloutPool", lambda workers, **kw: InProcessPool())
    monkeypatch.setattr(store_mod, "HarnessStore", FillsUp)
    FillsUp.room = 20  # two batches of 8
    root = tmp_path / "s"
    args = ["eval", "--family", "iot", "--n", N, "--repeats", REPEATS, "--workers", 1, "--seed", 4, "--store", root]
    r = CliRunner().invoke(app, [str(a) for a in args])
    assert r.exit_code == 2, r.output
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "keeps 16 of its 30 rollouts" in lines[0], lines
    FillsUp.room = None
    r = CliRunner().invoke(app, [str(a) for a in [*args, "--json"]])
    assert r.exit_code == 0, r.output


def test_an_eval_that_kept_nothing_is_not_continued(tmp_path):
    root = tmp_path / "s"
    FillsUp.room = 0
    with pytest.raises(StoreError, match="keeps 0 of its 30 rollouts"):
        eval_once(root, FillsUp(root), InProcessPool())
    FillsUp.room = None
    store = HarnessStore(root)
    (failed,) = store.list_runs("eval")
    done = eval_once(root, store, InProcessPool())
    assert done.run_id != failed.run_id and store.get_run(failed.run_id).status == "failed"
    assert len(store.get_trajectories(done.run_id)) == N * REPEATS
