"""The main job, `coevolve run`, as a user runs it: the meta-agent is a detached Ray actor on a local
head that outlives the client; `monitor` attached from another process shows every role; killing the
meta-agent mid-cycle and resuming reaches the same final harness and adapter as an uninterrupted run, and
so does every other interruption of the kill matrix (a meta-agent that raises, `coevolve stop`, a hang-up
of the client's terminal, a killed client).

These start real Ray heads and run real (small) co-evolutions: minutes, hence `slow`; CI runs them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

BIN = str(Path(sys.executable).parent / "coevolve")
SMALL = ["local", "families=[iot]", "budget.cycles=2", "budget.plateau=2", "evolve.iterations=2", "evolve.rollouts=400",
         "evolve.val_n=12", "data.rows=30", "data.samples=1", "repeats=1"]


def keeper_ports(store: Path) -> list[int]:
    """The ports of every head the store's keepers kept (from their log), oldest first."""
    from coevolve.cluster.head import KEEPER_LOG

    try:
        text = (Path(store) / KEEPER_LOG).read_text()
    except OSError:
        return []
    return [int(line.rsplit(" ", 1)[1]) for line in text.splitlines() if ": keeping the head on port " in line]


def coevolve(*args: str, timeout: float = 900, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "COEVOLVE_LOG_LEVEL": "warning", **(env or {})}
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=timeout, env=env, check=False)


def finals(store: Path) -> dict:
    from coevolve.store.store import HarnessStore

    st = HarnessStore(store, create=False)
    run = st.list_runs("coevolve")[0]
    cells = {e.payload["cell"]: e.payload for e in st.events(run.run_id, "cell")}
    return {k: (v["harness_id"], v["adapter"]) for k, v in cells.items() if k.startswith("final:")}


def stop_head(store: Path) -> None:
    from coevolve.cluster.head import stop_local_head

    stop_local_head(store)


def heads_left(store: Path, timeout: float = 30) -> list[int]:
    """The pids of every process of a head the store's runs started that is still alive after `timeout`
    seconds: its gcs_server, raylet and their descendants (by the head's port), and its keeper (by the
    keeper log's pid and by a `coevolve.cluster.head keep STORE` command line)."""
    from coevolve.cluster.head import KEEPER_LOG, _alive, _processes, head_pids

    keepers = {int(line.split()[1].rstrip(":")) for line in (store / KEEPER_LOG).read_text().splitlines()}
    assert keeper_ports(store), "no head was started"
    keeper_cmd = f"coevolve.cluster.head keep {store.resolve()}"
    deadline = time.monotonic() + timeout
    while True:
        left = {p for port in keeper_ports(store) for p in head_pids(port)} | {k for k in keepers if _alive(k)}
        left |= {pid for pid, (_, cmd) in _processes().items() if keeper_cmd in cmd and _alive(pid)}
        if not left or time.monotonic() > deadline:
            return sorted(left)
        time.sleep(0.5)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    store = tmp_path_factory.mktemp("reference") / "store"
    out = coevolve("run", *SMALL, "--store", str(store), "--json")
    left = heads_left(store)
    stop_head(store)
    assert out.returncode == 0, out.stderr[-2000:]
    assert not left, f"the head outlived the run it served: {left}"
    status = json.loads(out.stdout.strip().splitlines()[-1])
    assert status["stage"] == "done"
    return store, finals(store), status


def test_the_run_ends_with_a_report_and_test_split_figures(reference):
    _store, final, status = reference
    assert set(final) == {"final:iot"}
    report = Path(status["result"]["report"]["html"])
    assert report.exists() and "offline testbed" in report.read_text()
    fam = status["result"]["families"]["iot"]
    assert {"baseline", "evolved"} <= set(fam["test"])


