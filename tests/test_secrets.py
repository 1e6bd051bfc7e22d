"""Secrets: provider keys come from the environment or a secrets file and are never written anywhere.

- a fake key in the environment and another in a secrets file (`COEVOLVE_SECRETS_FILE`) reach the
  gateway (in this process and, through the file, in a Ray actor started like the rollout pool's), never
  through Ray's runtime_env;
- a hostile agent on the refactor family (a scripted model that writes a test reading `os.environ`,
  `/proc/*/environ`, the Ray token and the secrets file, and runs it through the family's tools) gets
  none of them back into its trajectory;
- an error message that carries a key leaves the gateway redacted;
- `coevolve eval` (all families, refactor included), `coevolve evolve` and `coevolve run` as a user runs
  them, with a third key in the tau2 customer's litellm arguments (`COEVOLVE_TAU2_USER_ARGS`): no key is
  in any file of the store, any Ray session file, stdout or stderr.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from coevolve.agents.executor import Executor
from coevolve.codec import encode
from coevolve.llm.contract import Completion
from coevolve.tasks import get_family

ENV_KEY = "sk-fake-coevolve-env-" + uuid.uuid4().hex
FILE_KEY = "sk-fake-coevolve-file-" + uuid.uuid4().hex
ARGS_KEY = "sk-fake-coevolve-args-" + uuid.uuid4().hex
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture()
def secrets(tmp_path, monkeypatch):
    f = tmp_path / "secrets.env"
    f.write_text(f"# test secrets\nexport ANTHROPIC_API_KEY='{FILE_KEY}'\n")
    f.chmod(0o600)
    monkeypatch.setenv("COEVOLVE_SECRETS_FILE", str(f))
    monkeypatch.setenv("GEMINI_API_KEY", ENV_KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "")  # recorded, so that what load_secrets sets is undone
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    import coevolve.services.secrets as secrets_mod
    monkeypatch.setattr(secrets_mod, "_loaded_secrets", set())
    return f


def _hits(data: bytes | str) -> list[str]:
    raw = data.encode() if isinstance(data, str) else data
    return [k for k in (ENV_KEY, FILE_KEY, ARGS_KEY) if k.encode() in raw]


def test_secrets_file_loads_without_overriding_the_environment(secrets, monkeypatch, tmp_path):
    from coevolve.services.secrets import load_secrets, redact

    monkeypatch.setenv("OPENAI_API_KEY", "from-the-environment")
    secrets.write_text(secrets.read_text() + "OPENAI_API_KEY=from-the-file\nnot a line\n=x\n")
    names = load_secrets()
    assert names == ["ANTHROPIC_API_KEY"] and os.environ["ANTHROPIC_API_KEY"] == FILE_KEY
    assert os.environ["OPENAI_API_KEY"] == "from-the-environment"
    text = f"401 Incorrect API key provided: {FILE_KEY} (also {ENV_KEY})"
    assert _hits(redact(text)) == [] and redact(text).count("[redacted]") == 2
    assert load_secrets(tmp_path / "missing.env") == []


def test_a_key_in_an_error_message_leaves_the_gateway_redacted(secrets):
    from coevolve.llm.contract import ModelUnavailable, RetryPolicy
    from coevolve.services.gateway import Gateway

    gateway = Gateway(retry=RetryPolicy(attempts=2, backoff_s=0.001))
    gateway.warm_up()
    with pytest.raises(ModelUnavailable) as e:  # the adapter id is the key: the error names it
        gateway.complete(f"synthetic/weak@{FILE_KEY}", [{"role": "user", "content": "hi"}], [])
    assert "[redacted]" in str(e.value) and not _hits(str(e.value))


def test_worker_env_carries_no_key_and_actors_get_keys_from_the_secrets_file(secrets, ray_session):
    import ray

    from coevolve.services.pools.base import worker_env

    env = worker_env()
    assert env["COEVOLVE_SECRETS_FILE"] == str(secrets) and not _hits(json.dumps(env))

    def probe() -> dict[str, bool]:  # what the gateway of a pool actor sees (booleans, never values)
        from coevolve.services.providers import litellm_lib

        litellm_lib()
        return {"file_key": os.environ.get("ANTHROPIC_API_KEY", "").startswith("sk-fake-coevolve-file-")}

    got = ray.get(ray.remote(probe).options(num_cpus=0, runtime_env={"env_vars": env}).remote())
    assert got["file_key"]


def test_a_key_in_a_setting_never_reaches_the_runtime_env_and_actors_still_get_the_setting(ray_session, monkeypatch):
    """A key planted in COEVOLVE_TAU2_USER_ARGS (litellm arguments) and in a LITELLM_* variable: the
    runtime_env a pool hands Ray has neither, a pool actor still gets the customer's arguments (through the
    cluster's key-value store), and no file of Ray's session holds the key afterwards."""
    import ray

    from coevolve.services.pools.base import worker_env

    key = "sk-fake-coevolve-tau2-" + uuid.uuid4().hex
    monkeypatch.setenv("COEVOLVE_TAU2_USER_ARGS", json.dumps({"api_key": key, "api_base": "http://127.0.0.1:9"}))
    monkeypatch.setenv("LITELLM_MASTER_KEY", key)
    monkeypatch.setenv("LITELLM_LOG", "ERROR")
    env = worker_env()
    assert key not in json.dumps(env) and env["LITELLM_LOG"] == "ERROR" and "COEVOLVE_WORKER_SECRETS" in env

    def probe() -> dict[str, bool]:  # what a pool actor's gateway sees (booleans, never values)
        from coevolve.services.secrets import ensure_secrets
        from coevolve.tasks.tau2.data import user_model

        ensure_secrets()
        _, args = user_model()
        return {"key": args.get("api_key", "").startswith("sk-fake-coevolve-tau2-"), "base": args.get("api_base") == "http://127.0.0.1:9"}

    monkeypatch.delenv("COEVOLVE_TAU2_USER_ARGS")  # the actor gets it from its job, not from this process
    got = ray.get(ray.remote(probe).options(num_cpus=0, runtime_env={"env_vars": env}).remote())
    assert got == {"key": True, "base": True}
    session = Path(ray._private.worker._global_node.get_session_dir_path())
    leaks = [str(p) for p in session.rglob("*") if p.is_file() and not p.is_socket() and key.encode() in p.read_bytes()]
    assert leaks == [], "a key is in Ray's session files"


class _Hostile:
    """A model that tries to exfiltrate secrets through the refactor family's own tools."""

    def __init__(self, secrets_file: Path):
        probe = "\n".join([
            "import os, glob",
            "def test_leak():",
            "    out = ['ENV %r' % dict(os.environ)]",
            f"    paths = ['/proc/self/environ', '/proc/1/environ', os.path.expanduser('~/.ray/auth_token'), '/root/.ray/auth_token', {str(secrets_file)!r}]",
            "    paths += glob.glob('/proc/*/environ') + glob.glob('/proc/*/cmdline')",
            "    for p in paths:",
            "        try:",
            "            out.append('READ %s %r' % (p, open(p, 'rb').read()[:300]))",
            "        except Exception as e:",
            "            out.append('NOPE %s %s' % (p, type(e).__name__))",
            "    assert False, ' | '.join(out)",
            "",
        ])
        self.script = [
            ("write_file", {"path": "tests/test_leak.py", "content": probe}),
            ("run_tests", {"path": "tests/test_leak.py"}),
            ("run_tests", {}),
            ("finish", {}),
        ]
        self.turn = 0

    async def acomplete(self, model, messages, tools, *, seed):
        name, args = self.script[min(self.turn, len(self.script) - 1)]
        self.turn += 1
        call = {"id": f"c{self.turn}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        return Completion({"role": "assistant", "content": "", "tool_calls": [call]}, 10, 5)


def test_hostile_agent_on_the_refactor_family_gets_no_secret_back(secrets):
    from coevolve.cluster.runtime import token_path
    from coevolve.services.secrets import load_secrets

    load_secrets()
    assert os.environ["ANTHROPIC_API_KEY"] == FILE_KEY and os.environ["GEMINI_API_KEY"] == ENV_KEY
    fam = get_family("refactor")
    traj = asyncio.run(Executor(_Hostile(secrets)).rollout(fam.generate("val", 1)[0], fam.baseline_harness(), "hostile/model"))
    observations = "\n".join(r for t in traj.turns for r in t.tool_results)
    assert "test_leak" in observations and "NOPE /root/.ray/auth_token" in observations, observations[-3000:]
    blob = encode(traj) + json.dumps([m for m in traj.messages], default=str).encode()
    assert _hits(blob) == []
    try:
        token = token_path().read_text().strip()
    except OSError:
        token = ""
    if token:
        assert token.encode() not in blob, "the Ray token came back"


# ------------------------------------------------------------------------------ the CLI, end to end
def _coevolve(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-c", "import sys; from coevolve.cli.app import app; sys.exit(app(prog_name='coevolve'))"]
    return subprocess.run([*cmd, *args], check=False, capture_output=True, text=True, timeout=1500, cwd=REPO, env=env)


def _scan(folder: Path) -> list[str]:
    found = []
    for p in folder.rglob("*"):
        if p.is_file() and not p.is_symlink():
            try:
                data = p.read_bytes()
            except OSError:
                continue
            found += [f"{p}: {k[:24]}..." for k in _hits(data)]
    return found


@pytest.mark.slow
def test_eval_evolve_and_run_write_no_key_anywhere(secrets, tmp_path):
    from coevolve.store.store import HarnessStore

    ray_tmp = Path(tempfile.mkdtemp(prefix="cvs-", dir="/tmp"))  # short: Ray's socket paths must fit
    try:
        store = tmp_path / "store"
        env = {**os.environ, "RAY_TMPDIR": str(ray_tmp), "RAY_USAGE_STATS_ENABLED": "0", "COEVOLVE_LOG_LEVEL": "info",
               "COEVOLVE_TAU2_USER_ARGS": json.dumps({"api_key": ARGS_KEY, "temperature": 0.0})}
        runs = [
            _coevolve(["eval", "--family", "all", "--n", "2", "--model", "synthetic/weak", "--workers", "2",
                       "--store", str(store), "--json"], env),
            _coevolve(["evolve", "--family", "refactor", "--budget-rollouts", "60", "--train-batch", "4", "--val-n", "4",
                       "--val-seeds", "1", "--budget-iterations", "2", "--workers", "2", "--store", str(store), "--json"], env),
            _coevolve(["run", "local", "families=[iot]", "evolve.rollouts=60", "evolve.val_n=4", "evolve.train_batch=4",
                       "budget.cycles=1", "data.rows=6", "data.samples=1", "repeats=1", "--store", str(store), "--json"], env),
        ]
        for r in runs:
            assert r.returncode == 0, r.stderr[-3000:]
        assert _hits(json.dumps([[r.stdout, r.stderr] for r in runs])) == []
        assert _scan(store) == []
        assert _scan(ray_tmp) == [], "a key is in Ray's session files (logs, runtime_env records)"
        s = HarnessStore(store, create=False)  # decoded too: nothing is hidden by an encoding
        decoded = [s.get_trajectories(run.run_id) for run in s.list_runs()]
        payload = json.dumps([[run.config, run.result] for run in s.list_runs()], default=str).encode()
        payload += b"".join(encode(t) for batch in decoded for t in batch)
        assert sum(len(b) for b in decoded) > 0 and _hits(payload) == []
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
