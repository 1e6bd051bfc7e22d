"""The command line: eval end to end on the embedded Ray, harness commands, and bad input."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from coevolve.cli.app import app
from coevolve.store.store import HarnessStore

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def evaluated(ray_session, tmp_path_factory):
    store = tmp_path_factory.mktemp("cli") / "store"
    r = invoke("eval", "--family", "iot", "--split", "val", "--n", 20, "--harness", "baseline",
               "--model", "synthetic/weak,synthetic/expert", "--workers", 2, "--store", store, "--json", "--seed", 1)
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout.strip().splitlines()[-1])  # one eval run per model, on one rollout pool
    return store, {row["model"]: row for row in rows}


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
    r = invoke("eval", "--family", "iot", "--n", 3, "--model", "synthetic/expert", "--workers", 1, "--json", "--store", store)
    assert r.exit_code == 0
    got = json.loads(r.stdout.strip().splitlines()[-1])
    r = invoke("eval", "--family", "iot", "--n", 3, "--model", "synthetic/expert", "--workers", 1, "--store", store)
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


# The bad inputs of every command (issue 24.7: usage errors, unreachable addresses, unbounded numbers,
# --resume "", invalid runs that must leave no store) are bench/bad_inputs.py's table, which
# tests/test_bad_inputs.py runs case by case; the tests here check what that table does not.


@pytest.fixture()
def no_ray(monkeypatch, tmp_path):
    """Bad input must be refused before Ray: starting or attaching to it fails the test at once. A token
    is at hand, so that an address is refused for what it is (nothing listening), not for a missing token."""
    import coevolve.cluster.head
    import coevolve.cluster.runtime
    def refuse(*args, **kwargs):
        raise AssertionError("bad input reached Ray")

    monkeypatch.setattr(coevolve.cluster.runtime, "start_ray", refuse)
    monkeypatch.setattr(coevolve.cluster.head, "ensure_local_head", refuse)
    token = tmp_path / "ray-token"
    token.write_text("t" * 64)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(token))


def test_a_usage_error_is_one_line_and_no_arguments_still_show_the_help():
    r = invoke("run", "--seed", "3")
    lines = r.stderr.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and lines[0].endswith(
        "(seed is a profile field: set it as an override, seed=VALUE)"
    ), r.stderr
    assert "╭" not in r.output and "Usage:" not in r.output
    r = invoke("harness")
    assert r.exit_code == 2 and "Usage:" in r.output and "error:" not in r.output
    r = invoke("eval", "--help")
    assert r.exit_code == 0 and "--n" in r.output


def _store_with_run(tmp_path, kind: str, status: str) -> tuple[HarnessStore, str]:
    s = HarnessStore(tmp_path / "store")
    run_id = s.create_run(kind, {})
    if status in ("done", "failed"):
        s.finish_run(run_id, status, {})
    else:
        s.update_run(run_id, status=status)
    return s, run_id


@pytest.mark.parametrize(
    "kind,status,message",
    [
        ("coevolve", "done", "has already ended (done): there is nothing to stop"),
        ("coevolve", "failed", "has already ended (failed)"),
        ("eval", "running", "(eval) has no safe point to stop at: only a coevolve run has"),
    ],
)
def test_stop_on_a_run_that_cannot_stop_is_one_error_and_records_nothing(tmp_path, kind, status, message):
    s, run_id = _store_with_run(tmp_path, kind, status)
    r = invoke("stop", run_id, "--store", s.root)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], r.output
    assert s.events(run_id, "stop") == []


def test_stop_on_a_live_run_is_recorded_once(tmp_path):
    s, run_id = _store_with_run(tmp_path, "coevolve", "running")
    r = invoke("stop", run_id, "--store", s.root)
    assert r.exit_code == 0 and "stops at its next safe point" in r.stdout, r.output
    r = invoke("stop", run_id, "--store", s.root)
    assert r.exit_code == 2 and r.stderr.startswith("error: a stop was already requested"), r.output
    assert len(s.events(run_id, "stop")) == 1


def test_resume_of_a_run_with_a_profile_is_refused_and_writes_nothing(tmp_path, no_ray):
    s, run_id = _store_with_run(tmp_path, "coevolve", "interrupted")
    before = sorted(p.name for p in s.root.iterdir())
    r = invoke("run", "local", "--resume", run_id, "--store", s.root)
    assert r.exit_code == 2 and r.stderr.startswith("error: --resume continues a run with its own profile"), r.output
    assert sorted(p.name for p in s.root.iterdir()) == before and s.list_runs() == [s.get_run(run_id)]


def test_the_client_names_the_run_whose_meta_agent_died(monkeypatch, capsys, tmp_path):
    import ray

    from coevolve.cli.run import _follow, _print_final
    from coevolve.store.store import HarnessStore

    def gone(*args, **kwargs):
        raise ray.exceptions.RayActorError()

    monkeypatch.setattr(ray, "get", gone)

    class Actor:
        class status:  # mimics `actor.status.remote()`
            @staticmethod
            def remote():
                return None

    store = HarnessStore(tmp_path / "store", create=True)
    store.create_run("coevolve", {}, run_id="coevolve-20260101-000000-abcdef")
    final = _follow(Actor(), "coevolve-20260101-000000-abcdef", tmp_path / "store", quiet=True)
    assert final["run_id"] == "coevolve-20260101-000000-abcdef" and final["stage"] == "failed"
    _print_final(final)
    out = " ".join(capsys.readouterr().out.split())
    assert "run coevolve-20260101-000000-abcdef: failed" in out and "run None" not in out


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
        # issue 24.7 (an OverflowError before edits were typed) and 24.6 (a million ops ran for minutes)
        ('{"ops": [{"op": "set_context_policy", "strategy": "keep-all", "token_budget": 1e400}]}',
         "op 0 (set_context_policy): field 'token_budget' must be an integer"),
        ('{"ops": [' + ",".join(['{"op": "set_max_turns", "max_turns": 30}'] * 200_000) + "]}",
         "edit has 200000 operations, over the 64 limit"),
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
    from coevolve.analysis.summary import SYNTHETIC_ADAPTER_RULES
    from coevolve.cli.run import _print_final

    cell = {"pass_at_1": 0.5, "ci95": [0.4, 0.6]}
    status = {"run_id": "r1", "stage": "finished", "train_backend": "synthetic",
              "result": {"stop_reason": "done", "families": {"iot": {"test": {"baseline": cell}, "gain": 0.1, "adapter": "a1"}}}}
    _print_final(status)
    assert SYNTHETIC_ADAPTER_RULES[:40] in " ".join(capsys.readouterr().out.split())
    _print_final({**status, "train_backend": "peft"})
    assert SYNTHETIC_ADAPTER_RULES[:40] not in " ".join(capsys.readouterr().out.split())
