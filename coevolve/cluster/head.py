"""A local Ray head that outlives the client (`coevolve run` on the embedded default), and ends with its runs.

`ray.init()` without an address starts a Ray owned by the calling process: it stops when that process
exits, and with it any detached actor. So that closing the terminal does not stop a run, `coevolve run`
starts (or reuses) a head with `ray start --head` — bound to 127.0.0.1, token authentication on — and
attaches to it.

One head per store: `<store>/ray-head.json` holds its address and the runs it serves, and every change to
it happens under a lock on `<store>/ray-head.lock`, so two runs started at once on one store share one
head. The head ends when none of its runs is live any more (live: pending or running in the store under
an owner process that is alive — a run just registered counts as live for `PENDING_GRACE_S`, while its
meta-agent starts): the client following a run checks when the run ends, and a keeper process started
with the head (`python -m coevolve.cluster.head keep STORE`, in its own session) checks every `KEEPER_POLL_S`, so
a detached run, a killed client or a run finished by `--resume` leaves no head behind. Ending a head is
SIGTERM, a grace period, then SIGKILL of what remains, checked by pid; the keeper ends with its head.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HEAD_FILE = "ray-head.json"
LOCK_FILE = "ray-head.lock"
KEEPER_LOG = "ray-head-keeper.log"
KEEPER_POLL_S = 2.0
PENDING_GRACE_S = 120.0  # a run registered this recently is live while its meta-agent starts and claims it
ENDED = ("done", "failed")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False


def _head_state(store: Path) -> dict[str, Any] | None:
    try:
        state = json.loads((Path(store) / HEAD_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return state if isinstance(state, dict) and isinstance(state.get("port"), int) else None


def read_head(store: Path) -> dict[str, Any] | None:
    """The store's head, if it is up (its address answers)."""
    state = _head_state(store)
    return state if state and _listening(state.get("address", "")) else None


def _write_state(store: Path, state: dict[str, Any]) -> None:
    path = Path(store) / HEAD_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    tmp.replace(path)


@contextmanager
def _head_lock(store: Path) -> Iterator[None]:
    """Serialise every start, registration and stop of the store's head (across processes)."""
    Path(store).mkdir(parents=True, exist_ok=True)
    with open(Path(store) / LOCK_FILE, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ensure_local_head(store: Path, run_id: str | None = None, num_cpus: int | None = None) -> tuple[str, bool]:
    """(address, started_now): the store's running local head, or a new one; `run_id` is registered as
    one of the runs it serves (the head ends when none of them is live)."""
    with _head_lock(store):
        state = read_head(store)
        started = state is None
        if started:
            stale = _head_state(store)
            if stale:  # a head that no longer answers: end what is left of it before starting another
                _end(head_pids(stale["port"]))
            state = _start_head(store, num_cpus)
        if not _alive(int(state.get("keeper_pid") or 0)):
            state["keeper_pid"] = _start_keeper(store)
        if run_id is not None:
            state.setdefault("runs", {})[run_id] = time.time()
        _write_state(store, state)
        return state["address"], started


def _start_head(store: Path, num_cpus: int | None) -> dict[str, Any]:
    from coevolve.cluster.runtime import STARTUP_TIMEOUT, _ensure_local_token

    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
           "RAY_USAGE_STATS_ENABLED": "0", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    _ensure_local_token()
    ray_bin = shutil.which("ray", path=str(Path(sys.executable).parent)) or "ray"
    for attempt in (1, 2):  # a second try only after Ray's startup timeout (a loaded machine)
        port = _free_port()
        cmd = [ray_bin, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}", "--include-dashboard=false",
               "--disable-usage-stats"] + ([f"--num-cpus={num_cpus}"] if num_cpus is not None else [])
        # its own session: a hang-up or signal to the client's process group (a closed terminal) never reaches the head
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, check=False, start_new_session=True)
        if out.returncode == 0:
            break
        _end(head_pids(port))
        if attempt == 2 or STARTUP_TIMEOUT not in out.stderr + out.stdout:
            raise RuntimeError(f"could not start a local Ray head: {(out.stderr or out.stdout).strip().splitlines()[-1:]}")
    address = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while not _listening(address):
        if time.monotonic() > deadline:
            _end(head_pids(port))
            raise RuntimeError(f"the local Ray head did not come up at {address}")
        time.sleep(0.5)
    return {"address": address, "port": port, "runs": {}}


def _start_keeper(store: Path) -> int:
    with open(Path(store) / KEEPER_LOG, "ab") as log:
        keeper = subprocess.Popen([sys.executable, "-m", "coevolve.cluster.head", "keep", str(Path(store).resolve())],
                                  stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                                  cwd=str(Path(__file__).resolve().parents[2]))
    return keeper.pid


