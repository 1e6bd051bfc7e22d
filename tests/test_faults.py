"""Endpoint faults (coevolve/llm/faults.py, the synthetic provider, coevolve/services/fault_proxy.py) and the gateway's
retries: injected faults are deterministic per (seed, request, attempt), every transport fault is
retried as infra, results under faults equal the fault-free results, what a model wrote is never
infra, and a full `coevolve evolve` under a 20% fault rate ends with the fault-free run's harness."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from coevolve.agents.executor import Executor
from coevolve.agents.local import LocalEvaluator
from coevolve.analysis.stats import pass_rate
from coevolve.llm.contract import Completion, ContextWindowExceeded, ModelUnavailable, RetryPolicy
from coevolve.llm.faults import KINDS, FaultSpec, FaultSpecError, count_faults
from coevolve.services.gateway import Gateway, infra_kind
from coevolve.tasks import get_family

FAM = get_family("iot")
QUICK = RetryPolicy(attempts=8, backoff_s=0.005, backoff_max_s=0.02, call_timeout_s=30)
SPEC_20 = "all=0.2,seed=11,latency_ms=20,timeout_ms=20"
REPO = Path(__file__).resolve().parent.parent


def _strip(trajs):
    """What a rollout produced (messages, outcome, error), without timings."""
    return [(t.messages, t.passed, t.error, t.outcome.score if t.outcome else None) for t in trajs]


# ------------------------------------------------------------------------------------ the spec
def test_fault_spec_parses_and_refuses_bad_items():
    s = FaultSpec.parse("latency=0.05,timeout=0.02,429=0.03,5xx=0.03,malformed=0.02,truncated=0.02,reset=0.02,seed=7")
    assert s.seed == 7 and abs(s.total - 0.19) < 1e-9 and set(s.rates) == set(KINDS)
    spread = FaultSpec.parse("all=0.14,latency_ms=5,timeout_ms=9")
    assert all(abs(spread.rates[k] - 0.02) < 1e-12 for k in KINDS) and spread.latency_s == 0.005 and spread.timeout_s == 0.009
    for bad, msg in (("boom=0.1", "unknown fault kind"), ("429", "key=value"), ("5xx=x", "not a number"),
                     ("all=1.5", "outside"), ("429=0.6,5xx=0.6", "over 1"), ("seed=1.5", "integer")):
        with pytest.raises(FaultSpecError, match=msg):
            FaultSpec.parse(bad)


def test_fault_draws_are_deterministic_per_request_and_attempt_and_match_the_rates():
    spec = FaultSpec.parse("latency=0.05,timeout=0.02,429=0.03,5xx=0.03,malformed=0.02,truncated=0.02,reset=0.02,seed=3")
    keys = [f"request-{i}" for i in range(20000)]
    first = [spec.pick(k, 0) for k in keys]
    assert first == [spec.pick(k, 0) for k in keys]  # same seed, same request, same attempt: same fault
    assert first != [spec.pick(k, 1) for k in keys]  # a retry draws afresh
    assert first != [FaultSpec.parse("all=0.19,seed=4").pick(k, 0) for k in keys]
    seen = Counter(k for k in first if k)
    for kind, rate in spec.rates.items():
        assert abs(seen[kind] / len(keys) - rate) < 0.006, (kind, seen[kind])


# -------------------------------------------------------------- the synthetic provider, in process
def _evaluate(jobs, monkeypatch, tmp_path, faults: str | None, name: str):
    if faults:
        monkeypatch.setenv("COEVOLVE_FAULTS", faults)
    else:
        monkeypatch.delenv("COEVOLVE_FAULTS", raising=False)
    log = tmp_path / name
    monkeypatch.setenv("COEVOLVE_FAULT_LOG", str(log))
    gateway = Gateway(retry=QUICK)
    trajs = LocalEvaluator(gateway).evaluate(jobs, "synthetic/weak")
    return trajs, count_faults(log), gateway.retries


def test_rollouts_under_a_20_percent_fault_rate_equal_the_fault_free_rollouts(monkeypatch, tmp_path):
    h = FAM.baseline_harness()
    jobs = [(i, h, s) for i in FAM.generate("val", 25) for s in (0, 1)]
    clean, none, _ = _evaluate(jobs, monkeypatch, tmp_path, None, "clean")
    faulted, faults, retries = _evaluate(jobs, monkeypatch, tmp_path, SPEC_20, "a")
    again, faults_again, _ = _evaluate(jobs, monkeypatch, tmp_path, SPEC_20, "b")
    assert not none
    assert set(faults) == set(KINDS), faults  # every kind was injected
    assert faults == faults_again  # the same seed sees the same faults
    assert retries == sum(n for k, n in faults.items() if k != "latency")  # every failure retried once
    assert not any(t.error == "infra" for t in faulted)  # no rollout lost
    assert _strip(faulted) == _strip(clean) == _strip(again)
    other, faults_other, _ = _evaluate(jobs, monkeypatch, tmp_path, "all=0.2,seed=12,latency_ms=20,timeout_ms=20", "c")
    assert faults_other != faults and _strip(other) == _strip(clean)


def test_a_call_that_outlasts_the_retries_is_an_infra_rollout_excluded_from_the_pass_rate(monkeypatch, tmp_path):
    monkeypatch.setenv("COEVOLVE_FAULTS", "5xx=1")  # every attempt fails
    inst = FAM.generate("val", 2)
    gateway = Gateway(retry=RetryPolicy(attempts=3, backoff_s=0.001, backoff_max_s=0.002))
    trajs = LocalEvaluator(gateway).evaluate([(i, FAM.baseline_harness(), 0) for i in inst], "synthetic/weak")
    assert [t.error for t in trajs] == ["infra", "infra"] and all(t.outcome is None for t in trajs)
    assert "after 3 attempts (5xx)" in trajs[0].error_detail
    rate = pass_rate(trajs)
    assert rate.infra == 2 and rate.instances == 0  # counted as infra, never as task failures
    assert gateway.retries == 2 * 2


def test_errors_a_retry_cannot_fix_are_not_retried():
    import litellm

    assert infra_kind(litellm.NotFoundError("no such model", llm_provider="openai", model="x")) is None
    assert infra_kind(litellm.AuthenticationError("bad key", llm_provider="openai", model="x")) is None
    assert infra_kind(litellm.BadRequestError("bad", llm_provider="openai", model="x")) is None
    assert infra_kind(litellm.RateLimitError("slow down", llm_provider="openai", model="x")) == "429"
    assert infra_kind(litellm.Timeout("late", model="x", llm_provider="openai")) == "timeout"
    assert infra_kind(litellm.InternalServerError("Expecting value: line 1", llm_provider="openai", model="x")) == "5xx"
    assert infra_kind(ConnectionResetError("reset")) == "connection"
    gateway = Gateway(retry=QUICK)
    with pytest.raises(ModelUnavailable, match="not retryable"):
        gateway.complete("synthetic/no-such-profile", [{"role": "user", "content": "hi"}], [])
    assert gateway.retries == 0


def test_a_context_window_overflow_ends_the_rollout_as_a_task_failure_not_infra():
    import litellm

    overflow = litellm.ContextWindowExceededError(
        "This model's maximum context length is 2048 tokens. However, you requested 2300 tokens", model="m", llm_provider="openai")
    gateway = Gateway(retry=QUICK)
    with pytest.raises(ContextWindowExceeded, match="maximum context length"):  # not retried: it would overflow again
        gateway.complete("openai/m", [{"role": "user", "content": "hi"}], [], mock_response=overflow)
    assert gateway.retries == 0

    class Rambler:  # writes prose, never a tool call, until its context is full
        calls = 0

        async def acomplete(self, model, messages, tools, *, seed):
            self.calls += 1
            if self.calls == 3:
                raise ContextWindowExceeded("model m failed after 1 attempt (not retryable): maximum context length")
            return Completion({"role": "assistant", "content": "Yes, everything checks."}, 900, 256)

    inst = FAM.generate("val", 1)[0]
    traj = asyncio.run(Executor(Rambler(), QUICK).rollout(inst, FAM.baseline_harness(), "openai/m"))
    assert traj.error == "task" and not traj.passed and len(traj.turns) == 2
    assert traj.error_detail.startswith("context window exceeded at turn 2")
    rate = pass_rate([traj])
    assert rate.infra == 0 and rate.instances == 1 and rate.pass_at_1 == 0.0  # counted, as a failure


class _Scripted:
    """A model whose first reply is a tool call it cut off itself (finish_reason length, say)."""

    def __init__(self, first: dict):
        self.first = first
        self.calls = 0

    async def acomplete(self, model, messages, tools, *, seed):
        self.calls += 1
        if self.calls == 1:
            return Completion(self.first, 10, 5)
        return Completion({"role": "assistant", "content": "",
                           "tool_calls": [{"id": "c2", "type": "function", "function": {"name": "finish", "arguments": "{}"}}]}, 10, 5)


def test_a_tool_call_the_model_truncated_is_an_error_observation_not_infra():
    cut = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": FAM.baseline_harness().tools[0].name, "arguments": '{"site": "pla'}}]}
    client = _Scripted(cut)
    traj = asyncio.run(Executor(client, QUICK).rollout(FAM.generate("val", 1)[0], FAM.baseline_harness(), "scripted/model"))
    assert traj.error != "infra" and client.calls >= 2
    assert traj.turns[0].tool_results[0].startswith("error: arguments are not valid JSON")


# -------------------------------------------------------------------------------- the fault proxy
class _SyntheticUpstream(BaseHTTPRequestHandler):
    """An OpenAI-compatible server for the synthetic models (a stand-in for any real server)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_GET(self):
        self._send({"object": "list", "data": [{"id": "weak", "object": "model"}]})

    def do_POST(self):
        from coevolve.testbed.respond import respond

        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        reply = respond(req["model"], req["messages"], req.get("tools") or [], seed=int(req.get("seed") or 0))
        m = reply.message
        self._send({
            "id": "chatcmpl-synthetic", "object": "chat.completion", "created": 0, "model": req["model"],
            "choices": [{"index": 0, "finish_reason": "tool_calls" if m.get("tool_calls") else "stop",
                         "message": {"role": "assistant", "content": m.get("content") or "", "tool_calls": m.get("tool_calls")}}],
            "usage": {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
                      "total_tokens": reply.prompt_tokens + reply.completion_tokens},
        })

    def _send(self, obj):
        body = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def upstream():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SyntheticUpstream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _rollouts_via(url: str, monkeypatch, jobs, retry=QUICK):
    monkeypatch.setenv("COEVOLVE_SERVE_URL", url)
    monkeypatch.delenv("COEVOLVE_FAULTS", raising=False)
    return LocalEvaluator(Gateway(retry=retry)).evaluate(jobs, "vllm/weak")


