"""Hostile input: model-written text (rationales, edit text, error text) is shown as text, so rich markup
in it never crashes a command and HTML in it is never live in a Markdown report; an adapter id in a
model reference is a name, never a path."""

from __future__ import annotations

import json

import pytest
from rich.console import Console
from typer.testing import CliRunner

from coevolve.cli.app import app
from coevolve.edits import apply_edit, edit_from_json
from coevolve.store.store import HarnessStore
from coevolve.tasks import get_family

runner = CliRunner()
HOSTILE = "[/] closes nothing, [bold]opens [red]and <script>alert(1)</script>"


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def _store_with_hostile_lineage(tmp_path) -> tuple[HarnessStore, str]:
    s = HarnessStore(tmp_path / "store")
    base = get_family("iot").baseline_harness()
    s.put_harness(base, rationale="family baseline")
    edit = edit_from_json({"ops": [{"op": "add_recipe", "name": "r[/]", "text": "[bold]x"}], "rationale": HOSTILE})
    child = apply_edit(base, edit)
    s.put_harness(child, parent=base.id, edit=edit, rationale=HOSTILE)
    s.set_alias("iot:evolved", child.id)
    return s, child.id


def _flat(text: str) -> str:
    return " ".join(text.replace("│", " ").split())


def test_harness_list_and_lineage_show_a_rationale_with_markup_as_text(tmp_path):
    s, _ = _store_with_hostile_lineage(tmp_path)
    r = invoke("harness", "list", "--store", s.root)
    assert r.exit_code == 0, r.output
    assert "[/] closes nothing" in _flat(r.stdout)
    r = invoke("harness", "lineage", "iot:evolved", "--store", s.root)
    assert r.exit_code == 0, r.output
    assert HOSTILE in _flat(r.stdout) and "[AddRecipe]" in r.stdout


def test_the_evolve_summary_shows_a_rationale_with_markup_as_text(capsys):
    from coevolve.cli.display import evolve_summary

    evolve_summary({"family": "iot", "model": "synthetic/weak", "baseline_val": 0.1, "evolved_val": 0.2,
                    "iterations": 1, "rollouts_used": 10, "stop_reason": "[/] budget", "edits": [
                        {"iteration": 1, "ops": [{"op": "add_recipe"}], "val_gain": 0.1, "rationale": "[/]x"}],
                    "harness_id": "h" * 64, "run_id": "evolve-1"})
    out = _flat(capsys.readouterr().out)
    assert "[/]x" in out and "[/] budget" in out


def test_a_run_s_final_lines_show_an_error_with_markup_as_text(capsys):
    from coevolve.cli.run import _print_final

    _print_final({"run_id": "r1", "stage": "failed", "error": "1 validation error [type=int, input_value='[/]']"})
    assert "[type=int, input_value='[/]']" in _flat(capsys.readouterr().out)


def test_the_run_panel_shows_a_stage_with_markup_as_text():
    from coevolve.cli.run import _panel

    c = Console(width=200, record=True)
    c.print(_panel({"run_id": "r1", "stage": "[/]failed", "families": {"[bold]iot": {"stage": "[red]x:iot:0", "adapter": "[/]a"}}}))
    text = c.export_text()
    assert "[/]failed" in text and "[bold]iot" in text and "[red]x" in text and "adapter [/]a" in text


def _experiment_data() -> dict:
    cfg = {"name": "<b>t</b>", "families": ["iot"], "weak": "synthetic/weak", "expert": "synthetic/expert",
           "proposer": "synthetic/meta", "judge": "synthetic/judge", "repeats": 1, "train": {"backend": "synthetic"}}
    decision = {"iteration": 1, "outcome": "accept", "rationale": HOSTILE + "\n# not a heading", "ops": [{"op": "add_recipe"}],
                "wins": 3, "losses": 0, "p_value": 0.1}
    return {"run_id": "experiment-x", "config": cfg, "cells": {}, "composition": {}, "drift": {},
            "lineage": {"iot": {"harness_id": "h" * 64, "decisions": [decision], "val": [0.1, 0.2]}},
            "usage": {}, "cost": {}}


