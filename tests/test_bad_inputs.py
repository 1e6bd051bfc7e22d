"""Every bad invocation of bench/bad_inputs.py's table is clean (issue 24.7): exit status 2, one `error:`
line (the last on stderr), no traceback or usage box, nothing written, refused before any work.

The table lives in the bench, which runs each case as its own `coevolve` process; here every case runs
in-process through typer's CliRunner (Ray refused: reaching it fails the case), and a few of them as
real processes. A new command must come with bad inputs in the table."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import litellm  # (imported here, not under a case's timeout: it takes ~10 s on a loaded machine)
import pytest
import typer.main
import typer.testing
from typer.testing import CliRunner

from coevolve.cli.app import app
from coevolve.store.store import HarnessStore

_spec = importlib.util.spec_from_file_location("bad_inputs", Path(__file__).resolve().parent.parent / "bench" / "bad_inputs.py")
bench = importlib.util.module_from_spec(_spec)
sys.modules["bad_inputs"] = bench  # dataclasses look their module up by name
_spec.loader.exec_module(bench)

runner = CliRunner()


@pytest.fixture()
def guarded(monkeypatch, tmp_path):
    """No case may reach Ray (start it, attach to it, or start a head); a token is at hand, so that an
    address is refused for what it is; COEVOLVE_STORE, which commands set, is restored afterwards."""
    import ray

    import coevolve.cluster.head
    import coevolve.cluster.runtime
    def refuse(*args, **kwargs):
        raise AssertionError("bad input reached Ray")

    for target, name in ((coevolve.cluster.runtime, "start_ray"), (coevolve.cluster.head, "ensure_local_head"), (ray, "init")):
        monkeypatch.setattr(target, name, refuse)
    token = tmp_path / "ray-token"
    token.write_text("t" * 64)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(token))
    monkeypatch.setenv("COEVOLVE_STORE", "unset")
    monkeypatch.delenv("COEVOLVE_STORE")
    opened: list[HarnessStore] = []
    init = HarnessStore.__init__

    def tracked(self, *args, **kwargs):
        opened.append(self)
        init(self, *args, **kwargs)

    monkeypatch.setattr(HarnessStore, "__init__", tracked)
    command = typer.main.get_command(app)  # built once (typer's runner builds it per call: ~0.1 s)
    monkeypatch.setattr(typer.testing, "_get_command", lambda _app: command)
    return monkeypatch, opened


def run_in_process(case: bench.Case, folder: Path, guarded: tuple[pytest.MonkeyPatch, list]) -> bench.Outcome:
    monkeypatch, opened = guarded
    folder.mkdir()
    prepared = bench.prepare(case, folder)
    monkeypatch.chdir(folder)  # a default `.coevolve` would land in the case's folder, and be seen
    for k, v in prepared.env.items():
        monkeypatch.setenv(k, v)
    opened.clear()
    started = time.monotonic()
    r = runner.invoke(app, prepared.argv, catch_exceptions=True)
    seconds = time.monotonic() - started
    for st in opened:  # what the end of a process does to a store it left open (sqlite drops its -wal and -shm)
        st.close()
    stderr = r.stderr
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        stderr += f"\nTraceback (in-process): {type(r.exception).__name__}: {r.exception}"
    try:
        return bench.judge(prepared, r.exit_code, r.stdout, stderr, seconds)
    finally:
        (folder / "store").chmod(0o755) if (folder / "store").is_dir() else None


def test_the_table_covers_every_command_with_at_least_93_distinct_cases():
    names = [c.name for c in bench.CASES]
    assert len(names) >= 93 and len(set(names)) == len(names)
    covered = {bench.command_path(c.argv) for c in bench.CASES}
    missing = sorted(set(bench.all_commands()) - covered)
    assert not missing, f"commands without a bad input in bench/bad_inputs.py: {missing}"
    assert {c.setup for c in bench.CASES} <= set(bench.SETUPS) and len({c.setup for c in bench.CASES}) == len(bench.SETUPS)
    # the cases issue 24.7 names
    argvs = [" ".join(c.argv) for c in bench.CASES]
    for named in ("budget.cycles=99999999999999999999999999", "--address 127.0.0.1:1", "--address ray://127.0.0.1:1",
                  "--resume ", "adapt --backend nosuch", "adapt lr=abc", "adapt =x", "run --seed 3", "eval --n abc",
                  "{edit_1e400}", "{nested_json}"):
        assert any(named in a for a in argvs), named
    assert any(c.setup == "eval_done" and c.argv[0] == "stop" for c in bench.CASES)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("case", bench.CASES, ids=[c.name for c in bench.CASES])
def test_a_case_is_clean_in_process(guarded, tmp_path, case):
    outcome = run_in_process(case, tmp_path / "case", guarded)
    assert outcome.clean, outcome.line()


# As real processes: what only a process shows (a traceback Python prints at exit, the real start-up,
# the address probe's seconds), for one case of each kind of check.
SUBPROCESS = ("run-store-is-a-file", "eval-address-unreachable", "monitor-ray-client-unreachable", "stop-a-finished-eval-run",
              "harness-apply-nested", "adapt-backend-unknown", "run-cycles-1e26", "eval-n-abc")


@pytest.fixture(scope="module")
def load_scale():
    """The bench's bound stretch for this machine now (1 on a quiet one)."""
    return bench.bound_scale(bench.baseline_s())