def test_each_proxy_fault_reaches_the_gateway_as_a_retryable_infra_failure(upstream, monkeypatch):
    from coevolve.services.fault_proxy import FaultProxy

    monkeypatch.delenv("COEVOLVE_FAULTS", raising=False)
    msgs = [{"role": "user", "content": "hello (Task id: iot/val/0)"}]
    for kind in KINDS:
        with FaultProxy(upstream, f"{kind}=1,latency_ms=10,timeout_ms=3000") as proxy:
            monkeypatch.setenv("COEVOLVE_SERVE_URL", proxy.url)
            gateway = Gateway(retry=RetryPolicy(attempts=2, backoff_s=0.001, call_timeout_s=1.0))
            if kind == "latency":
                assert gateway.complete("vllm/weak", msgs, []).message["role"] == "assistant"
                continue
            with pytest.raises(ModelUnavailable, match=r"after 2 attempts \((timeout|429|5xx|connection)\)"):
                gateway.complete("vllm/weak", msgs, [])
            assert proxy.injected == {kind: 2} and gateway.retries == 1


def test_rollouts_through_the_fault_proxy_equal_the_direct_rollouts(upstream, monkeypatch):
    from coevolve.services.fault_proxy import FaultProxy

    h = FAM.baseline_harness()
    jobs = [(i, h, 0) for i in FAM.generate("val", 8)]
    direct = _rollouts_via(upstream, monkeypatch, jobs)
    with FaultProxy(upstream, "all=0.3,seed=2,latency_ms=10,timeout_ms=200") as proxy:
        proxied = _rollouts_via(proxy.url, monkeypatch, jobs)
        injected = proxy.injected
    with FaultProxy(upstream, "all=0.3,seed=2,latency_ms=10,timeout_ms=200") as proxy:
        _rollouts_via(proxy.url, monkeypatch, jobs)
        assert proxy.injected == injected  # the proxy's faults are deterministic too
    assert sum(injected.values()) >= 10 and len(injected) >= 5, injected
    assert not any(t.error == "infra" for t in proxied)
    assert _strip(proxied) == _strip(direct)