def test_an_experiment_report_md_carries_no_live_html_from_a_rationale(tmp_path):
    from coevolve.jobs.report import render

    html_path, md_path = render(_experiment_data(), tmp_path / "r")
    for text in (html_path.read_text(), md_path.read_text()):
        assert "<script>" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    md = md_path.read_text()
    assert "<b>t</b>" not in md and "\n# not a heading" not in md


def test_a_run_report_md_carries_no_live_html_from_a_rationale(tmp_path):
    from coevolve.jobs.report import write_run_report

    store = HarnessStore(tmp_path / "s")
    run_id = store.create_run("coevolve", {"name": "t", "weak": {"model": "synthetic/weak"}})
    store.append_event(run_id, "cell", {"cell": "evolve:iot:1", "model": "synthetic/weak", "val": [0.1, 0.2],
                                        "accepted": [{"rationale": HOSTILE, "val_gain": 0.1}]})
    html_path, md_path = write_run_report(store, run_id, {"stop_reason": "<img src=x onerror=alert(1)>"})
    for text in (html_path.read_text(), md_path.read_text()):
        assert "<script>" not in text and "<img" not in text and "&lt;script&gt;" in text


def test_harness_list_json_keeps_the_rationale_verbatim(tmp_path):
    s, hid = _store_with_hostile_lineage(tmp_path)
    r = invoke("harness", "list", "--store", s.root, "--json")
    assert r.exit_code == 0 and {h["id"]: h["rationale"] for h in json.loads(r.stdout)}[hid] == HOSTILE


# ------------------------------------------------------------------------------ adapter ids
@pytest.mark.parametrize("adapter", ["../../x", "a/b", ".hidden", "..", "a..b", "x" * 129, "a b", "a\nb"])
def test_a_model_ref_whose_adapter_id_is_not_a_name_is_refused(adapter):
    from coevolve.values import ModelRef

    with pytest.raises(ValueError, match="adapter id .* must be letters, digits"):
        ModelRef.parse(f"synthetic/weak@{adapter}")


@pytest.mark.parametrize("adapter", ["a1", "syn-1", "lora_v2.3", "X" * 128])
def test_a_model_ref_with_a_named_adapter_parses(adapter):
    from coevolve.values import ModelRef

    assert ModelRef.parse(f"vllm/m@{adapter}").adapter == adapter


def test_an_adapter_id_with_dots_never_reads_outside_the_store(tmp_path, monkeypatch):
    """A synthetic adapter planted outside the store, named through `../`, is refused before any path is
    built from the id, by the check of a model and by the provider that would read it."""
    from coevolve.jobs import validate_model
    from coevolve.testbed.provider import load_synthetic_adapter

    store = tmp_path / "store"
    (store / "adapters").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "synthetic_adapter.json").write_text("{}")
    monkeypatch.setenv("COEVOLVE_STORE", str(store))
    with pytest.raises(ValueError, match="adapter id '../outside' must be"):
        validate_model("synthetic/weak@../outside")
    with pytest.raises(ValueError, match="adapter id '../outside' must be"):
        load_synthetic_adapter("../outside")


@pytest.mark.parametrize("argv", [
    ("eval", "--model", "synthetic/weak@../../x"),
    ("run", "local", "weak.model=vllm/m@../../x"),
])
def test_the_cli_refuses_an_adapter_path_in_one_error_line(tmp_path, monkeypatch, argv):
    import coevolve.cluster.head
    import coevolve.cluster.runtime

    def refuse(*args, **kwargs):
        raise AssertionError("bad input reached Ray")

    monkeypatch.setattr(coevolve.cluster.runtime, "start_ray", refuse)
    monkeypatch.setattr(coevolve.cluster.head, "ensure_local_head", refuse)
    store = tmp_path / "store"
    r = invoke(*argv, "--store", store)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and "adapter id '../../x'" in lines[0], r.output
    assert not store.exists()