def test_monitor_from_another_process_shows_every_role_and_a_killed_meta_agent_resumes_to_the_same_result(reference, tmp_path):
    _, expected, _ = reference
    store = tmp_path / "store"
    started = coevolve("run", *SMALL, "--store", str(store), "--detach", "--json")
    assert started.returncode == 0, started.stderr[-2000:]
    run_id = json.loads(started.stdout.strip().splitlines()[-1])["run_id"]
    try:
        # watch it from another process until the correction pipeline is at work, then look at the roles
        deadline = time.monotonic() + 600
        seen = ""
        while time.monotonic() < deadline:
            snap = coevolve("monitor", "--once", "--store", str(store), timeout=120)
            seen = snap.stdout
            if all(role in seen for role in ("meta-agent", "executor", "judge", "expert")):
                break
            time.sleep(2)
        for role in ("meta-agent", "executor", "judge", "expert"):
            assert role in seen, seen[-3000:]
        assert run_id in seen and "spend" in seen
        # kill the meta-agent mid-cycle (its pools die with it), then resume from the store
        killed = subprocess.run(
            [sys.executable, "-c", (
                "import json, ray, sys; from coevolve.cluster.head import read_head; from coevolve.cluster.runtime import start_ray; "
                "from coevolve.jobs import meta_agent; "
                f"start_ray(read_head({str(store)!r})['address'], log_to_driver=False); "
                f"a = meta_agent.find({run_id!r}); ray.kill(a, no_restart=True); print('killed')"
            )],
            capture_output=True, text=True, timeout=120, check=False,
        )
        assert "killed" in killed.stdout, killed.stderr[-2000:]
        status = json.loads(coevolve("status", run_id, "--store", str(store), "--json").stdout.strip().splitlines()[-1])
        assert status["stage"] != "done"
        resumed = coevolve("run", "--resume", run_id, "--store", str(store), "--json")
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        assert json.loads(resumed.stdout.strip().splitlines()[-1])["stage"] == "done"
        assert not heads_left(store), "a head outlived the run finished by --resume"
    finally:
        stop_head(store)
    again = coevolve("run", "--resume", run_id, "--store", str(store))
    assert again.returncode == 2 and "done" in again.stderr  # a finished run is never resumed
    assert finals(store) == expected  # same final harness and adapter ids as the uninterrupted run