def test_fault_proxy_command_line_refuses_a_bad_spec(capsys):
    from coevolve.services.fault_proxy import main

    assert main(["--upstream", "http://127.0.0.1:9", "--faults", "boom=1"]) == 2
    assert capsys.readouterr().err.startswith("error: unknown fault kind 'boom'")


# --------------------------------------------------------------------- the whole evolve, via the CLI
EVOLVE = ["evolve", "--family", "iot", "--model", "synthetic/weak", "--proposer", "synthetic/meta",
          "--budget-rollouts", "400", "--train-batch", "10", "--val-n", "20", "--seed", "3", "--workers", "1", "--json"]


def _coevolve(store: Path, env: dict[str, str]) -> tuple[dict, float]:
    cmd = [sys.executable, "-c", "import sys; from coevolve.cli.app import app; sys.exit(app(prog_name='coevolve'))"]
    started = time.perf_counter()
    proc = subprocess.run([*cmd, *EVOLVE, "--store", str(store)], check=False, capture_output=True, text=True, timeout=1200,
                          cwd=REPO, env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **env})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), time.perf_counter() - started


@pytest.mark.slow
def test_evolve_under_a_20_percent_fault_rate_ends_with_the_fault_free_harness(tmp_path):
    from coevolve.store.store import HarnessStore

    clean, clean_s = _coevolve(tmp_path / "clean", {"COEVOLVE_FAULTS": ""})
    log = tmp_path / "faults"
    env = {"COEVOLVE_FAULTS": SPEC_20, "COEVOLVE_FAULT_LOG": str(log),
           "COEVOLVE_RETRY": "attempts=8,backoff_s=0.005,backoff_max_s=0.02"}
    faulted, faulted_s = _coevolve(tmp_path / "faulted", env)
    injected = count_faults(log)
    store = HarnessStore(tmp_path / "faulted", create=False)
    trajs = store.get_trajectories(faulted["run_id"])
    summary = {"injected": dict(injected), "trajectories": len(trajs), "infra": sum(t.error == "infra" for t in trajs),
               "clean_s": round(clean_s, 1), "faulted_s": round(faulted_s, 1), "harness_equal": faulted["harness_id"] == clean["harness_id"]}
    print(json.dumps(summary))
    assert set(injected) == set(KINDS) and sum(injected.values()) > 500, injected
    assert summary["infra"] == 0 and len(trajs) == len(HarnessStore(tmp_path / "clean", create=False).get_trajectories(clean["run_id"]))
    for key in ("harness_id", "baseline_val", "evolved_val", "rollouts_used", "iterations", "accepted", "stop_reason", "test"):
        assert faulted[key] == clean[key], key
