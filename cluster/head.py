"""A local Ray head that outlives the client (`coevolve run` on the embedded default).

`ray.init()` without an address starts a Ray owned by the calling process: it stops when that process
exits, and with it any detached actor. So that closing the terminal does not stop a run, `coevolve run`
starts (or reuses) a head with `ray start --head` — bound to 127.0.0.1, token authentication on — and
attaches to it. Its address is kept in `<store>/ray-head.json`; `coevolve run` stops the head it started
when the run it followed ends, `coevolve stop --head` stops it otherwise.
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


def stop_local_head(store: Path) -> bool:
    """Stop the processes of the store's local head (only those: other Ray clusters are left alone)."""
    path = Path(store) / HEAD_FILE
    try:
        state = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return False
    marks = (f"127.0.0.1:{state['port']}", f"--gcs_server_port={state['port']}", f"gcs-address=127.0.0.1:{state['port']}")
    killed = 0
    for pid_dir in Path("/proc").iterdir():
        if not pid_dir.name.isdigit() or int(pid_dir.name) == os.getpid():
            continue
        try:
            cmdline = (pid_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(m in cmdline for m in marks):
            try:
                os.kill(int(pid_dir.name), signal.SIGTERM)
                killed += 1
            except OSError:
                pass
    path.unlink(missing_ok=True)
    return killed > 0
