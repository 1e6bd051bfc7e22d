"""The local Ray head `coevolve run` starts ends with its run: every process of it, checked by pid."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from cluster.head import HEAD_FILE, _alive, ensure_local_head, head_pids, stop_local_head

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
    assert stop_local_head(tmp_path)
    assert not any(_alive(p) for p in pids)
    assert not head_pids(port)
