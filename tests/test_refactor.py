"""Refactor family: golden instances (hand-written expected repositories) with mutations, checker reports
per hand-made wrong state, concepts, the patch and file tools, the sandbox through the env. The checks
every family shares (traps, rules, handbook) are in test_family_contract.py, the levers (stated facts
help, hooks help) in test_families.py; the sandbox itself is tested in test_sandbox*.py."""

from __future__ import annotations

import ast
import json
import os
import re
from dataclasses import replace
from pathlib import Path

import pytest

from coevolve.tasks import get_family
from coevolve.tasks.base import Knowledge, ToolArgError
from coevolve.tasks.refactor import CHANGELOG, apply_patch, make_patch, original_files, refactored_files
from coevolve.tasks.refactor.plan import FULL as PLAN_FULL
from tests.helpers import failed, solved_env
from tests.rollouts import FunctionClient

FAM = get_family("refactor")
FULL = FAM.full_knowledge()
GOLDEN = json.loads((Path(__file__).resolve().parent.parent / "coevolve" / "tasks" / "refactor" / "golden.json").read_text())["instances"]
TRAP_FACT = {
    "all_list": "string_references",
    "namesake": "method_namesake",
    "near_dup": "near_duplicate",
    "outputs": "block_outputs",
    "naive_mix": "aware_datetime",
}


def instance_with(trap: str | None = None, kind: str | None = None, split: str = "train"):
    for inst in FAM.generate(split):
        w = FAM.world(inst.seed, inst.params)
        if (trap is None or trap in w.traps) and (kind is None or w.kind == kind):
            return inst
    raise AssertionError(f"no {split} instance with trap={trap} kind={kind}")


def env_with_files(inst, files: dict[str, str], deleted: tuple[str, ...] = ()):
    """A fresh env whose repository is the original one with `files` written over it through the tools."""
    env = FAM.make_env(inst)
    for path, content in files.items():
        assert not env.call("write_file", {"path": path, "content": content}).error
    for path in deleted:
        del env.files[path]
    return env


