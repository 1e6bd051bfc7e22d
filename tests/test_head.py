"""The local Ray head `coevolve run` starts ends with its run: every process of it, checked by pid."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from coevolve.cluster.head import (
    HEAD_FILE,
    KEEPER_POLL_S,
    _alive,
    ensure_local_head,
    head_pids,
    stop_local_head,
)

# A stand-in for a GCS server that hangs on SIGTERM (as Ray's does while it flushes its events), with a
# child that renames nothing and names no port (as Ray's dashboard agent): both must end.
STUBBORN = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"])
time.sleep(120)
"""


def test_a_head_that_ignores_sigterm_is_killed_with_its_children(tmp_path):
    port = 59_871
    parent = subprocess.Popen([sys.executable, "-c", STUBBORN, f"--gcs_server_port={port}"])
    try:
        deadline = time.monotonic() + 10
        while len(head_pids(port)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        pids = head_pids(port)
        assert parent.pid in pids and len(pids) == 2
        (tmp_path / HEAD_FILE).write_text(json.dumps({"address": f"127.0.0.1:{port}", "port": port}))
        started = time.monotonic()
        assert stop_local_head(tmp_path, grace_s=0.5)
        parent.wait(timeout=5)
        assert not any(_alive(p) for p in pids) and time.monotonic() - started < 8
        assert not (tmp_path / HEAD_FILE).exists()
    finally:
        parent.kill()


def test_a_real_local_head_leaves_no_process_behind(tmp_path):
    address, started = ensure_local_head(tmp_path, num_cpus=1)
    assert started
    port = int(address.rsplit(":", 1)[1])
    pids = head_pids(port)
    assert len(pids) >= 3  # gcs_server, raylet and the agents at least
    # the head lives in its own session: a hang-up of the client's terminal or a signal to its group misses it
    assert all(os.getsid(p) != os.getsid(0) and os.getpgid(p) != os.getpgid(0) for p in pids)
    assert stop_local_head(tmp_path)
    assert not any(_alive(p) for p in pids)
    assert not head_pids(port)


def _program(pid: int) -> str:
    """The name of the program a process runs ("" if it has ended)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_text(errors="replace").split("\0")[0].rsplit("/", 1)[-1]
    except OSError:
        return ""


def _daemons(state: dict) -> set[int]:
    """The head's GCS server, raylet and keeper: what must stay up while a run is live (Ray's idle
    workers may end on their own)."""
    programs = {p: _program(p) for p in head_pids(state["port"])}
    assert list(programs.values()).count("gcs_server") == 1
    daemons = {p for p, name in programs.items() if name in ("gcs_server", "raylet")} | {state["keeper_pid"]}
    assert len(daemons) == 3
    return daemons


def _gone(pids: set[int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not any(_alive(p) for p in pids)


def _store_with_runs(path, n):
    from coevolve.store.store import HarnessStore

    st = HarnessStore(path, create=True)
    return st, [st.create_run("coevolve", {}) for _ in range(n)]


def test_the_keeper_ends_the_head_when_its_last_live_run_ends_and_not_before(tmp_path):
    """No client needed: a detached run, or one whose client was killed, leaves no head behind."""
    st, (first, second) = _store_with_runs(tmp_path, 2)
    leases = [st.claim_run(first, heartbeat_s=None), st.claim_run(second, heartbeat_s=None)]
    address, started = ensure_local_head(tmp_path, first, num_cpus=1)
    assert started
    again, started_again = ensure_local_head(tmp_path, second)
    assert (again, started_again) == (address, False)  # one head per store: the second run shares it
    state = json.loads((tmp_path / HEAD_FILE).read_text())
    assert set(state["runs"]) == {first, second}
    port = state["port"]
    pids = head_pids(port) | {state["keeper_pid"]}
    try:
        daemons = _daemons(state)
        st.finish_run(first, "done", {})
        leases[0].release()
        time.sleep(3 * KEEPER_POLL_S)
        assert all(_alive(p) for p in daemons), "a live run's head was stopped"
        st.finish_run(second, "failed", {})
        leases[1].release()
        assert _gone(pids, 6 * KEEPER_POLL_S + 15), "the head outlived its runs"
        assert not head_pids(port) and not (tmp_path / HEAD_FILE).exists()
    finally:
        stop_local_head(tmp_path)


def test_a_run_whose_owner_died_is_not_live_and_two_starts_at_once_share_one_head(tmp_path):
    owner = subprocess.Popen([sys.executable, "-c", ("from coevolve.store.store import HarnessStore; import time; "
                              f"st = HarnessStore({str(tmp_path)!r}, create=True); run = st.create_run('coevolve', {{}}); "
                              "st.claim_run(run); print(run, flush=True); time.sleep(600)")],
                             stdout=subprocess.PIPE, text=True)
    run_id = owner.stdout.readline().strip()
    start = ("import sys; from coevolve.cluster.head import ensure_local_head; "
             f"print(ensure_local_head({str(tmp_path)!r}, {run_id!r}, num_cpus=1)[0])")
    racers = [subprocess.Popen([sys.executable, "-c", start], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    addresses = {r.communicate(timeout=180)[0].strip() for r in racers}
    assert len(addresses) == 1  # the second start found the first one's head
    state = json.loads((tmp_path / HEAD_FILE).read_text())
    pids = head_pids(state["port"]) | {state["keeper_pid"]}
    try:
        daemons = _daemons(state)
        state["runs"][run_id] = 0.0  # registered long ago: past the grace a starting meta-agent gets
        (tmp_path / HEAD_FILE).write_text(json.dumps(state))
        time.sleep(3 * KEEPER_POLL_S)
        assert all(_alive(p) for p in daemons), "the head of a run whose owner is alive was stopped"
        owner.kill()
        owner.wait()
        assert _gone(pids, 6 * KEEPER_POLL_S + 15), "a run whose owner was killed kept its head up"
    finally:
        owner.kill()
        stop_local_head(tmp_path)
