"""Spend after a resume (issue 24.4): a co-evolution killed in the middle of a harness evolution and
resumed from the store alone reports the same rollout spend, and reaches the same harness and
adapter, as the same run uninterrupted. Spend is derived from the rollouts the store holds for the run
(each stored batch indexes its rollouts in the transaction that stores it), and a resumed run reuses
the rollouts it stored before the kill instead of paying for them again."""

from __future__ import annotations

from pathlib import Path

import pytest

from coevolve.agents.expert import ExpertRewriter
from coevolve.agents.judge import Judge
from coevolve.agents.local import LocalBackend, LocalEvaluator
from coevolve.agents.meta import Budget, EvolveConfig, HarnessEvolution, LLMProposer
from coevolve.config import load_profile
from coevolve.pipeline import CoEvolution
from coevolve.services.pools.backend import StoreTrainer
from coevolve.store.store import HarnessStore
from coevolve.tasks import get_family
from tests.rollouts import _GATEWAY, FunctionClient, proposer_complete

PROFILE = ["families=[iot]", "budget.cycles=1", "budget.plateau=1", "evolve.iterations=2", "evolve.rollouts=400",
           "evolve.val_n=12", "evolve.val_seeds=2", "evolve.train_batch=12", "data.rows=20", "data.samples=1", "data.k=2",
           "repeats=1", "seed=3"]


class Kill(BaseException):
    """A kill of the meta-agent (BaseException: nothing on the way out may handle it as an error)."""


class Counted(LocalEvaluator):
    """In-process rollouts that count what they ran; with `kill_after` set, the process 'dies' when it
    is asked for a batch after `kill_after` batches of the evolve cell's second iteration were stored
    (the evolution has a checkpoint by then, and rollouts stored after it)."""

    def __init__(self, store: HarnessStore | None = None, kill_after: int | None = None):
        super().__init__(_GATEWAY)
        self.store, self.kill_after, self.ran = store, kill_after, 0

    def evaluate(self, jobs, model):
        if self.kill_after is not None and self._evolution_batches_after_checkpoint() >= self.kill_after:
            raise Kill()
        out = super().evaluate(jobs, model)
        self.ran += len(out)
        return out

    def _evolution_batches_after_checkpoint(self) -> int:
        runs = self.store.list_runs("evolve")
        checkpoints = self.store.events(runs[0].run_id, "checkpoint") if runs else []
        if not checkpoints:
            return 0
        return len(self.store.trajectory_batches(runs[0].run_id)) - checkpoints[-1].payload["batches"]


def backend(store: HarnessStore, evaluator: LocalEvaluator) -> LocalBackend:
    return LocalBackend(
        evaluator,
        Judge("synthetic/judge", FunctionClient(proposer_complete)),
        ExpertRewriter("synthetic/expert", FunctionClient(proposer_complete)),
        proposer=LLMProposer("synthetic/meta", FunctionClient(proposer_complete)),
        trainer=StoreTrainer(store, "synthetic/weak", "synthetic"),
    )


def co_run(root: Path, evaluator_for, run_id: str | None = None):
    store = HarnessStore(root)
    rid = run_id or store.create_run("coevolve", {"test": True})
    evaluator = evaluator_for(store)
    return CoEvolution(load_profile("local", PROFILE), store, rid, backend(store, evaluator)), store, rid, evaluator


def timeless(families: dict) -> dict:
    return {f: {k: v for k, v in cell.items() if k != "seconds"} for f, cell in families.items()}


@pytest.fixture()
def store_env(monkeypatch, tmp_path):
    """Synthetic adapters are found through the store the environment names (one store per run here)."""

    def use(root: Path) -> Path:
        monkeypatch.setenv("COEVOLVE_STORE", str(root))
        return root

    return use