class _Canon(ast.NodeTransformer):
    """Drops docstrings and names local variables by their order of first assignment."""

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        params = {a.arg for a in node.args.args + node.args.kwonlyargs}
        stored = [n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
        self.local = {name: f"_v{i}" for i, name in enumerate(dict.fromkeys(n for n in stored if n not in params))}
        self.generic_visit(node)
        self.local = {}
        return node

    def visit_Name(self, node: ast.Name) -> ast.AST:
        node.id = getattr(self, "local", {}).get(node.id, node.id)
        return node

    def generic_visit(self, node: ast.AST) -> ast.AST:
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
        return super().generic_visit(node)


def canon(path: str, text: str) -> str:
    """Python files by their syntax tree up to docstrings and local variable names; other files as text."""
    return ast.dump(_Canon().visit(ast.parse(text))) if path.endswith(".py") else text


# ------------------------------------------------------------------ golden instances
@pytest.mark.parametrize("golden", GOLDEN, ids=lambda g: g["id"])
def test_reference_solver_leaves_the_hand_written_repository(golden):
    inst = FAM.instance(golden["id"])
    outcome, env = FAM.reference_solve(inst)
    assert outcome.passed, failed(outcome)
    want = {**FAM.make_env(inst).files, **golden["files"]}
    assert sorted(env.files) == sorted(want)
    for path, text in want.items():
        assert canon(path, env.files[path]) == canon(path, text), path


def _mutations(inst, golden) -> dict[str, tuple[dict[str, str], tuple[str, ...]]]:
    """(files written, files deleted) per mutation of the golden repository: an item dropped, added or
    altered, and each instruction constraint violated."""
    w = FAM.world(inst.seed, inst.params)
    start = FAM.make_env(inst).files
    files = dict(golden["files"])
    pkg = [p for p in files if p.startswith(f"{w.pkg}/") and p in start and not p.endswith("__init__.py")]
    new = [p for p in files if p not in start]
    one = pkg[-1]
    m: dict[str, tuple[dict[str, str], tuple[str, ...]]] = {
        "a changed module left as it was": ({**files, one: start[one]}, ()),
        "a module reaching outside added": ({**files, f"{w.pkg}/extras.py": "import os\n\nHOME = os.getcwd()\n"}, ()),
        "a visible test file deleted": (files, (w.visible_tests[0],)),
    }
    s = w.spec
    if w.kind == "rename":
        m["the new name misspelt in one caller"] = ({**files, one: files[one].replace(s["new"], s["new"] + "_")}, ())
        if "namesake" in w.traps:
            path = next(p for p in start if p.startswith(f"{w.pkg}/") and f"def {s['old']}(self" in start[p])
            m["the same-named method renamed too"] = ({**files, path: start[path].replace(s["old"], s["new"])}, ())
        if "all_list" in w.traps:
            init = f"{w.pkg}/__init__.py"
            m["the __all__ entry left"] = ({**files, init: files[init].replace(f'"{s["new"]}"', f'"{s["old"]}"')}, ())
    elif w.kind == "extract":
        (helper_module,) = new
        bumped = re.sub(r"(> |\[:)(\d+)", lambda x: x.group(1) + str(int(x.group(2)) + 1), files[helper_module], count=1)
        assert bumped != files[helper_module]
        m["the helper's limit altered"] = ({**files, helper_module: bumped}, ())
        m["the helper module dropped"] = ({p: c for p, c in files.items() if p != helper_module}, ())
        if "outputs" in w.traps:
            m["a caller ignoring the helper's result"] = (
                {**files, one: re.sub(r"(\n\s+)\w+ = (" + s["helper"] + r"\()", r"\1\2", files[one], count=1)},
                (),
            )
        if "near_dup" in w.traps:
            near = next(x for x in s["sites"] if x["near"])
            block = s["blocks"][f"blk{[x['name'] for x in s['sites']].index(near['name'])}"]
            text = files.get(near["module"], start[near["module"]])
            call = f"    {near['out']} = {s['helper']}({near['v']})" if s["slug"] else f"    {s['helper']}({near['v']})"
            m["the near-duplicate replaced too"] = ({**files, near["module"]: text.replace(block, call)}, ())
    else:
        aware = "datetime.now(timezone.utc)"
        path = next(p for p in pkg if aware in files[p])
        m["local time instead of UTC at one call site"] = ({**files, path: files[path].replace(aware, "datetime.now()", 1)}, ())
        if "naive_mix" in w.traps:
            path = next(p for p in pkg if ".replace(tzinfo=None)" in files[p])
            m["an aware value where a naive one is compared or printed"] = (
                {**files, path: files[path].replace(".replace(tzinfo=None)", "")},
                (),
            )
    if CHANGELOG in files:
        entry = w.entry
        m["the changelog line appended at the end"] = ({**files, CHANGELOG: start[CHANGELOG] + entry + "\n"}, ())
        m["the changelog line left out"] = ({p: c for p, c in files.items() if p != CHANGELOG}, ())
        m["an old changelog line removed"] = ({**files, CHANGELOG: files[CHANGELOG].replace("- Initial release.\n", "")}, ())
    return m


@pytest.mark.parametrize("golden", GOLDEN, ids=lambda g: g["id"])
def test_checker_accepts_the_golden_repository_and_rejects_each_mutation(golden):
    inst = FAM.instance(golden["id"])
    outcome = FAM.check(env_with_files(inst, golden["files"]))
    assert outcome.passed and outcome.score == 1.0, failed(outcome)
    mutations = _mutations(inst, golden)
    assert len(mutations) >= 4
    for what, (files, deleted) in mutations.items():
        outcome = FAM.check(env_with_files(inst, files, deleted))
        assert not outcome.passed, what
        reasons = failed(outcome)
        assert reasons and all(reasons.values()), (what, reasons)


def test_golden_instances_cover_every_trap_and_kind():
    worlds = [FAM.world(i.seed, i.params) for i in (FAM.instance(g["id"]) for g in GOLDEN)]
    assert {w.kind for w in worlds} == {"rename", "extract", "deprecated"}
    assert {t for w in worlds for t in w.traps} == set(TRAP_FACT) | {"changelog"}
    assert len(GOLDEN) >= 5 and all(g["id"].startswith("refactor/test/") and g["why"] for g in GOLDEN)


# ------------------------------------------------------------------ checker reports
def test_facts_without_their_trap_do_not_matter():
    """The wrong branch only bites where the trap is present (so the fact is what makes the difference)."""
    for kind, fact in (("deprecated", "aware_datetime"), ("rename", "string_references"), ("extract", "near_duplicate")):
        inst = next(
            i for i in FAM.generate("train")
            if FAM.world(i.seed, i.params).kind == kind and not FAM.world(i.seed, i.params).traps
        )
        assert FAM.check(solved_env(FAM, inst, Knowledge(FULL.facts - {fact}, FULL.constraints))).passed, (kind, fact)


def test_changelog_in_the_wrong_place_or_rewritten_fails():
    inst = instance_with("changelog")
    outcome = FAM.check(solved_env(FAM, inst, Knowledge(FULL.facts, frozenset())))
    assert not outcome.passed
    assert "not under the `## Unreleased` heading" in failed(outcome)["changelog_entry"]
    assert "not run" in failed(outcome)["tests_pass"]
    env = solved_env(FAM, inst, FULL)
    assert FAM.check(env).passed
    w = env.world
    env.call("write_file", {"path": CHANGELOG, "content": f"# Changelog\n\n## Unreleased\n\n{w.entry}\n"})
    outcome = FAM.check(env)
    assert not outcome.passed and "removed, changed or reordered" in failed(outcome)["changelog_entry"]
    del env.files[CHANGELOG]
    assert "deleted" in failed(FAM.check(env))["changelog_entry"]


def test_no_changelog_requirement_unless_the_task_asks():
    inst = next(i for i in FAM.generate("val") if FAM.world(i.seed, i.params).entry is None)
    outcome, _ = FAM.reference_solve(inst)
    assert "changelog_entry" not in {r["id"] for r in outcome.detail["requirements"]}


def test_search_results_not_seen_changes_only_one_file_and_fails():
    for kind in ("rename", "extract", "deprecated"):
        inst = instance_with(kind=kind)
        outcome = FAM.check(solved_env(FAM, inst, replace(FULL, cut=frozenset({1}))))
        assert not outcome.passed and failed(outcome), kind


def test_hand_made_wrong_states_fail_with_reasons_naming_the_agents_own_lines():
    # rename: a test file still uses the old name
    inst = instance_with(kind="rename")
    env = solved_env(FAM, inst, FULL)
    w = env.world
    test_path = next(p for p in w.visible_tests if w.spec["new"] in env.files[p])
    env.files[test_path] = env.files[test_path].replace(w.spec["new"], w.spec["old"])
    reasons = failed(FAM.check(env))
    assert f"the old name `{w.spec['old']}` is still used" in reasons["old_name_gone"] and test_path in reasons["old_name_gone"]
    # extract: helper created, one copy of the block left in place
    inst = instance_with(kind="extract")
    w = FAM.world(inst.seed, inst.params)
    env = solved_env(FAM, inst, FULL)
    first = next(s for s in w.spec["sites"] if not s["near"])
    env.files[first["module"]] = original_files(w)[first["module"]]
    reasons = failed(FAM.check(env))
    copies = sum(not s["near"] for s in w.spec["sites"])
    left_alone = sum(not s["near"] and s["module"] == first["module"] for s in w.spec["sites"])
    assert reasons["helper_called_at_every_copy"].startswith(f"{left_alone} of the {copies} functions")
    assert first["name"] in reasons["no_duplicate_block_left"]  # the agent's own function, still holding the block
    # deprecated: one module still calls utcnow
    inst = instance_with(kind="deprecated")
    w = FAM.world(inst.seed, inst.params)
    env = solved_env(FAM, inst, FULL)
    mod = w.spec["sites"][0]["module"]
    env.files[mod] = original_files(w)[mod]
    reasons = failed(FAM.check(env))
    assert mod in reasons["deprecated_call_gone"] and "aware_now_at_every_call_site" in reasons


def test_reasons_count_what_is_missing_without_naming_it():
    """A half-done extraction: the report counts the copies that do not call the helper but does not say
    which functions they are."""
    inst = instance_with(kind="extract")
    w = FAM.world(inst.seed, inst.params)
    env = solved_env(FAM, inst, replace(FULL, cut=frozenset({1})))
    reasons = failed(FAM.check(env))
    untouched = [s["name"] for s in w.spec["sites"] if not s["near"] and s["module"] != w.primary]
    assert untouched and re.match(r"\d+ of the \d+ functions", reasons["helper_called_at_every_copy"])
    assert not any(name in reasons["helper_called_at_every_copy"] for name in untouched)


def test_deleting_or_gutting_tests_does_not_help():
    inst = instance_with(kind="extract")
    env = solved_env(FAM, inst, FULL)
    w = env.world
    for p in w.visible_tests:
        env.files[p] = "def test_nothing():\n    pass\n"
    reasons = failed(FAM.check(env))
    assert "lost test_" in reasons["visible_tests_kept"]
    env = solved_env(FAM, inst, FULL)
    for p in w.visible_tests:
        del env.files[p]
    reasons = failed(FAM.check(env))
    assert f"{w.visible_tests[0]} was deleted" in reasons["visible_tests_kept"]


def test_checker_runs_hidden_tests_against_the_package():
    """A package that passes the AST checks but changes behaviour fails through the (hidden) tests."""
    inst = instance_with(kind="rename")
    env = solved_env(FAM, inst, FULL)
    w = env.world
    mod = w.spec["module"]
    env.files[mod] = env.files[mod].replace("return ", "return None and ", 1)
    outcome = FAM.check(env)
    reasons = failed(outcome)
    assert set(reasons) == {"tests_pass"}
    assert re.match(r"\d+ of the \d+ visible and hidden tests fail: tests/", reasons["tests_pass"])


def test_checker_refuses_package_code_that_reaches_outside():
    inst = instance_with(kind="rename")
    env = solved_env(FAM, inst, FULL)
    mod = env.world.spec["module"]
    env.files[mod] = "import socket\n" + env.files[mod]
    reasons = failed(FAM.check(env))
    assert f"{mod}: imports socket" in reasons["package_imports_allowed"]
    assert "not run" in reasons["tests_pass"]


def test_code_that_does_not_parse_is_reported_by_file_and_line():
    inst = instance_with(kind="deprecated")
    env = solved_env(FAM, inst, FULL)
    mod = env.world.spec["sites"][0]["module"]
    env.files[mod] += "\ndef broken(:\n"
    reasons = failed(FAM.check(env))
    assert re.search(re.escape(mod) + r":\d+: ", reasons["code_parses"])


def test_empty_agent_scores_zero_and_reference_passes_each_kind():
    for kind in ("rename", "extract", "deprecated"):
        inst = instance_with(kind=kind, split="val")
        outcome = FAM.check(FAM.make_env(inst))
        assert not outcome.passed and outcome.score == 0.0
        assert failed(outcome) == {"repository_changed": "the repository is unchanged: no file was edited"}
        assert FAM.reference_solve(inst)[0].passed


def test_partial_credit_is_nine_tenths_of_the_share_of_checks_met():
    inst = instance_with("changelog")
    outcome = FAM.check(solved_env(FAM, inst, Knowledge(FULL.facts, frozenset())))
    checks = [r for r in outcome.detail["requirements"] if r["id"] != "repository_changed"]
    assert outcome.score == round(0.9 * sum(r["passed"] for r in checks) / len(checks), 4)


# ------------------------------------------------------------------ facts, constraints, handbook
PARAPHRASES = {
    "string_references": "When you rename a function, also update the strings that name it, such as the entries of __all__.",
    "method_namesake": "If a class has a method with the same name, leave that method and its calls alone.",
    "near_duplicate": "A block that looks the same but uses a different limit or separator is not a copy; leave it where it is.",
    "block_outputs": "The extracted helper has to hand back the result, and every call site must store it in the variable the later code reads.",
    "aware_datetime": "Aware datetimes cannot be mixed with naive ones; where the code expects naive UTC values, add .replace(tzinfo=None).",
    "changelog": "Changelog entries belong in the Unreleased section, not at the end of the file.",
}
LONE_KEYWORDS = {
    "string_references": "Rename the function everywhere.",
    "method_namesake": "Rename the method with the same name everywhere; do not leave stale calls behind.",
    "near_duplicate": "Extract the duplicated block into a helper.",
    "block_outputs": "Validation helpers return None and callers just call them.",
    "aware_datetime": "Use timezone-aware datetimes.",
    "changelog": "Add a line to CHANGELOG.md.",
}


def test_concepts_recognise_statements_and_paraphrases_not_lone_keywords():
    items = {x.id: x for x in (*FAM.facts, *FAM.constraints)}
    assert set(items) == set(PARAPHRASES) == set(LONE_KEYWORDS)
    for cid, item in items.items():
        assert item.stated_in(item.statement), cid
        assert item.stated_in(PARAPHRASES[cid]), cid
        assert not item.stated_in(LONE_KEYWORDS[cid]), cid
    assert FULL == PLAN_FULL


# ------------------------------------------------------------------ plan
def test_plan_tools_do_not_depend_on_knowledge():
    for inst in FAM.generate("val", 12):
        tools = [s.tool for s in FAM.plan(inst, FULL)]
        for k in (Knowledge(frozenset(), frozenset()), replace(FULL, cut=frozenset({1, 2}))):
            assert [s.tool for s in FAM.plan(inst, k)] == tools
        w = FAM.world(inst.seed, inst.params)
        assert tools[:2] == ["list_files", "search"] and tools[-2:] == ["run_tests", "finish"]
        assert ("write_file" in tools) == (w.entry is not None)


def test_refactored_files_keep_everything_else():
    inst = instance_with(kind="extract")
    w = FAM.world(inst.seed, inst.params)
    before, after = original_files(w), refactored_files(w, FULL)
    assert set(before) <= set(after) and w.spec["hmod"] in after
    assert before["README.md"] == after["README.md"]


# ------------------------------------------------------------------ patch and file tools
def test_apply_patch_multi_file_create_and_atomic():
    files = {"a.py": "x = 1\ny = 2\nz = 3\n", "b.py": "print('b')\n"}
    after = {"a.py": "x = 1\ny = 20\nz = 3\n", "b.py": "print('b')\n", "c.py": "new = True\n"}
    new, changed = apply_patch(files, make_patch(files, after))
    assert new == after and sorted(changed) == ["a.py", "c.py"]
    bad = make_patch(files, after).replace("-y = 2", "-y = 999")
    with pytest.raises(ToolArgError):
        apply_patch(files, bad)
    assert files == {"a.py": "x = 1\ny = 2\nz = 3\n", "b.py": "print('b')\n"}  # unchanged
    env = FAM.make_env(instance_with(kind="rename"))
    before = dict(env.files)
    r = env.call("apply_patch", {"patch": "--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-a\n+b\n"})
    assert r.error and env.files == before
    assert env.call("apply_patch", {"patch": "not a diff"}).error


def test_file_tools_report_bad_input_as_errors():
    env = FAM.make_env(instance_with(kind="deprecated"))
    for tool, args in (
        ("read_file", {"path": "../etc/passwd"}),
        ("read_file", {"path": "/etc/passwd"}),
        ("read_file", {"path": "missing.py"}),
        ("write_file", {"path": "x.py"}),
        ("search", {"pattern": ""}),
        ("search", {"pattern": "x", "context": 99}),
        ("run_tests", {"path": "README.md"}),
    ):
        r = env.call(tool, args)
        assert r.error and r.content.startswith("error"), (tool, args, r.content)
    listing = env.call("list_files", {}).content
    assert "CHANGELOG.md" in listing and "tests/" in listing
    hits = env.call("search", {"pattern": "utcnow", "context": 1}).content
    assert "utcnow" in hits and "matching lines" in hits


# ------------------------------------------------------------------ sandbox through the env
EVIL = {
    "loop": "def test_loop():\n    while True:\n        pass\n",
    "memory": "def test_memory():\n    hog = []\n    while True:\n        hog.append(bytearray(2**24))\n",
    "socket": "import socket\n\n\ndef test_socket():\n    socket.create_connection(('example.com', 80), timeout=1)\n",
    "write": "def test_write():\n    with open('/tmp/coevolve_refactor_escape.txt', 'w') as f:\n        f.write('x')\n",
}


@pytest.mark.parametrize("what", sorted(EVIL))
def test_sandbox_stops_or_refuses_model_code_and_env_reports_an_error(what):
    import os

    env = FAM.make_env(instance_with(kind="rename"))
    assert env.call("write_file", {"path": "tests/test_evil.py", "content": EVIL[what]}).content.startswith("wrote")
    r = env.call("run_tests", {"path": "tests/test_evil.py"})
    assert r.error and r.content.startswith("error: the sandbox stopped"), r.content
    expect = {"loop": "timeout", "memory": ("memory", "timeout"), "socket": "network", "write": "filesystem"}[what]
    assert any(e in r.content for e in ((expect,) if isinstance(expect, str) else expect)), r.content
    assert not os.path.exists("/tmp/coevolve_refactor_escape.txt")
    # the env still works afterwards, and a normal run is not an error
    ok = env.call("run_tests", {"path": min(p for p in env.files if p.startswith("tests/test_") and p != "tests/test_evil.py")})
    assert not ok.error and "passed" in ok.content


# A 137-character test whose run printed a 1,155,817-character observation (issue 24.5): 99,999 distinct
# lines that look like the sandbox's violation lines (each one quoted in the stop reason, which the
# observation held twice) and a failing assertion.
LOUD = 'def test_loud():\n    for i in range(99999):\n        print("\\n[sandbox-violation] disk:", i)\n    assert repr(list(range(99999))) == "", i\n'


def test_a_short_test_cannot_flood_the_run_tests_observation():
    from coevolve.sandbox import MAX_STOPPED_CHARS
    from coevolve.tasks.refactor.env import RUN_TESTS_CHARS

    assert len(LOUD) == 137
    env = FAM.make_env(instance_with(kind="rename"))
    assert env.call("write_file", {"path": "tests/test_loud.py", "content": LOUD}).content.startswith("wrote")
    out = env.tool_run_tests("tests/test_loud.py")  # the tool itself, before TaskEnv.call's own cut
    assert len(out.content) <= RUN_TESTS_CHARS, len(out.content)
    assert out.error and out.content.startswith("error: the sandbox stopped the test run: disk: 0;")
    assert out.content.rstrip().endswith("more violation lines")  # 20 quoted, the rest counted
    assert "tests/test_loud.py::test_loud FAILED" in out.content
    stopped = out.content.split("\n", 1)[0]
    assert len(stopped) <= MAX_STOPPED_CHARS + 100


def test_a_checker_reason_holds_a_bounded_piece_of_what_the_package_raised():
    """A package function that raises with a megabyte of message: the grader's reason stays short."""
    inst = instance_with(kind="rename")
    env = solved_env(FAM, inst, FULL)
    mod = env.world.spec["module"]
    env.files[mod] = env.files[mod].replace("    return ", "    raise ValueError('x' * 10**6 + ' the end')\n    return ", 1)
    reason = failed(FAM.check(env))["tests_pass"]
    assert "ValueError: xxxx" in reason and len(reason) < 3_000, len(reason)


# ------------------------------------------------------------------ results that do not depend on the clock
def test_sandbox_report_and_stop_reason_hold_no_measured_duration():
    from coevolve.sandbox import SandboxResult, TestResult

    tests = (TestResult("tests/test_a.py::test_one", "passed"), TestResult("tests/test_a.py::test_two", "failed", "boom"))
    quick = SandboxResult(0, "", "", 0.01, tests=tests)
    slow = replace(quick, duration_s=7.25)
    assert quick.report() == slow.report()
    assert quick.report().endswith("=== 1 passed, 1 failed ===")
    stopped = SandboxResult(None, "", "", 15.02, timed_out=True, completed=False, wall_limit_s=15.0)
    assert stopped.stopped == replace(stopped, duration_s=16.9).stopped
    assert "15 s wall-clock limit" in (stopped.stopped or "")


def _evolve_refactor(root: Path) -> tuple[str, int, float, int]:
    """A small refactor evolution (seed 1 accepts two edits), in-process: final harness id, rollouts,
    evolved val, accepted edits."""
    from coevolve.agents.meta import Budget, EvolveConfig, HarnessEvolution, LLMProposer
    from coevolve.store.store import HarnessStore
    from tests.rollouts import InProcessEvaluator, proposer_complete

    config = EvolveConfig(family="refactor", model="synthetic/weak", seed=1, train_batch=8, val_n=12, candidates=2,
                          plateau=2, budget=Budget(iterations=3, rollouts=10_000))
    store = HarnessStore(root)
    run_id = store.create_run("evolve", config.to_json())
    proposer = LLMProposer(config.proposer, FunctionClient(proposer_complete), FAM.handbook)
    result = HarnessEvolution(config, InProcessEvaluator(), proposer, store, run_id).run()
    return result.harness_id, result.rollouts_used, result.evolved_val, len(result.accepted)


@pytest.mark.slow  # about 90 s on the shared 2-core machine
def test_refactor_evolution_is_the_same_on_a_quiet_and_a_loaded_machine(tmp_path, monkeypatch):
    """Issue 24.3: sandbox durations reached the observations, the evidence and the proposer's seed, so a
    loaded machine evolved another harness. The second run has every CPU busy and, to make the clock's
    part certain rather than likely, every sandbox run reports a far longer duration."""
    import subprocess
    import sys

    from coevolve import sandbox

    quiet = _evolve_refactor(tmp_path / "quiet")

    real_run_tests = sandbox.run_tests

    def slow_clock(*args, **kwargs):
        result = real_run_tests(*args, **kwargs)
        return replace(result, duration_s=round(result.duration_s * 13 + 1.37, 3))

    monkeypatch.setattr(sandbox, "run_tests", slow_clock)
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    try:
        loaded = _evolve_refactor(tmp_path / "loaded")
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    assert loaded == quiet
    assert quiet[3] >= 1, "the run must accept an edit for the harness id to mean something"