@pytest.mark.parametrize("name", SUBPROCESS)
def test_a_case_is_clean_as_a_process(tmp_path, name, load_scale):
    case = next(c for c in bench.CASES if c.name == name)
    token = tmp_path / "ray-token"
    token.write_text("t" * 64)
    outcome = bench.run_subprocess(case, token, load_scale)
    assert outcome.clean, f"{outcome.line()} (bounds x {load_scale:.2f} for the machine's load)"


def test_the_checks_fail_what_is_not_clean(tmp_path):
    """The judge is not a rubber stamp: a write, a traceback, a usage box, a second error line, a
    wrong status and a slow refusal each fail a case."""
    case = bench.Case("probe", ("eval",), setup="store", bound_s=1.0)
    prepared = bench.prepare(case, tmp_path)
    assert bench.judge(prepared, 2, "", "error: bad\n", 0.1).clean
    (tmp_path / "store" / "new").write_text("x")
    assert "wrote store/new" in bench.judge(prepared, 2, "", "error: bad\n", 0.1).problems
    (tmp_path / "store" / "new").unlink()
    for args, problem in (
        ((1, "", "error: bad\n", 0.1), "exit status 1"),
        ((2, "", "Traceback (most recent call last):\nerror: bad\n", 0.1), "a traceback"),
        ((2, "Usage: coevolve eval", "error: bad\n", 0.1), "a usage box"),
        ((2, "", "error: bad\nerror: worse\n", 0.1), "2 error: lines"),
        ((2, "", "error: bad\nand then this\n", 0.1), "last stderr line is not an error: line ('and then this')"),
        ((2, "", "error: bad\n", 3.0), "took 3.0s (bound 1s)"),
    ):
        assert problem in bench.judge(prepared, *args).problems, problem


def test_the_provider_names_read_from_litellm_s_source_are_litellm_s_provider_list():
    """A provider typo is refused without importing litellm (10+ CPU seconds): the names read from its
    enum's source are the ones it routes. Compared with the enum itself: `litellm.provider_list` also holds
    the custom providers registered at run time (the project's `coevolve_synthetic`, once a test has routed
    a synthetic call), which are no provider a user can name."""
    from litellm.types.utils import LlmProviders

    from coevolve.jobs import litellm_providers

    assert litellm_providers() == {p.value for p in LlmProviders}
    assert set(litellm_providers()) <= {str(getattr(p, "value", p)) for p in litellm.provider_list}
    assert {"openai", "anthropic", "gemini", "hosted_vllm"} <= litellm_providers()
