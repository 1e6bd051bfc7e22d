"""IoT family: golden instances (hand-written expected reports) with mutations, checker reports, tools.
The checks every family shares (traps, rules, handbook) are in test_family_contract.py, the levers
(stated facts help, hooks help) in test_families.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coevolve.tasks import get_family
from coevolve.tasks.base import Knowledge
from coevolve.tasks.iot import detect
from tests.helpers import failed, solved_env

FAM = get_family("iot")
GOLDEN = json.loads((Path(__file__).resolve().parent.parent / "coevolve" / "tasks" / "iot" / "golden.json").read_text())["instances"]


def instance_with(trap: str):
    for inst in FAM.generate("train"):
        if trap in FAM.answer_key(inst)["traps"]:
            return inst
    raise AssertionError(f"no train instance has trap {trap}")


def env_with_report(inst, report) -> object:
    env = FAM.make_env(inst)
    key = FAM.world(inst.seed, inst.params).key
    assert not env.call("upload_report", {"key": key, "content": json.dumps(report)}).error
    return env


# ------------------------------------------------------------------ golden instances
@pytest.mark.parametrize("golden", GOLDEN, ids=lambda g: g["id"])
def test_reference_solver_writes_the_hand_written_report(golden):
    inst = FAM.instance(golden["id"])
    _, env = FAM.reference_solve(inst)
    uploaded = json.loads(env.objects[FAM.world(inst.seed, inst.params).key])
    assert sorted(uploaded, key=json.dumps) == sorted(golden["report"], key=json.dumps)


@pytest.mark.parametrize("golden", GOLDEN, ids=lambda g: g["id"])
def test_checker_accepts_the_golden_report_and_rejects_each_mutation(golden):
    inst = FAM.instance(golden["id"])
    report = golden["report"]
    assert FAM.check(env_with_report(inst, report)).passed
    first = report[0]
    mutations = {
        "entry dropped": report[1:],
        "entry added": report + [{**first, "sensor": "vibration" if first["sensor"] != "vibration" else "pressure"}],
        "start shifted": [{**first, "start": first["start"][:-5] + "11:00"}, *report[1:]],
        "entry doubled": report + [first],
    }
    if "peak" in first:
        mutations["peak changed"] = [{**first, "peak": first["peak"] + 1}, *report[1:]]
        mutations["peak missing"] = [{k: v for k, v in first.items() if k != "peak"}, *report[1:]]
    for what, mutated in mutations.items():
        outcome = FAM.check(env_with_report(inst, mutated))
        assert not outcome.passed, what
        assert failed(outcome), what


# ------------------------------------------------------------------ checker reports
def test_missing_peak_field_fails_when_asked():
    inst = instance_with("peak")
    full = FAM.full_knowledge()
    outcome = FAM.check(solved_env(FAM, inst, Knowledge(full.facts, frozenset())))
    assert not outcome.passed
    assert "peak" in failed(outcome)["peak_values"]


def test_report_at_wrong_key_or_malformed_fails():
    inst = FAM.generate("val", 1)[0]
    w = FAM.world(inst.seed, inst.params)
    report = json.dumps(detect(w, FAM.full_knowledge()))
    env = FAM.make_env(inst)
    env.call("upload_report", {"key": "report.json", "content": report})
    assert "report.json" in failed(FAM.check(env))["report_uploaded"]
    env.call("upload_report", {"key": w.key, "content": "not json"})
    assert set(failed(FAM.check(env))) == {"report_is_json_list"}
    env.call("upload_report", {"key": w.key, "content": report})
    assert FAM.check(env).passed


def test_sql_is_read_only_and_errors_are_observations():
    env = FAM.make_env(FAM.generate("val", 1)[0])
    r = env.call("sql_query", {"query": "DELETE FROM readings"})
    assert r.error and r.content.startswith("error")
    r = env.call("sql_query", {"query": "SELECT count(*) AS n FROM readings"})
    assert not r.error and "n" in r.content
    assert env.call("nope", {}).error
    assert env.call("sql_query", {"query": 3}).error
