"""A client following a run reads the store before it reports a meta-agent it cannot reach: a run the
store records as done is reported done (the head's keeper may end the head between the run's last write
and the client's next poll), a run still live after the meta-agent is gone is reported failed."""

from __future__ import annotations

import pytest
import ray

from coevolve.cli import run as run_cli
from coevolve.store.store import HarnessStore


class Unreachable:
    class status:  # the shape of a Ray actor method: actor.status.remote()
        @staticmethod
        def remote() -> object:
            return object()


def follow_with(monkeypatch, tmp_path, error: Exception, stored: str | None):
    store = HarnessStore(tmp_path / "store", create=True)
    run_id = store.create_run("coevolve", {})
    if stored == "done":
        store.finish_run(run_id, "done", {"families": {}, "stop_reason": "cycles"})
    elif stored == "running":
        store.update_run(run_id, status="running")
    polls = []

    def get(ref, timeout=None):
        polls.append(ref)
        raise error

    monkeypatch.setattr(ray, "get", get)
    monkeypatch.setattr(run_cli.time, "sleep", lambda s: None)
    return run_cli._follow(Unreachable(), run_id, tmp_path / "store", quiet=True), polls


def test_a_run_the_store_says_is_done_is_reported_done_when_its_meta_agent_is_gone(monkeypatch, tmp_path):
    final, _ = follow_with(monkeypatch, tmp_path, ray.exceptions.RayActorError(), "done")
    assert final["stage"] == "done" and final["result"]["stop_reason"] == "cycles"


def test_a_live_run_whose_meta_agent_is_gone_is_reported_failed_with_the_resume_command(monkeypatch, tmp_path):
    final, polls = follow_with(monkeypatch, tmp_path, ray.exceptions.RayActorError(), "running")
    assert final["stage"] == "failed" and "--resume" in final["error"] and len(polls) == 1


def test_a_busy_meta_agent_gets_several_polls_before_the_client_gives_up(monkeypatch, tmp_path):
    final, polls = follow_with(monkeypatch, tmp_path, ray.exceptions.GetTimeoutError(), "running")
    assert final["stage"] == "failed" and len(polls) == run_cli.PATIENCE


@pytest.mark.parametrize("error", [ray.exceptions.RayActorError(), ray.exceptions.GetTimeoutError()])
def test_the_store_decides_whatever_the_error(monkeypatch, tmp_path, error):
    assert follow_with(monkeypatch, tmp_path, error, "done")[0]["stage"] == "done"