def test_two_runs_on_one_store_share_a_head_that_ends_when_both_have_ended_with_a_killed_client_and_a_stop(tmp_path):
    """One run is followed by a client that is killed (the run goes on, detached); the other is started
    detached and stopped with `coevolve stop`. Both ran on one head, and no process of it is left."""
    store = tmp_path / "store"
    tiny = [*SMALL, "budget.cycles=1", "evolve.iterations=1"]
    followed = subprocess.Popen([BIN, "run", *tiny, "--store", str(store), "--json"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env={**os.environ, "COEVOLVE_LOG_LEVEL": "warning"})
    try:
        from coevolve.store.store import HarnessStore

        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not (store / "ray-head.json").exists():
            time.sleep(1)
        detached = coevolve("run", *tiny, "--store", str(store), "--detach", "--json")
        assert detached.returncode == 0, detached.stderr[-2000:]
        stopped_id = json.loads(detached.stdout.strip().splitlines()[-1])["run_id"]
        followed.kill()  # the client dies; its run does not
        followed.wait()
        assert coevolve("stop", stopped_id, "--store", str(store)).returncode == 0
        st = HarnessStore(store, create=False)
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline and any(r.status not in ("done", "failed") for r in st.list_runs("coevolve")):
            time.sleep(2)
        runs = st.list_runs("coevolve")
        assert len(runs) == 2 and all(r.status in ("done", "failed") for r in runs), [(r.run_id, r.status) for r in runs]
        assert len(set(keeper_ports(store))) == 1  # one head served both
        assert not heads_left(store), "the shared head outlived both runs"
    finally:
        followed.kill()
        stop_head(store)


def test_a_run_whose_meta_agent_fails_is_recorded_failed_and_leaves_no_head(tmp_path):
    """The fifth ending: the meta-agent raises (its rollout actors ask for a resource no node has, so
    they are never placed within the readiness timeout). The run is stored as failed, the client says so
    with the run's id and exits 1 (with --json too), and no process of the head is left."""
    from coevolve.store.store import HarnessStore

    store = tmp_path / "store"
    out = coevolve("run", *SMALL, "weak.resources={nosuch: 1}", "--store", str(store), "--json", timeout=600,
                   env={"COEVOLVE_ACTOR_READY_TIMEOUT_S": "5"})
    try:
        left = heads_left(store)
        assert out.returncode == 1, (out.returncode, out.stderr[-2000:])
        final = json.loads(out.stdout.strip().splitlines()[-1])
        (run,) = HarnessStore(store, create=False).list_runs("coevolve")
        assert final["stage"] == "failed" and final["run_id"] == run.run_id and "did not start" in final["error"], final
        assert run.status == "failed" and "did not start" in run.result["error"]
        assert not left, f"the head outlived the failed run: {left}"
    finally:
        stop_head(store)


def _first_cell(store: Path, timeout: float = 600) -> str:
    """The id of the store's run once it has journalled its first cell."""
    from coevolve.store.store import HarnessStore

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (store / "ray-head.json").exists():
            st = HarnessStore(store, create=False)
            runs = st.list_runs("coevolve")
            if runs and st.events(runs[0].run_id, "cell"):
                return runs[0].run_id
        time.sleep(1)
    raise AssertionError("the run journalled no cell")


def _interrupted(store: Path, interruption: str) -> str:
    """A run of SMALL on `store` interrupted as the kill matrix says; its id."""
    from coevolve.store.store import HarnessStore

    if interruption == "raise":  # the meta-agent raises: its rollout actors ask for a resource no node has
        out = coevolve("run", *SMALL, "weak.resources={nosuch: 1}", "--store", str(store), "--json",
                       env={"COEVOLVE_ACTOR_READY_TIMEOUT_S": "5"})
        assert out.returncode == 1, out.stderr[-2000:]
        return json.loads(out.stdout.strip().splitlines()[-1])["run_id"]
    if interruption == "stop":
        started = coevolve("run", *SMALL, "--store", str(store), "--detach", "--json")
        assert started.returncode == 0, started.stderr[-2000:]
        run_id = _first_cell(store)
        assert coevolve("stop", run_id, "--store", str(store)).returncode == 0
        st = HarnessStore(store, create=False)
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and st.get_run(run_id).status != "done":
            time.sleep(1)
        assert (st.get_run(run_id).result or {}).get("stop_reason") == "stop requested"
        return run_id
    # the client in a session of its own, as a terminal runs it: a hang-up of that session's process group
    # (the terminal closed), or SIGKILL to the client alone
    client = subprocess.Popen([BIN, "run", *SMALL, "--store", str(store), "--json"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True,
                              env={**os.environ, "COEVOLVE_LOG_LEVEL": "warning"})
    try:
        run_id = _first_cell(store)
        if interruption == "sighup":
            os.killpg(client.pid, signal.SIGHUP)
        else:
            client.kill()
        client.wait(timeout=60)
    finally:
        client.kill()
    assert HarnessStore(store, create=False).get_run(run_id).status not in ("done", "failed")  # the run went on
    return run_id


@pytest.mark.parametrize("interruption", ["raise", "stop", "sighup", "sigkill"])
def test_every_interruption_of_the_kill_matrix_resumes_to_the_uninterrupted_result(reference, tmp_path, interruption):
    """A run that failed, was stopped, lost its terminal or its client is taken over by `coevolve run
    --resume` (with a correction where the failure needs one): the resuming client reports the store's final
    state (done, exit 0), the final harness and adapter are the uninterrupted run's, and no head is left."""
    from coevolve.store.store import HarnessStore

    _, expected, _ = reference
    store = tmp_path / "store"
    try:
        run_id = _interrupted(store, interruption)
        correction = ["weak.resources={}"] if interruption == "raise" else []
        resumed = coevolve("run", "--resume", run_id, *correction, "--store", str(store), "--json")
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        final = json.loads(resumed.stdout.strip().splitlines()[-1])
        run = HarnessStore(store, create=False).get_run(run_id)
        assert final["stage"] == run.status == "done", (final, run.status)
        assert not heads_left(store), "a head outlived the resumed run"
    finally:
        stop_head(store)
    assert finals(store) == expected