def test_a_coevolution_killed_mid_evolve_resumes_to_the_same_spend_and_result(store_env, tmp_path):
    ref, _, _, ran = co_run(store_env(tmp_path / "ref"), lambda s: Counted())
    expected = ref.run()
    assert expected["stop_reason"] == "done"

    root = store_env(tmp_path / "killed")
    killed, store, rid, first = co_run(root, lambda s: Counted(s, kill_after=1))
    with pytest.raises(Kill):
        killed.run()
    evolve = store.list_runs("evolve")[0].run_id
    assert store.events(evolve, "checkpoint") and not store.events(evolve, "result")  # killed mid-evolve
    assert not [e for e in store.events(rid, "cell") if e.payload["cell"].startswith("evolve:")]

    # a new process has only the store and the run id
    resumed, _, _, second = co_run(root, lambda s: Counted(), run_id=rid)
    got = resumed.run()
    assert got["stop_reason"] == "done"
    assert got["spend"]["rollouts"] == expected["spend"]["rollouts"]
    assert timeless(got["families"]) == timeless(expected["families"])  # the same harness, adapter and test figures
    # nothing stored before the kill was paid for again: the two processes ran what one uninterrupted did
    assert first.ran + second.ran == ran.ran == expected["spend"]["rollouts"]


def test_a_resumed_evolution_reuses_the_rollouts_it_stored_after_its_last_checkpoint(tmp_path):
    fam = get_family("iot")
    config = EvolveConfig(family="iot", model="synthetic/weak", train_batch=12, val_n=12, candidates=3, plateau=3,
                          seed=5, budget=Budget(iterations=2, rollouts=600))

    def loop(root: Path, evaluator, run_id: str | None = None):
        store = HarnessStore(root)
        rid = run_id or store.create_run("evolve", config.to_json())
        return HarnessEvolution(config, evaluator, LLMProposer(config.proposer, FunctionClient(proposer_complete), fam.handbook), store, rid), store

    reference, _ = loop(tmp_path / "ref", Counted())
    expected = reference.run()

    crashing, store = loop(tmp_path / "crash", Counted())
    crashing.evaluator.store, crashing.evaluator.kill_after = store, 1
    with pytest.raises(Kill):
        crashing.run()
    resumed, _ = loop(tmp_path / "crash", Counted(), run_id=crashing.run_id)
    result = resumed.run(resume=True)
    assert result.harness_id == expected.harness_id
    assert result.spend["rollouts"] == expected.spend["rollouts"] == reference.evaluator.ran
    assert crashing.evaluator.ran + resumed.evaluator.ran == reference.evaluator.ran  # nothing paid twice
    # every rollout the run paid for is in the store, once, under its key
    assert store.rollout_spend([crashing.run_id])[0] == expected.spend["rollouts"]
    from coevolve.store.store import rollout_key

    trajs = store.get_trajectories(crashing.run_id)
    assert len({rollout_key(t.instance, t.harness_id, t.model, t.seed) for t in trajs}) == len(trajs)


def test_a_redone_cell_runs_only_what_it_had_not_stored_and_reads_back_whole(tmp_path):
    from coevolve.config import DataSection, EvolveSection
    from coevolve.pipeline import Models, Steps
    from coevolve.pipeline.steps import cell_rollouts

    store = HarnessStore(tmp_path)
    rid = store.create_run("coevolve", {"test": True})
    evaluator = Counted()
    steps = Steps(store, rid, LocalBackend(evaluator), Models("synthetic/weak", "synthetic/expert", "synthetic/judge",
                  "synthetic/meta"), evolve=EvolveSection(), data=DataSection(), seed=0, params={}, alpha=0.1)
    fam = get_family("iot")
    jobs = [(i, fam.baseline_harness(), 7) for i in fam.generate("test", 6)]
    first = steps.rollouts(jobs[:4], "synthetic/weak", "final:iot:baseline")  # stored before a kill
    again = steps.rollouts(jobs, "synthetic/weak", "final:iot:baseline")  # the redone cell
    assert evaluator.ran == 6 and again[:4] == first  # only the two it had not stored ran
    assert [name for name, _, _ in store.trajectory_batches(rid)] == ["final:iot:baseline", "final:iot:baseline+4"]
    assert sorted(t.id for t in cell_rollouts(store, rid, "final:iot:baseline")) == sorted(t.id for t in again)
    assert store.rollout_spend([rid])[0] == 6 == steps.spend.rollouts
