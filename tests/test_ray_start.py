"""Starting Ray on a loaded machine: Ray gives a new node's raylet a fixed 30 s to register, and a start
that misses it is tried once more (the embedded node and `coevolve run`'s head); any other failure is
not retried."""

from __future__ import annotations

import subprocess

import pytest

from coevolve.cluster import head, runtime

TIMEOUT = Exception("The current node timed out during startup. This could happen because ...")


@pytest.fixture
def fake_ray(monkeypatch):
    import ray

    calls: list[str] = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append("shutdown"))
    for name in ("_token_auth", "check_reachable", "_loopback_only", "_check_loopback"):
        monkeypatch.setattr(runtime, name, lambda *a, **k: None)
    return ray, calls


@pytest.mark.parametrize("failures, expected", [([TIMEOUT], ["init", "shutdown", "init"]), ([], ["init"])])
def test_an_embedded_start_that_times_out_is_tried_once_more(fake_ray, monkeypatch, failures, expected):
    ray, calls = fake_ray
    pending = list(failures)

    def init(**kw):
        calls.append("init")
        if pending:
            raise pending.pop(0)

    monkeypatch.setattr(ray, "init", init)
    runtime.start_ray(None)
    assert calls == expected


@pytest.mark.parametrize("error", [TIMEOUT, Exception("some other failure")])
def test_a_second_failure_or_another_error_is_raised(fake_ray, monkeypatch, error):
    ray, calls = fake_ray

    def init(**kw):
        calls.append("init")
        raise error

    monkeypatch.setattr(ray, "init", init)
    with pytest.raises(Exception, match=str(error)[:20]):
        runtime.start_ray(None)
    assert calls.count("init") == (2 if error is TIMEOUT else 1)


@pytest.mark.parametrize("outputs, starts", [(["timed out during startup", ""], 2), (["port in use", ""], 1)])
def test_a_head_start_is_retried_only_after_the_startup_timeout(monkeypatch, tmp_path, outputs, starts):
    runs, ended = [], []
    monkeypatch.setattr(runtime, "_ensure_local_token", lambda: None)
    monkeypatch.setattr(head, "_end", lambda pids: ended.append(pids))
    monkeypatch.setattr(head, "head_pids", lambda port: [port])
    monkeypatch.setattr(head, "_listening", lambda address: True)

    def run(cmd, **kw):
        runs.append(cmd)
        err = outputs[len(runs) - 1]
        return subprocess.CompletedProcess(cmd, 1 if err else 0, "", err)

    monkeypatch.setattr(head.subprocess, "run", run)
    if starts == 1:
        with pytest.raises(RuntimeError, match="could not start a local Ray head"):
            head._start_head(tmp_path, 2)
    else:
        head._start_head(tmp_path, 2)
    assert len(runs) == starts and len(ended) == 1
