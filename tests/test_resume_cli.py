"""`coevolve run --resume` takes over a run that failed, was stopped, or lost its owner: a stop request is
answered by the resume after it, corrections are limited to fields no finished cell depends on, the run
is pending again (so the head's keeper keeps the head up for the new meta-agent) and a finished run is
still refused."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from coevolve.cli.app import app
from coevolve.config import load_profile
from coevolve.errors import BadInput
from coevolve.jobs.meta_agent import stop_requested
from coevolve.jobs.run import resumed_profile
from coevolve.store.store import HarnessStore


class Started(Exception):
    """Raised where the run would start its Ray head: every check and write before it has happened."""


def stored_run(tmp_path, status: str, stop_reason: str | None = None):
    store = HarnessStore(tmp_path / "store", create=True)
    profile = load_profile("local", ["families=[iot]"])
    run_id = store.create_run("coevolve", profile.model_dump())
    if status == "done":
        store.finish_run(run_id, "done", {"stop_reason": stop_reason, "families": {}})
    else:
        store.update_run(run_id, status=status, result={"error": "RuntimeError: boom"})
    return store, run_id


def resume(monkeypatch, tmp_path, run_id, *overrides):
    def started(*args, **kwargs):
        raise Started()

    monkeypatch.setattr("coevolve.cluster.head.ensure_local_head", started)
    return CliRunner().invoke(app, ["run", "--resume", run_id, *overrides, "--store", str(tmp_path / "store")])


def test_a_stop_is_answered_by_the_resume_after_it():
    class Store:
        def __init__(self, kinds):
            self.kinds = kinds

        def events(self, run_id):
            return [type("E", (), {"kind": k})() for k in self.kinds]

    assert not stop_requested(Store(["cell"]), "r")
    assert stop_requested(Store(["cell", "stop"]), "r")
    assert not stop_requested(Store(["stop", "resume", "cell"]), "r")
    assert stop_requested(Store(["stop", "resume", "stop"]), "r")


@pytest.mark.parametrize("status, reason", [("failed", None), ("done", "stop requested"), ("running", None)])
def test_a_failed_stopped_or_orphaned_run_is_taken_over(monkeypatch, tmp_path, status, reason):
    store, run_id = stored_run(tmp_path, status, reason)
    result = resume(monkeypatch, tmp_path, run_id)
    assert isinstance(result.exception, Started)
    assert store.get_run(run_id).status == "pending"
    assert [e.payload["was"] for e in store.events(run_id, "resume")] == [status]


def test_a_finished_run_is_refused(monkeypatch, tmp_path):
    _, run_id = stored_run(tmp_path, "done", "done")
    result = resume(monkeypatch, tmp_path, run_id)
    assert result.exit_code == 2 and "is done; start a new run instead" in result.output


def test_a_correction_of_a_field_no_finished_cell_depends_on_is_stored_with_the_run(monkeypatch, tmp_path):
    store, run_id = stored_run(tmp_path, "failed")
    result = resume(monkeypatch, tmp_path, run_id, "train.config.rank=8", "budget.cycles=3")
    assert isinstance(result.exception, Started)
    config = store.get_run(run_id).config
    assert config["train"]["config"]["rank"] == 8 and config["budget"]["cycles"] == 3
    assert store.events(run_id, "resume")[-1].payload["overrides"] == ["train.config.rank=8", "budget.cycles=3"]


@pytest.mark.parametrize("override", ["evolve.rollouts=100", "families=[stock]", "weak.model=synthetic/expert", "seed=3"])
def test_a_correction_finished_cells_depend_on_is_refused(monkeypatch, tmp_path, override):
    store, run_id = stored_run(tmp_path, "failed")
    result = resume(monkeypatch, tmp_path, run_id, override)
    assert result.exit_code == 2 and "--resume cannot change" in result.output
    assert store.get_run(run_id).status == "failed" and not store.events(run_id, "resume")  # nothing written


def test_resumable_fields_validate_like_any_override():
    with pytest.raises(BadInput):
        resumed_profile(load_profile("local").model_dump(), ["evolve.val_n=3"], "r")
    with pytest.raises(ValueError, match="rank"):
        resumed_profile(load_profile("local").model_dump(), ["train.config.rank=999"], "r")


def test_a_profiles_context_windows_are_stored_with_the_run_and_reach_its_actors(monkeypatch):
    from coevolve.jobs.meta_agent import context_windows_setting

    profile = load_profile("local", ["context_windows={gemini/x: 32000, '*': 8000}"])
    assert profile.model_dump()["context_windows"] == {"gemini/x": 32000, "*": 8000}
    monkeypatch.setenv("COEVOLVE_CONTEXT_WINDOWS", "gemini/x=1000000,other/y=4096")
    assert context_windows_setting(profile.context_windows) == "*=8000,gemini/x=32000,other/y=4096"
    with pytest.raises(ValueError, match="context_windows"):
        load_profile("local", ["context_windows={gemini/x: 10}"])
