"""The experiment matrix (resumable cells) and the report, checked in a real headless Chromium."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest

from coevolve.analysis.rollouts import cohen_kappa, composition, confusion
from coevolve.analysis.summary import SYNTHETIC_ADAPTER_RULES
from coevolve.values import FAILURE_CATEGORIES, FailureLabel

ARTIFACTS = Path(__file__).parent / "artifacts"
SMALL = ["families=[iot]", "repeats=1", "evolve.iterations=1", "evolve.rollouts=300", "evolve.val_n=10",
         "evolve.val_seeds=1", "data.rows=20", "data.samples=1", "data.k=2"]


class Stop(Exception):
    pass


@pytest.fixture(scope="module")
def experiment(ray_session, tmp_path_factory):
    """A small experiment, interrupted after its fourth cell and resumed."""
    from coevolve.jobs.experiment import load_config, run_experiment
    from coevolve.store.store import HarnessStore

    root = tmp_path_factory.mktemp("experiment")
    cfg = load_config(Path(__file__).parent.parent / "deploy" / "experiments" / "synthetic.yaml", SMALL)
    started: list[str] = []

    def stop_at_fifth(p):
        started.append(p["cell"])
        if len(started) == 5:
            raise Stop()

    with pytest.raises(Stop):
        run_experiment(cfg, root / "store", progress=stop_at_fifth)
    store = HarnessStore(root / "store")
    run_id = store.list_runs("experiment")[0].run_id
    before = [e.payload["cell"] for e in store.events(run_id, "cell")]
    resumed: list[str] = []
    out = run_experiment(cfg, root / "store", resume=run_id, progress=lambda p: resumed.append(p["cell"]))
    return store, run_id, before, resumed, out


@pytest.mark.slow  # the module's experiment fixture runs a whole experiment (~70 s)
def test_a_resumed_experiment_redoes_no_finished_cell(experiment):
    store, run_id, before, resumed, out = experiment
    assert len(before) == 4
    assert not set(before) & set(resumed)  # nothing finished was started again
    keys = [e.payload["cell"] for e in store.events(run_id, "cell")]
    assert len(keys) == len(set(keys)) == out["cells_done"]
    assert all(r["base"] is not None for r in out["rows"])  # the full matrix
    weak = [r for r in out["rows"] if r["model"] == "weak"]
    assert all(r["imitation"] is not None and r["correction"] is not None for r in weak)
    assert out["adapter_rules"] == SYNTHETIC_ADAPTER_RULES  # synthetic arms: the rules that decide them


@pytest.mark.slow  # the module's experiment fixture runs a whole experiment (~70 s)
def test_the_experiment_command_prints_the_adapter_rules_under_its_table(experiment, capsys):
    from coevolve.cli.adapt import print_experiment
    from coevolve.cli.app import app  # noqa: F401 — the CLI first: it registers cli_adapt's commands

    _, _, _, _, out = experiment
    capsys.readouterr()
    print_experiment(out)  # what `coevolve experiment paper` prints at the end
    text = " ".join(capsys.readouterr().out.split())
    assert "+ correction" in text and "offline testbed" in text
    assert " ".join(SYNTHETIC_ADAPTER_RULES.split()) in text


@pytest.mark.slow  # the module's experiment fixture runs a whole experiment (~70 s)
def test_report_renders_in_chromium_with_every_plot(experiment):
    from playwright.sync_api import sync_playwright

    from coevolve.jobs.report import write_report
    from coevolve.tasks.browser.backends import CHROMIUM_ARGS, chromium_available

    if not chromium_available():
        pytest.skip("Debian's chromium is not installed (make test installs it)")
    store, run_id, _, _, _ = experiment
    html_path, md_path = write_report(store, run_id)
    text = html_path.read_text()
    assert "<script src" not in text and "<link" not in text  # nothing to fetch: it works offline
    assert "offline testbed" in text and "offline testbed" in md_path.read_text()  # the notice, at the top
    assert SYNTHETIC_ADAPTER_RULES in text and SYNTHETIC_ADAPTER_RULES in md_path.read_text()  # arms' rules
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=list(CHROMIUM_ARGS))
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        fetched: list[str] = []
        page.on("request", lambda r: fetched.append(r.url))
        page.goto(html_path.as_uri())
        sizes = page.eval_on_selector_all(
            "figure svg", "els => els.map(e => [e.getBoundingClientRect().width, e.getBoundingClientRect().height])"
        )
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "report.png"), full_page=True)
        browser.close()
    assert errors == []
    assert all(u.startswith(("file:", "data:")) for u in fetched), fetched
    assert len(sizes) == 6 and all(w > 50 and h > 50 for w, h in sizes)
    shutil.copy(html_path, ARTIFACTS / "report.html")


@pytest.mark.slow  # the module's experiment fixture runs a whole experiment (~70 s)
def test_composition_sums_to_all_hard_failures_and_never_counts_infra(experiment):
    from coevolve.analysis.rollouts import hard_failures

    store, run_id, _, _, _ = experiment
    trajs = store.get_trajectories(run_id, "eval:iot:weak:baseline:base")
    failures = hard_failures(trajs)
    assert failures and all(t.error != "infra" for t in failures)
    shares = composition([FailureLabel("tool-use", "")] * 3 + [FailureLabel("planning", "")])
    assert sum(shares.values()) == pytest.approx(1.0) and set(shares) == set(FAILURE_CATEGORIES)
    with pytest.raises(ValueError):
        composition([FailureLabel("infra", "")])  # infra is never a category
    from coevolve.jobs.report import gather

    data = gather(store, run_id)
    for key, labels in data["composition"].items():
        cell_trajs = store.get_trajectories(run_id, key)
        assert len(labels) == len(hard_failures(cell_trajs))  # every hard failure classified once, infra never
        if labels:
            assert sum(composition([FailureLabel(c, "") for c in labels]).values()) == pytest.approx(1.0)


def test_kappa_and_confusion():
    pairs = [("tool-use", "tool-use")] * 5 + [("planning", "planning")] * 5
    assert cohen_kappa(pairs) == pytest.approx(1.0)
    assert cohen_kappa([("tool-use", "planning"), ("planning", "tool-use")]) < 0
    table = confusion(pairs + [("planning", "tool-use")])
    assert table["planning"]["tool-use"] == 1 and table["tool-use"]["tool-use"] == 5
    assert sum(Counter({k: sum(v.values()) for k, v in table.items()}).values()) == 11


def _report_data(weak: str, backend: str) -> dict:
    cfg = {"name": "t", "families": ["iot"], "weak": weak, "expert": "synthetic/expert",
           "proposer": "synthetic/meta", "judge": "synthetic/judge", "repeats": 1,
           "train": {"backend": backend}}
    cell = {"pass_at_1": 0.5, "ci95": [0.3, 0.7]}
    cells = {f"eval:iot:weak:baseline:{w}": cell for w in ("base", "imitation", "correction")}
    return {"run_id": "experiment-x", "config": cfg, "cells": cells, "composition": {}, "drift": {},
            "lineage": {}, "usage": {}, "cost": {}}


@pytest.mark.parametrize(("weak", "backend", "named"), [("synthetic/weak", "synthetic", True),
                                                         ("vllm/smollm2", "peft", False)])
def test_an_experiment_report_names_the_synthetic_adapter_rules_only_when_they_decide_its_arms(
    tmp_path, weak, backend, named
):
    from coevolve.jobs.report import render

    html_path, md_path = render(_report_data(weak, backend), tmp_path / "r")
    for text in (html_path.read_text(), md_path.read_text()):
        assert "+ correction" in text
        assert (SYNTHETIC_ADAPTER_RULES in text) is named
    md = md_path.read_text()
    if named:  # beside the main table, not somewhere else on the page
        where = md.index(SYNTHETIC_ADAPTER_RULES)
        assert md.index("## Main table") < where < md.index("## Failure composition")


@pytest.mark.parametrize(("backend", "named"), [("synthetic", True), ("peft", False)])
def test_a_run_report_names_the_synthetic_adapter_rules_beside_its_adapter_column(tmp_path, backend, named):
    from coevolve.jobs.report import write_run_report
    from coevolve.store.store import HarnessStore

    store = HarnessStore(tmp_path / "s")
    config = {"name": "t", "weak": {"model": "synthetic/weak"}, "train": {"backend": backend}}
    run_id = store.create_run("run", config)
    cell = {"pass_at_1": 0.5, "ci95": [0.3, 0.7]}
    test = {"baseline": cell, "evolved": cell, "evolved+adapter": cell}
    store.append_event(run_id, "cell", {"cell": "final:iot", "test": test, "gain": 0.0,
                                        "gain_ci95": [-0.1, 0.1], "harness_id": "h" * 64, "adapter": "a1"})
    html_path, md_path = write_run_report(store, run_id, {"stop_reason": "done"})
    for text in (html_path.read_text(), md_path.read_text()):
        assert "evolved+adapter" in text and "offline testbed" in text
        assert (SYNTHETIC_ADAPTER_RULES in text) is named
