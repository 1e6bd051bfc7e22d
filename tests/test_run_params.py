"""A run profile's `params` reach every instance a `coevolve run` draws (evolution train and val, the
correction set's train split, the adapter's val check, the final test split), and a knob a family does
not have is refused where the profile is read."""

from __future__ import annotations

import pytest

from coevolve.config import load_profile
from coevolve.pipeline import CoEvolution
from coevolve.store.datasets import read_manifest
from coevolve.store.store import HarnessStore
from tests.test_spend_resume import Counted, backend


class Recording(Counted):
    def __init__(self) -> None:
        super().__init__()
        self.instances: dict[str, dict] = {}

    def evaluate(self, jobs, model):
        self.instances.update((inst.id, inst.params) for inst, _, _ in jobs)
        return super().evaluate(jobs, model)


def test_a_profiles_params_reach_every_instance_a_run_evaluates(monkeypatch, tmp_path):
    monkeypatch.setenv("COEVOLVE_STORE", str(tmp_path))
    profile = load_profile("local", ["families=[iot]", "params={difficulty: 1, size: 0}", "evolve.rollouts=60",
                                     "evolve.val_n=4", "evolve.train_batch=4", "budget.cycles=1", "data.rows=6",
                                     "data.samples=1", "repeats=1"])
    store = HarnessStore(tmp_path)
    run_id = store.create_run("coevolve", profile.model_dump())
    evaluator = Recording()
    result = CoEvolution(profile, store, run_id, backend(store, evaluator)).run()
    assert result["stop_reason"] == "done"
    splits = {iid.split("/")[1] for iid in evaluator.instances}
    assert {"train", "val", "test"} <= splits  # evolution, dataset, adapter check and final test all drew
    assert all(p == {"difficulty": 1, "size": 0} for p in evaluator.instances.values())
    assert all(iid.endswith(":difficulty=1,size=0") for iid in evaluator.instances)
    # the profile's sections reach the steps as they are: the evolution's and the dataset's journalled settings
    (evolution,) = store.list_runs("evolve")
    assert (evolution.config["budget"]["rollouts"], evolution.config["train_batch"]) == (60, 4)
    assert evolution.config["params"] == {"difficulty": 1, "size": 0}
    data = next(e.payload for e in store.events(run_id, "cell") if e.payload["cell"] == "data:iot:0")
    config = read_manifest(tmp_path, data["dataset"]).manifest["config"]
    assert (config["rows"], config["samples"], config["seed"]) == (6, 1, profile.seed)


@pytest.mark.parametrize("override, message", [
    ("params.bogus=1", "iot has no parameter 'bogus' (it has: difficulty, size)"),
    ("params.size=65", "parameter size=65 is out of range 0..64"),
])
def test_a_knob_the_family_does_not_have_is_refused(override, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_profile("local", ["families=[iot]", override])


def test_rays_own_resources_are_refused_as_custom_resources():
    with pytest.raises(ValueError, match="resource 'CPU' is one of Ray's own: set num_cpus"):
        load_profile("local", ["weak.resources={CPU: 2}"])
    assert load_profile("local", ["weak.resources={trainer: 1}"]).weak.resources == {"trainer": 1}


def test_a_dry_run_of_the_cpu_profile_shows_its_difficulty_and_starts_nothing(tmp_path, monkeypatch):
    import json

    from typer.testing import CliRunner

    from coevolve.cli.app import app

    def started(*args, **kwargs):
        raise AssertionError("a dry run started a Ray head")

    monkeypatch.setattr("coevolve.cluster.head.ensure_local_head", started)
    monkeypatch.delenv("COEVOLVE_SERVE_URL", raising=False)
    store = tmp_path / "store"
    text = CliRunner().invoke(app, ["run", "cpu", "--dry-run", "--store", str(store)])
    assert text.exit_code == 0, text.output
    assert "params:\n  difficulty: 1\n  size: 1\n" in text.output
    shown = CliRunner().invoke(app, ["run", "cpu", "params.difficulty=2", "--dry-run", "--json", "--store", str(store)])
    assert json.loads(shown.output)["profile"]["params"] == {"difficulty": 2, "size": 1}
    assert not store.exists()
