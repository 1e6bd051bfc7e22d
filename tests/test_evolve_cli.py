"""`coevolve evolve` as a user runs it: a process killed mid-run resumes from the store alone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coevolve.store.store import HarnessStore

ARGS = ["--family", "iot", "--model", "synthetic/weak", "--proposer", "synthetic/meta",
        "--budget-rollouts", "900", "--train-batch", "12", "--val-n", "40", "--seed", "3", "--workers", "1"]


def coevolve(*args: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    cli = "import sys; from coevolve.cli.app import app; sys.exit(app(prog_name='coevolve'))"  # as the console script
    return subprocess.Popen([sys.executable, "-c", cli, *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parent.parent,
                            start_new_session=True, **kw)


@pytest.mark.slow
def test_killed_evolve_process_resumes_to_the_same_harness(tmp_path):
    full = coevolve("evolve", *ARGS, "--store", str(tmp_path / "a"), "--json")
    out, err = full.communicate(timeout=900)
    assert full.returncode == 0, err[-2000:]
    expected = json.loads(out.strip().splitlines()[-1])

    store_path = tmp_path / "b"
    victim = coevolve("evolve", *ARGS, "--store", str(store_path), "--json")
    deadline = time.monotonic() + 600
    run_id = None
    while time.monotonic() < deadline and victim.poll() is None:  # kill after the first checkpoint
        time.sleep(0.5)
        if (store_path / "store.db").exists():
            s = HarnessStore(store_path, create=False)
            runs = s.list_runs("evolve")
            if runs and s.events(runs[0].run_id, "checkpoint"):
                run_id = runs[0].run_id
                os.killpg(victim.pid, signal.SIGKILL)
                break
    victim.wait(timeout=60)
    assert run_id is not None, "the run ended before its first checkpoint"

    resumed = coevolve("evolve", "--resume", run_id, "--store", str(store_path), "--json")
    out, err = resumed.communicate(timeout=900)
    assert resumed.returncode == 0, err[-2000:]
    got = json.loads(out.strip().splitlines()[-1])
    assert got["run_id"] == run_id
    assert got["harness_id"] == expected["harness_id"]
    assert got["evolved_val"] == expected["evolved_val"] > expected["baseline_val"]
    assert HarnessStore(store_path, create=False).get_run(run_id).status == "done"
