"""The command line: eval end to end on the embedded Ray, harness commands, and bad input."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cluster.cli import app
from harness_store.store import HarnessStore

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def evaluated(ray_session, tmp_path_factory):
    store = tmp_path_factory.mktemp("cli") / "store"
    out = {}
    for model in ("synthetic/weak", "synthetic/expert"):
        r = invoke("eval", "--family", "iot", "--split", "val", "--n", 20, "--harness", "baseline",
                   "--model", model, "--workers", 2, "--store", store, "--json", "--seed", 1)
        assert r.exit_code == 0, r.output
        out[model] = json.loads(r.stdout.strip().splitlines()[-1])
    return store, out


def test_eval_json_and_store(evaluated):
    store, out = evaluated
    weak, expert = out["synthetic/weak"], out["synthetic/expert"]
    for res in (weak, expert):
        assert {"pass_rate", "n", "passed", "errors", "run_id"} <= set(res)
        assert res["n"] == 20
    assert expert["pass_rate"] > weak["pass_rate"]
    s = HarnessStore(store, create=False)
    run = s.get_run(weak["run_id"])
    assert run.status == "done" and run.result["passed"] == weak["passed"]
    trajs = s.get_trajectories(weak["run_id"])
    assert len(trajs) == 20 and sum(t.passed for t in trajs) == weak["passed"]
    assert s.resolve_harness("baseline", "iot").id == weak["harness_id"]


def test_eval_table_output(evaluated):
    store, _ = evaluated
    r = invoke("eval", "--family", "iot", "--n", 3, "--model", "synthetic/expert", "--json", "--store", store)
    assert r.exit_code == 0
    got = json.loads(r.stdout.strip().splitlines()[-1])
    r = invoke("eval", "--family", "iot", "--n", 3, "--model", "synthetic/expert", "--store", store)
    assert r.exit_code == 0
    lo, hi = got["ci95"]  # the table shows the figures the JSON holds
    assert "pass@1 [95% CI]" in r.stdout and f"{got['pass_at_1']:.1%} [{lo:.0%}, {hi:.0%}]" in r.stdout, r.stdout


def test_harness_commands(evaluated):
    store, out = evaluated
    hid = out["synthetic/weak"]["harness_id"]
    r = invoke("harness", "list", "--store", store, "--json")
    assert r.exit_code == 0 and [h["id"] for h in json.loads(r.stdout)] == [hid]
    r = invoke("harness", "show", hid[:10], "--store", store)
    assert r.exit_code == 0 and "sql_query" in r.stdout
    r = invoke("harness", "diff", "iot:baseline", hid, "--store", store)
    assert r.exit_code == 0 and "(identical)" in r.stdout
    r = invoke("harness", "lineage", hid, "--store", store, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)[0]["id"] == hid


@pytest.mark.parametrize(
    "command,args,message",
    [
        ("eval", ["--family", "nope"], "unknown task family"),
        ("eval", ["--model", "synthetic/genius"], "unknown synthetic model"),
        ("eval", ["--model", "weak"], "provider/model"),
        ("eval", ["--model", "nosuchprovider/x"], "unknown model provider"),
        ("eval", ["--n", "0"], "--n must be positive"),
        ("eval", ["--n", "51"], "n must be in 1..50"),
        ("eval", ["--harness", "deadbeef00"], "unknown harness"),
        ("eval", ["--split", "holdout"], "unknown split"),
        ("adapt", ["--in-flight", "0"], "--in-flight must be positive"),
        ("adapt", ["--test-n", "51"], "n must be in 1..50"),
        ("adapt", ["--repeats", "0"], "--repeats must be positive"),
    ],
)
def test_bad_input_one_line_exit_2_writes_nothing(tmp_path, command, args, message):
    store = tmp_path / "store"
    r = invoke(command, "--store", store, *args)
    assert r.exit_code == 2
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], r.stderr
    assert not store.exists()


def test_unreadable_store_is_a_clear_error(tmp_path):
    bad = tmp_path / "store"
    bad.write_text("not a store")
    r = invoke("eval", "--store", bad, "--harness", "abcdef123")
    assert r.exit_code == 2 and r.stderr.startswith("error:")
    r = invoke("harness", "list", "--store", tmp_path / "missing")
    assert r.exit_code == 2 and not (tmp_path / "missing").exists()
    assert bad.read_text() == "not a store"


def test_tasks_list_json():
    r = invoke("tasks", "list", "--json")
    rows = json.loads(r.stdout)
    assert any(row["family"] == "iot" and row["val"] == 50 for row in rows)


@pytest.mark.parametrize(
    "text,message",
    [
        ("[" * 100_000, "nested too deeply"),
        ('{"ops": [{"op": "add_recipe", "name": {"a": 1}, "text": "x"}]}', "op 0 (add_recipe)"),
        ('{"ops": [{"op": "nosuch"}]}', "op 0"),
    ],
)
def test_harness_apply_of_a_bad_edit_is_one_error_line_and_stores_nothing(tmp_path, text, message):
    edit, store = tmp_path / "edit.json", tmp_path / "store"
    edit.write_text(text)
    r = invoke("harness", "apply", "iot:baseline", edit, "--store", store)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], r.stderr
    assert "Traceback" not in r.output
    assert not (store / "store.db").exists() or not HarnessStore(store, create=False).list_harnesses()


def test_a_run_s_final_table_names_the_synthetic_adapter_rules_when_its_adapters_are_synthetic(capsys):
    from agents.report import SYNTHETIC_ADAPTER_RULES
    from cluster.cli_run import _print_final

    cell = {"pass_at_1": 0.5, "ci95": [0.4, 0.6]}
    status = {"run_id": "r1", "stage": "finished", "train_backend": "synthetic",
              "result": {"stop_reason": "done", "families": {"iot": {"test": {"baseline": cell}, "gain": 0.1, "adapter": "a1"}}}}
    _print_final(status)
    assert SYNTHETIC_ADAPTER_RULES[:40] in " ".join(capsys.readouterr().out.split())
    _print_final({**status, "train_backend": "peft"})
    assert SYNTHETIC_ADAPTER_RULES[:40] not in " ".join(capsys.readouterr().out.split())