def live_runs(store: Path, state: dict[str, Any]) -> list[str]:
    """The head's runs that are still live (see the module docstring). An unreadable store has none."""
    from coevolve.store.store import HarnessStore, StoreError

    runs = state.get("runs") or {}
    if not runs:
        return []
    try:
        st = HarnessStore(store, create=False)
    except Exception:  # noqa: BLE001 — a store that is gone or unreadable serves no run
        return []
    live = []
    for run_id, registered in runs.items():
        try:
            run = st.get_run(run_id)
        except StoreError:
            continue
        if run.status in ENDED:
            continue
        just_registered = time.time() - float(registered) < PENDING_GRACE_S
        if run.status in ("pending", "running") and (just_registered or run.owner_alive() is not False):
            live.append(run_id)
    return live


def stop_head_if_idle(store: Path) -> bool:
    """Stop the store's head when none of its runs is live. True when it was stopped here."""
    with _head_lock(store):
        state = _head_state(store)
        if state is None or live_runs(store, state):
            return False
        stop_local_head(store)
        return True


def keep(store: Path) -> None:
    """The keeper: end the store's head once no run of it is live, or as soon as the store is gone; end
    with the head however it ends."""
    store = Path(store)
    state = _head_state(store)
    if state is None:
        return
    port = state["port"]
    print(f"keeper {os.getpid()}: keeping the head on port {port}", flush=True)
    while True:
        time.sleep(KEEPER_POLL_S)
        if not store.is_dir():  # the store was deleted under the head
            _end(head_pids(port))
            print(f"keeper {os.getpid()}: the store is gone; ended the head on port {port}", flush=True)
            return
        state = _head_state(store)
        if state is None or state["port"] != port or not head_pids(port):
            print(f"keeper {os.getpid()}: the head on port {port} was ended by another process", flush=True)
            return
        try:
            if stop_head_if_idle(store):
                print(f"keeper {os.getpid()}: no live run left; ended the head on port {port}", flush=True)
                return
        except RuntimeError as e:  # processes that survived SIGKILL: say so, try again
            print(f"keeper {os.getpid()}: {e}", flush=True)


STOP_GRACE_S = 5.0  # SIGTERM, then this long for the processes to end, then SIGKILL


def _processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every process this user can see."""
    out: dict[int, tuple[int, str]] = {}
    for pid_dir in Path("/proc").iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            cmdline = (pid_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = (pid_dir / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state, past the command name
        out[int(pid_dir.name)] = (ppid, cmdline)
    return out


def head_pids(port: int) -> set[int]:
    """The processes of the local head on `port`: those whose command line names its GCS port, and
    every descendant of them (Ray renames some, e.g. `ray::DashboardAgent`, so names are not enough)."""
    marks = (f"127.0.0.1:{port}", f"--gcs_server_port={port}", f"gcs-address=127.0.0.1:{port}")
    procs = _processes()
    found = {pid for pid, (_, cmd) in procs.items() if pid != os.getpid() and any(m in cmd for m in marks)}
    grew = True
    while grew:
        children = {pid for pid, (ppid, _) in procs.items() if ppid in found and pid not in found and pid != os.getpid()}
        found |= children
        grew = bool(children)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has ended; only its parent's reaping is left


def _end(pids: set[int], grace_s: float = STOP_GRACE_S) -> list[int]:
    """SIGTERM, up to `grace_s` for them to end, SIGKILL of what remains; the pids still alive after."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        deadline = time.monotonic() + (grace_s if sig == signal.SIGTERM else 5.0)
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not any(_alive(p) for p in pids):
            break
    return sorted(p for p in pids if _alive(p))


def stop_local_head(store: Path, grace_s: float = STOP_GRACE_S) -> bool:
    """Stop every process of the store's local head (only those: other Ray clusters are left alone),
    whatever its runs are doing: SIGTERM, up to `grace_s` for them to end, then SIGKILL of what remains
    (a GCS server can hang while it flushes its events), checked by pid. True when the head had processes."""
    path = Path(store) / HEAD_FILE
    state = _head_state(store)
    if state is None:
        return False
    pids = head_pids(state["port"])
    left = _end(pids, grace_s)
    if left:
        raise RuntimeError(f"the local Ray head's processes {left} did not end")
    path.unlink(missing_ok=True)
    return bool(pids)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "keep":
        sys.exit("usage: python -m coevolve.cluster.head keep STORE")
    keep(Path(sys.argv[2]))
