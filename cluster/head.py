"""A local Ray head that outlives the client (`coevolve run` on the embedded default).

`ray.init()` without an address starts a Ray owned by the calling process: it stops when that process
exits, and with it any detached actor. So that closing the terminal does not stop a run, `coevolve run`
starts (or reuses) a head with `ray start --head` — bound to 127.0.0.1, token authentication on — and
attaches to it. Its address is kept in `<store>/ray-head.json`; `coevolve run` stops the head it started
when the run it followed ends (every process of it, checked by pid).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HEAD_FILE = "ray-head.json"


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


def read_head(store: Path) -> dict[str, Any] | None:
    try:
        state = json.loads((Path(store) / HEAD_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return state if _listening(state.get("address", "")) else None


def ensure_local_head(store: Path, num_cpus: int | None = None) -> tuple[str, bool]:
    """(address, started_now): the store's running local head, or a new one."""
    from cluster.runtime import _ensure_local_token

    state = read_head(store)
    if state:
        return state["address"], False
    port = _free_port()
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
           "RAY_USAGE_STATS_ENABLED": "0", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    _ensure_local_token()
    ray_bin = shutil.which("ray", path=str(Path(sys.executable).parent)) or "ray"
    cmd = [ray_bin, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}", "--include-dashboard=false",
           "--disable-usage-stats"]
    if num_cpus is not None:
        cmd.append(f"--num-cpus={num_cpus}")
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"could not start a local Ray head: {(out.stderr or out.stdout).strip().splitlines()[-1:]}")
    address = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while not _listening(address):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the local Ray head did not come up at {address}")
        time.sleep(0.5)
    Path(store).mkdir(parents=True, exist_ok=True)
    (Path(store) / HEAD_FILE).write_text(json.dumps({"address": address, "port": port, "started": time.time()}))
    return address, True


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


def stop_local_head(store: Path, grace_s: float = STOP_GRACE_S) -> bool:
    """Stop every process of the store's local head (only those: other Ray clusters are left alone):
    SIGTERM, up to `grace_s` for them to end, then SIGKILL of what remains (a GCS server can hang while
    it flushes its events), checked by pid. True when the head had processes."""
    path = Path(store) / HEAD_FILE
    try:
        state = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return False
    pids = head_pids(int(state["port"]))
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.monotonic() + (grace_s if sig == signal.SIGTERM else 5.0)
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not any(_alive(p) for p in pids):
            break
    left = sorted(p for p in pids if _alive(p))
    if left:
        raise RuntimeError(f"the local Ray head's processes {left} did not end")
    path.unlink(missing_ok=True)
    return bool(pids)
