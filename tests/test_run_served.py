"""`coevolve run` with a profile whose models need a vLLM server refuses to start, in one error line
naming the command that starts the server, when none is known for the store or it does not answer: no
run that would end "done" with every rollout an infra failure."""

from __future__ import annotations

from typer.testing import CliRunner

from coevolve.cli.app import app


def run_cpu(tmp_path, monkeypatch, serve_url: str | None):
    if serve_url is None:
        monkeypatch.delenv("COEVOLVE_SERVE_URL", raising=False)
    else:
        monkeypatch.setenv("COEVOLVE_SERVE_URL", serve_url)
    store = tmp_path / "store"
    result = CliRunner().invoke(app, ["run", "cpu", "--store", str(store)])
    lines = [line for line in result.output.splitlines() if line.strip()]
    return result.exit_code, lines, store


def test_no_server_known_is_one_error_naming_the_serve_command(tmp_path, monkeypatch):
    code, lines, store = run_cpu(tmp_path, monkeypatch, None)
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: vllm/smollm2 needs a vLLM server")
    assert "coevolve serve --config deploy/serve/cpu-smollm2.yaml" in lines[0]
    assert not store.exists()


def test_a_server_that_does_not_answer_is_refused_too(tmp_path, monkeypatch):
    code, lines, store = run_cpu(tmp_path, monkeypatch, "http://127.0.0.1:9")
    assert code == 2 and len(lines) == 1 and "does not answer" in lines[0] and "coevolve serve" in lines[0]
    assert not store.exists()
