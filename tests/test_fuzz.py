"""Bad input, fuzzed (hypothesis): every parser of outside input gives its own error or a valid value,
never another exception.

- the serve config loader with `key=value` overrides: `ServingError` or a `ServeConfig`;
- `coevolve eval` arguments through typer's CliRunner (the run itself stubbed: validation is under
  test): exit 0 or 2, never a traceback;
- harness edits (`edit_from_json` + `apply_edit`): `EditError` or a valid harness;
- judge and expert answers (`Judge`, `ExpertRewriter` with a `complete` returning fuzzed text and tool
  calls): never raise; an unusable answer is recorded as unknown;
- training rows (`load_rows` on fuzzed JSONL bytes): `TrainingError` or rows.

How many cases each test tries, and whether they are random, is the hypothesis profile's choice
(tests/conftest.py). Each test counts the cases it tried; with `-s` the counts are printed at the end
of the module (`COEVOLVE_FUZZ_COUNTS=<file>` also writes them as JSON).
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from collections import Counter
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from coevolve.agents.executor import Executor
from coevolve.codec import decode, encode
from coevolve.edits import HOOK_KINDS, EditError, apply_edit, edit_from_json, validate_harness
from coevolve.llm.contract import Completion
from coevolve.services.gateway import Gateway
from coevolve.tasks import get_family
from tests.rollouts import FunctionClient

COUNTS: Counter[str] = Counter()
# The number of cases, and whether they are drawn at random, come from the loaded hypothesis profile
# (tests/conftest.py: `ci`, derandomised, 60 cases, in `make test`; `slow`, random, 300, `make test-slow`).
FUZZ = settings(deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
FAM = get_family("iot")


@pytest.fixture(scope="module", autouse=True)
def _report_counts():
    yield
    print(f"\nfuzz cases tried: {dict(COUNTS)} total {sum(COUNTS.values())}")
    out = os.environ.get("COEVOLVE_FUZZ_COUNTS")
    if out:
        Path(out).write_text(json.dumps({**COUNTS, "total": sum(COUNTS.values())}, sort_keys=True))


# ------------------------------------------------------------------------------------ strategies
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
)
json_values = st.recursive(
    scalars, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=12), kids, max_size=4), max_leaves=20
)
junk_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=60)


# ------------------------------------------------------------------------------ serve config loader
SERVE_KEYS = ["name", "host", "port", "models", "models.0", "models.0.source", "models.0.model_id", "models.0.engine",
              "models.0.autoscaling.min_replicas", "models.1.source", "adapters_dir", "ready_timeout_s", "models.x",
              "port.x", "", ".", "models..source", "models.-1.lora", "models.99.source"]
serve_yaml = st.one_of(
    st.builds(lambda d: yaml.safe_dump(d), json_values.filter(lambda v: not isinstance(v, float))),
    st.just("host: 127.0.0.1\nmodels:\n  - model_id: tiny\n    source: /m\n"),
    st.just("- a\n- b\n"),
    junk_text,
    st.binary(max_size=60).map(lambda b: b.decode("latin-1")),
)
overrides = st.lists(
    st.one_of(
        st.builds(lambda k, v: f"{k}={v}", st.sampled_from(SERVE_KEYS), st.one_of(junk_text, st.sampled_from(["[", "{a: [", "0", "-1", "8000", "[1, 2]", "{}", "null", "&a [*a]"]))),
        junk_text,
    ),
    max_size=4,
)


@FUZZ
@given(text=serve_yaml, raw=st.one_of(st.none(), st.binary(max_size=40)), items=overrides)
def test_serve_config_loader_gives_a_config_or_one_serving_error(text, raw, items):
    from coevolve.services.serving.app import ServeConfig, ServingError, load_serve_config

    COUNTS["serve_config"] += 1
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "serve.yaml"
        p.write_bytes(raw if raw is not None else text.encode("utf-8", "surrogatepass"))
        try:
            cfg = load_serve_config(p, items)
        except ServingError as e:
            assert "\n" not in str(e).strip() or str(e).count("\n") < 3
            return
        assert isinstance(cfg, ServeConfig)


# ---------------------------------------------------------------------------------- eval arguments
EVAL_OPTS = {
    "--family": st.one_of(st.sampled_from(["iot", "payroll", "all", "tau2-retail", "nosuch", ""]), junk_text),
    "--split": st.sampled_from(["val", "test", "train", "nope", ""]),
    "--n": st.one_of(st.integers(-5, 60), st.integers(), st.sampled_from(["x", "1e3", "", "0x10"])),
    "--harness": st.one_of(st.sampled_from(["baseline", "evolved", "iot:baseline", "abc123"]), junk_text),
    "--model": st.one_of(st.sampled_from(["synthetic/weak", "synthetic/expert,synthetic/weak", "synthetic/nope",
                                          "vllm/tiny", "vllm/tiny@a1", "synthetic/weak@missing", "nosuchprovider/x",
                                          "weak", "/", ",", "synthetic/", ""]), junk_text),
    "--repeats": st.one_of(st.integers(-3, 5), st.integers()),
    "--workers": st.one_of(st.integers(-3, 8), st.integers(max_value=10**6)),
    "--seed": st.one_of(st.integers(), st.integers(min_value=2**62, max_value=2**66), st.integers(max_value=-(2**62))),
    "--address": st.one_of(st.none(), st.just("127.0.0.1:1")),
}


@pytest.fixture()
def stub_run(monkeypatch):
    """Validation is what is fuzzed: the run itself (Ray, rollouts, the store) is stubbed."""
    import coevolve.cli.display
    import coevolve.jobs
    monkeypatch.setattr(coevolve.jobs, "run_eval", lambda plan, progress=True: [])
    monkeypatch.setattr(coevolve.jobs, "reference_result", lambda *a: {"family": a[0], "model": "reference"})
    monkeypatch.setattr(coevolve.cli.display, "eval_table", lambda results: None)
    monkeypatch.setattr(coevolve.cli.display, "suite_table", lambda rows: None)
    monkeypatch.delenv("COEVOLVE_SERVE_URL", raising=False)


@FUZZ
@given(data=st.data())
def test_eval_arguments_exit_0_or_2_and_never_a_traceback(stub_run, data):
    from typer.testing import CliRunner

    from coevolve.cli.app import app

    COUNTS["eval_args"] += 1
    args = ["eval"]
    for opt in data.draw(st.lists(st.sampled_from(sorted(EVAL_OPTS)), max_size=5, unique=True)):
        value = data.draw(EVAL_OPTS[opt])
        if value is not None:
            args += [opt, str(value)]
    args += data.draw(st.lists(st.sampled_from(["--json", "--reference", "--bogus", "extra"]), max_size=2, unique=True))
    with tempfile.TemporaryDirectory() as d:
        store = Path(d) / "store"
        result = CliRunner().invoke(app, [*args, "--store", str(store)])
        out = result.output
        assert result.exit_code in (0, 2), (args, result.exit_code, out[-2000:], result.exception)
        assert result.exception is None or isinstance(result.exception, SystemExit), (args, repr(result.exception))
        assert "Traceback" not in out, (args, out[-2000:])
        assert not store.exists(), f"{args} wrote {store}"  # validation writes nothing (the run is stubbed)


# ------------------------------------------------------------------------------------ harness edits
OP_FIELDS = {
    "set_section": ["name", "text"], "append_section": ["name", "text"], "remove_section": ["name"],
    "alter_tool": ["name", "description", "parameters"], "remove_tool": ["name"],
    "remove_hook": ["event", "kind"], "set_max_turns": ["max_turns"],
    "add_tool": ["name", "description", "parameters", "impl"], "add_hook": ["event", "kind", "params"],
    "set_context_policy": ["strategy", "token_budget", "keep_last"], "add_recipe": ["name", "text"],
}
BASE = FAM.baseline_harness()
field_values = st.one_of(
    json_values,
    st.sampled_from([s.name for s in BASE.system_prompt] + [t.name for t in BASE.tools] + sorted(HOOK_KINDS)
                    + ["before_call", "on_turn", "on_finish", "keep-all", "truncate-middle", "summarise", "pin-notes"]),
    st.integers(-10, 300),
    st.just({"type": "object", "properties": {}}),
)


@st.composite
def edit_json(draw):
    ops = []
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.one_of(st.sampled_from(sorted(OP_FIELDS)), st.text(max_size=8)))
        op = {"op": kind}
        for f in OP_FIELDS.get(kind, []):
            if draw(st.integers(0, 5)):  # usually present
                op[f] = draw(field_values)
        op.update(draw(st.dictionaries(st.text(max_size=6), json_values, max_size=2)))
        ops.append(draw(st.one_of(st.just(op), json_values)) if draw(st.integers(0, 9)) == 0 else op)
    obj = {"ops": ops, "rationale": draw(st.one_of(st.text(max_size=20), json_values))}
    return draw(st.one_of(st.just(obj), json_values)) if draw(st.integers(0, 19)) == 0 else obj


# The two crashes hypothesis found (issue 23), tried on every run whatever the profile draws.
CRASH_EXAMPLES = [
    {"ops": [{"op": "add_tool", "name": {"x": 1}, "description": "d", "parameters": {"type": "object"}}]},
    {"ops": [{"op": "add_recipe", "name": {"x": 1}}]},
]


@FUZZ
@given(obj=edit_json())
@example(obj=CRASH_EXAMPLES[0])
@example(obj=CRASH_EXAMPLES[1])
def test_harness_edits_give_an_edit_error_or_a_valid_harness(obj):
    COUNTS["harness_edits"] += 1
    try:
        edit = edit_from_json(obj)
        new = apply_edit(BASE, edit)
    except EditError:
        return
    validate_harness(new)
    assert new != BASE and decode(encode(new)) == new and len(new.id) == 64


@FUZZ
@given(obj=edit_json(), noise=st.tuples(junk_text, junk_text), raw=st.one_of(st.none(), junk_text))
@example(obj=CRASH_EXAMPLES[0], noise=("", ""), raw=None)
@example(obj=CRASH_EXAMPLES[1], noise=("", ""), raw=None)
def test_proposer_answers_give_proposals_never_an_exception(obj, noise, raw):
    from coevolve.agents.meta.proposer import parse_response

    COUNTS["proposer_answers"] += 1
    text = raw if raw is not None else f"{noise[0]}{json.dumps({'edits': [obj]}, default=str, allow_nan=True)}{noise[1]}"
    for p in parse_response(text, BASE):
        assert (p.error is None) == (p.candidate is not None)
        if p.candidate is not None:
            validate_harness(p.candidate)


# --------------------------------------------------------------------------- judge and expert answers
@pytest.fixture(scope="module")
def failed():
    from coevolve.agents.judge import Judge  # noqa: F401 - import check

    for inst in FAM.generate("val", 20):
        t = asyncio.run(Executor(Gateway()).rollout(inst, BASE, "synthetic/weak", 0))
        if not t.passed and t.error != "infra" and len(t.turns) > 1:
            return t
    pytest.skip("no failed rollout to judge")


answer_objects = st.one_of(
    json_values,
    st.fixed_dictionaries({}, optional={"turn": st.one_of(st.integers(-3, 50), scalars), "reason": scalars,
                                        "score": st.one_of(st.floats(), scalars), "valid": scalars, "why": scalars}),
    st.fixed_dictionaries({"candidates": st.one_of(json_values, st.lists(
        st.fixed_dictionaries({}, optional={"strategy": scalars, "tool_call": st.one_of(json_values, st.fixed_dictionaries(
            {}, optional={"name": st.one_of(st.sampled_from(["list_sensors", "finish"]), scalars),
                          "arguments": st.one_of(json_values, st.text(max_size=30))}))}), max_size=4))}),
)
answer_texts = st.one_of(
    junk_text,
    answer_objects.map(lambda o: json.dumps(o, default=str, allow_nan=True)),
    st.tuples(junk_text, answer_objects, junk_text).map(lambda t: f"{t[0]}```json\n{json.dumps(t[1], allow_nan=True)}\n```{t[2]}"),
    st.just("{" * 3000 + "}" * 3000),
    st.just('{"turn": 1' + "0" * 5000 + ', "reason": "x"}'),
)
tool_calls = st.lists(
    st.fixed_dictionaries({"id": st.text(max_size=5), "type": st.just("function"), "function": st.fixed_dictionaries(
        {"name": st.one_of(st.sampled_from(["search_handbook", "read_handbook"]), st.text(max_size=10)),
         "arguments": st.one_of(st.text(max_size=30), answer_objects.map(lambda o: json.dumps(o, default=str)),
                                st.just('{"query": "sensor", "k": 1e400}'), st.just('{"section": 5}'))})}),
    max_size=2,
)


def _fake_complete(data):
    def complete(model, messages, tools, seed):
        msg = {"role": "assistant", "content": data.draw(st.one_of(answer_texts, st.none()))}
        if tools and data.draw(st.booleans()):
            msg["tool_calls"] = data.draw(tool_calls)
        return Completion(msg, 10, 5)

    return complete


@FUZZ
@given(data=st.data())
def test_judge_answers_never_raise_and_unusable_ones_are_unknown(failed, data):
    from coevolve.agents.judge import UNKNOWN, Judge, RoleUsage

    COUNTS["judge_answers"] += 1
    judge = Judge("fuzz/judge", FunctionClient(_fake_complete(data)))
    used = RoleUsage()
    locus = judge.locate(failed, usage=used)
    assert 0 <= locus.turn_index < len(failed.turns)
    if used.unparseable == judge.retries + 1:
        assert locus.reason.startswith(UNKNOWN)
    candidate = data.draw(st.one_of(json_values, st.just({"strategy": "x", "tool_call": {"name": "finish", "arguments": {}}})))
    if not isinstance(candidate, dict):
        candidate = {"tool_call": candidate}
    scored = judge.score(failed, locus, candidate, usage=used)
    assert 0.0 <= scored["score"] <= 1.0 and isinstance(scored["why"], str)


@FUZZ
@given(data=st.data())
def test_expert_answers_never_raise_and_unusable_ones_are_unknown(failed, data):
    from coevolve.agents.expert import ExpertRewriter
    from coevolve.agents.judge import RoleUsage

    COUNTS["expert_answers"] += 1
    expert = ExpertRewriter("fuzz/expert", FunctionClient(_fake_complete(data)), FAM.handbook)
    used = RoleUsage()
    k = data.draw(st.integers(1, 4))
    out = expert.rewrite(failed, _locus(failed), k, usage=used)
    assert len(out) == k
    for c in out:
        assert ("error" in c and c["error"].startswith("unknown")) or (
            isinstance(c["strategy"], str) and isinstance(c["tool_call"]["name"], str) and isinstance(c["tool_call"]["arguments"], dict)
        )


@pytest.mark.parametrize("args", ['{"query": "sensor", "k": 1e400}', '{"query": "sensor", "k": "many"}', '{"query": 5}',
                                  '{"section": 5}', '{"k": 1' + "0" * 5000 + "}", "[" * 5000 + "]" * 5000, "null"])
def test_bad_handbook_tool_arguments_are_error_observations(args):
    from coevolve.agents.handbook_tools import run_handbook_tool

    for name in ("search_handbook", "read_handbook"):
        out = run_handbook_tool(FAM.handbook, name, args)
        assert isinstance(out, str)


def _locus(traj):
    from coevolve.values import FailureLocus

    return FailureLocus(traj.id, len(traj.turns) - 1, "fuzz")


# ------------------------------------------------------------------------------------ training rows
message = st.fixed_dictionaries(
    {"role": st.one_of(st.sampled_from(["system", "user", "assistant", "tool"]), scalars)},
    optional={"content": scalars, "train": scalars, "tool_calls": st.one_of(json_values, st.lists(json_values, max_size=2))},
)
row = st.one_of(
    json_values,
    st.fixed_dictionaries({"messages": st.one_of(st.lists(message, max_size=4), json_values)},
                          optional={"tools": json_values, "provenance": json_values}),
)
jsonl = st.one_of(
    st.lists(row, max_size=4).map(lambda rows: "\n".join(json.dumps(r, default=str, allow_nan=True) for r in rows).encode()),
    st.binary(max_size=200),
    st.lists(row, max_size=3).map(lambda rows: ("\n".join(json.dumps(r, default=str) for r in rows)).encode("utf-16")),
    st.just(b'{"messages": [{"role": "assistant", "train": true, "content": "\xff\xfe"}]}'),
    st.just(b'{"messages": [{"role": "assistant", "train": true}], "provenance": [1]}'),
    st.just(b'{"messages": [{"role": "assistant", "train": true}], "n": 1' + b"0" * 5000 + b"}"),
    st.just(b"[" * 5000 + b"]" * 5000),
)


@FUZZ
@given(data=jsonl)
def test_training_rows_give_rows_or_one_training_error(data):
    from coevolve.services.training import TrainingError, dataset_hash, load_rows
    from coevolve.values import TrainingRow

    COUNTS["training_rows"] += 1
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "rows.jsonl"
        p.write_bytes(data)
        try:
            rows = load_rows(p)
        except TrainingError as e:
            assert str(e)
            return
    assert rows and all(isinstance(r, TrainingRow) and isinstance(r.provenance, dict) for r in rows)
    dataset_hash(rows)


# ------------------------------------------------------------------------- bad input, case by case
def _cli(args, **kw):
    from typer.testing import CliRunner

    from coevolve.cli.app import app

    return CliRunner().invoke(app, args, **kw)


def _one_error_line(result, *needles):
    assert result.exit_code == 2, (result.exit_code, result.output[-2000:], result.exception)
    lines = [x for x in result.output.splitlines() if x.strip()]
    errors = [x for x in lines if x.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in result.output, result.output[-2000:]
    for n in needles:
        assert n in errors[0], errors[0]
    return errors[0]


def test_a_seed_beyond_64_bits_is_refused_before_anything_is_written(tmp_path, stub_run):
    for cmd in (["eval", "--n", "2"], ["evolve"]):
        r = _cli([*cmd, "--seed", str(2**64), "--store", str(tmp_path / "s")])
        _one_error_line(r, "--seed must be an integer")
        assert not (tmp_path / "s").exists()
    _one_error_line(_cli(["eval", "--n", "2", "--seed", str(2**63 - 10), "--repeats", "50", "--store", str(tmp_path / "s")]), "--seed")


def test_more_workers_than_the_embedded_ray_can_place_is_one_error(tmp_path, stub_run):
    r = _cli(["eval", "--n", "2", "--workers", "1000", "--store", str(tmp_path / "s")])
    _one_error_line(r, "--workers 1000 asks for 500 CPUs")
    assert not (tmp_path / "s").exists()


def test_tasks_show_refuses_an_index_outside_the_split():
    _one_error_line(_cli(["tasks", "show", "iot", "999"]), "val split of iot has instances 0..49")
    _one_error_line(_cli(["tasks", "show", "iot", "iot/nope/1"]), "unknown split")
    assert _cli(["tasks", "show", "iot", "3"]).exit_code == 0


@pytest.fixture()
def fake_server(monkeypatch):
    """A server that lists models as vLLM does (base ids, adapters as model:adapter)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            body = json.dumps({"data": [{"id": "tiny"}, {"id": "tiny:a1"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_vllm_models_no_server_serves_are_refused_naming_what_is_served(tmp_path, stub_run, fake_server, monkeypatch):
    store = tmp_path / "s"
    _one_error_line(_cli(["eval", "--n", "2", "--model", "vllm/tiny", "--store", str(store)]), "no vLLM server known")
    monkeypatch.setenv("COEVOLVE_SERVE_URL", "http://127.0.0.1:9/v1")
    _one_error_line(_cli(["eval", "--n", "2", "--model", "vllm/tiny", "--store", str(store)]), "no vLLM server answers")
    monkeypatch.setenv("COEVOLVE_SERVE_URL", fake_server)
    _one_error_line(_cli(["eval", "--n", "2", "--model", "vllm/qwen", "--store", str(store)]), "'qwen' is not served", "served: tiny")
    _one_error_line(_cli(["eval", "--n", "2", "--model", "vllm/tiny@zz", "--store", str(store)]), "no adapter 'zz'")
    assert not store.exists()
    assert _cli(["eval", "--n", "2", "--model", "vllm/tiny@a1", "--store", str(store), "--json"]).exit_code == 0
    assert _cli(["eval", "--n", "2", "--model", "vllm/tiny", "--store", str(store), "--json"]).exit_code == 0


def test_bad_serve_configs_and_overrides_are_one_error(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("models:\n  - model_id: tiny\n    source: /nonexistent\n")
    cases = {"list.yaml": (b"- a\n- b\n", [], "must be a mapping"),
             "bin.yaml": (bytes(range(256)), [], "not text"),
             "bad.yaml": (b"models: [\n", [], "not valid YAML")}
    for name, (data, sets, needle) in cases.items():
        (tmp_path / name).write_bytes(data)
        _one_error_line(_cli(["serve", "--config", str(tmp_path / name), "--store", str(tmp_path / "s")]), needle)
    for item, needle in (("port=[", "not valid YAML"), ("models.x.source=/m", "does not fit"), ("=1", "not key=value"),
                         ("port", "not key=value"), ("models..source=1", "not key=value"), ("port=-5", "port")):
        _one_error_line(_cli(["serve", "--config", str(good), "-s", item, "--store", str(tmp_path / "s")]), needle)
    assert not (tmp_path / "s").exists()


def test_bad_train_configs_overrides_and_rows_are_one_error(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"},
                                             {"role": "assistant", "content": "ok", "train": True}]}) + "\n")
    store = tmp_path / "s"
    base = ["train", "--rows", str(rows), "--base", "synthetic/weak", "--out", "a1", "--backend", "synthetic", "--store", str(store)]
    (tmp_path / "list.yaml").write_text("- lr\n- 3\n")
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00garbage\x80")
    for extra, needle in ((["--config", str(tmp_path / "list.yaml")], "must be a mapping"),
                          (["--config", str(tmp_path / "bin.yaml")], "not text"),
                          (["lr=["], "not valid YAML"), (["=3"], "not key=value"), (["lr"], "not key=value"),
                          (["bogus=1"], "train config: bogus"), (["--seed", str(2**70)], "--seed")):
        _one_error_line(_cli([*base, *extra]), needle)
    bad_rows = {b"\xff\xfe{}\n": "not UTF-8",
                json.dumps({"messages": [{"role": "assistant", "train": True}], "provenance": [1]}).encode(): "'provenance' must be an object",
                json.dumps({"messages": [{"role": "assistant", "train": True}], "provenance": "x"}).encode(): "'provenance' must be an object"}
    for data, needle in bad_rows.items():
        rows.write_bytes(data)
        _one_error_line(_cli(base), needle)
    assert not store.exists()


def test_pool_actors_the_cluster_cannot_place_fail_with_what_was_asked(ray_session):
    import ray

    from coevolve.services.pools.base import ActorsNotReady
    from coevolve.services.pools.rollouts import RolloutPool

    free = ray.available_resources().get("CPU", 0)
    with pytest.raises(ActorsNotReady, match=r"asked for 3 x 1 CPU = 3 CPUs; the cluster has 2 CPUs, .* Use fewer workers"):
        RolloutPool(3, num_cpus=1.0, ready_timeout_s=5)
    import time

    deadline = time.monotonic() + 30
    while ray.available_resources().get("CPU", 0) < free and time.monotonic() < deadline:
        time.sleep(0.5)
    assert ray.available_resources().get("CPU", 0) >= free  # the actors that did start were killed
