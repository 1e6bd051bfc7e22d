"""Refactor family: checker mutations per trap, hand-made wrong states, patch tool, sandbox through the
env, and the harness lever (a recipe stating a missing fact) on the weak model."""

from __future__ import annotations

from dataclasses import replace

import pytest

from harness_store.edits import apply_edit
from harness_store.values import AddRecipe, HarnessEdit, Recipe
from tasks import get_family, sandbox
from tasks.base import Knowledge, ToolArgError
from tasks.refactor import CHANGELOG, apply_patch, make_patch, original_files, refactored_files
from tests.rollouts import pass_rate, rollout_all

FAM = get_family("refactor")
FULL = FAM.full_knowledge()
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


def solved_env(inst, knowledge: Knowledge):
    env = FAM.make_env(inst)
    for step in FAM.plan(inst, knowledge):
        result = env.call(step.tool, dict(step.args))
        assert not result.error, (step.tool, result.content[:500])
    return env


@pytest.mark.parametrize("trap", sorted(TRAP_FACT))
def test_each_trap_left_unhandled_fails_the_checker(trap):
    inst = instance_with(trap)
    assert FAM.check(solved_env(inst, FULL)).passed
    without = Knowledge(FULL.facts - {TRAP_FACT[trap]}, FULL.constraints)
    outcome = FAM.check(solved_env(inst, without))
    assert not outcome.passed and outcome.score < 1.0, outcome.detail


def test_facts_without_their_trap_do_not_matter():
    """The wrong branch only bites where the trap is present (so the fact is what makes the difference)."""
    for kind, fact, trap in (("deprecated", "aware_datetime", "naive_mix"), ("rename", "string_references", "all_list")):
        for inst in FAM.generate("train"):
            w = FAM.world(inst.seed, inst.params)
            if w.kind == kind and trap not in w.traps and "changelog" not in w.traps and len(w.traps) == 0:
                assert FAM.check(solved_env(inst, Knowledge(FULL.facts - {fact}, FULL.constraints))).passed
                break


def test_changelog_in_the_wrong_place_or_rewritten_fails():
    inst = instance_with("changelog")
    assert not FAM.check(solved_env(inst, Knowledge(FULL.facts, frozenset()))).passed
    env = solved_env(inst, FULL)
    assert FAM.check(env).passed
    w = env.world
    env.call("write_file", {"path": CHANGELOG, "content": f"# Changelog\n\n## Unreleased\n\n{w.entry}\n"})
    outcome = FAM.check(env)
    assert not outcome.passed and not outcome.detail["checks"]["changelog entry"]


def test_search_results_not_seen_changes_only_one_file_and_fails():
    for kind in ("rename", "extract", "deprecated"):
        inst = instance_with(kind=kind)
        assert not FAM.check(solved_env(inst, replace(FULL, cut=frozenset({1})))).passed


def test_hand_made_wrong_states_fail():
    # rename: a test file still uses the old name
    inst = instance_with(kind="rename")
    env = solved_env(inst, FULL)
    w = env.world
    test_path = next(p for p in w.visible_tests if w.spec["new"] in env.files[p])
    env.files[test_path] = env.files[test_path].replace(w.spec["new"], w.spec["old"])
    outcome = FAM.check(env)
    assert not outcome.passed and not outcome.detail["checks"]["old name gone"]
    # extract: helper created, one copy of the block left in place
    inst = instance_with(kind="extract")
    w = FAM.world(inst.seed, inst.params)
    env = solved_env(inst, FULL)
    first = next(s for s in w.spec["sites"] if not s["near"])
    env.files[first["module"]] = original_files(w)[first["module"]]
    outcome = FAM.check(env)
    assert not outcome.passed
    assert not outcome.detail["checks"]["helper used at every copy"]
    assert not outcome.detail["checks"]["no duplicate block left"]
    # deprecated: one module still calls utcnow
    inst = instance_with(kind="deprecated")
    w = FAM.world(inst.seed, inst.params)
    env = solved_env(inst, FULL)
    mod = w.spec["sites"][0]["module"]
    env.files[mod] = original_files(w)[mod]
    outcome = FAM.check(env)
    assert not outcome.passed and not outcome.detail["checks"]["deprecated call gone"]


def test_deleting_or_gutting_tests_does_not_help():
    inst = instance_with(kind="extract")
    env = solved_env(inst, FULL)
    w = env.world
    for p in w.visible_tests:
        env.files[p] = "def test_nothing():\n    pass\n"
    assert not FAM.check(env).passed
    env = solved_env(inst, FULL)
    for p in w.visible_tests:
        del env.files[p]
    assert not FAM.check(env).passed


def test_checker_runs_hidden_tests_against_the_package():
    """A package that passes the AST checks but changes behaviour fails through the (hidden) tests."""
    inst = instance_with(kind="rename")
    env = solved_env(inst, FULL)
    w = env.world
    mod = w.spec["module"]
    env.files[mod] = env.files[mod].replace("return ", "return None and ", 1)
    outcome = FAM.check(env)
    assert not outcome.passed
    assert outcome.detail["checks"]["old name gone"] and not outcome.detail["checks"]["visible and hidden tests pass"]
    assert outcome.detail["failed_tests"]


def test_checker_refuses_package_code_that_reaches_outside():
    inst = instance_with(kind="rename")
    env = solved_env(inst, FULL)
    mod = env.world.spec["module"]
    env.files[mod] = "import socket\n" + env.files[mod]
    outcome = FAM.check(env)
    assert not outcome.passed and any("imports socket" in u for u in outcome.detail["unsafe"])


def test_empty_agent_scores_zero_and_reference_passes_each_kind():
    for kind in ("rename", "extract", "deprecated"):
        inst = instance_with(kind=kind, split="val")
        outcome = FAM.check(FAM.make_env(inst))
        assert not outcome.passed and outcome.score == 0.0
        assert FAM.reference_solve(inst)[0].passed


# ------------------------------------------------------------------------------------ patch tool
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


# ------------------------------------------------------------------------- sandbox through the env
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


def test_sandbox_memory_limit_and_wall_clock_directly():
    files = {"t/test_m.py": EVIL["memory"], "loop.py": "while True:\n    pass\n"}
    r = sandbox.run_tests(files, ["t/test_m.py"], sandbox.Limits(memory_mb=128, per_test_s=20, wall_s=30))
    assert r.stopped and "memory" in r.stopped and r.tests[0].outcome == "error"
    r = sandbox.run_python(files, "loop.py", sandbox.Limits(per_test_s=60, wall_s=1.5))
    assert r.timed_out and "wall-clock" in (r.stopped or "")
    assert {"rlimits", "audit-hook", "temp-dir", "wall-clock"} <= set(r.isolation)


def test_sandbox_runs_leave_nothing_behind_and_share_nothing():
    files = {"t/test_a.py": "import os\n\n\ndef test_a():\n    open('mark.txt', 'w').write('1')\n    assert os.path.exists('mark.txt')\n",
             "t/test_b.py": "import os\n\n\ndef test_b():\n    assert not os.path.exists('mark.txt')\n"}
    assert sandbox.run_tests(files, ["t/test_a.py"]).all_passed
    assert sandbox.run_tests(files, ["t/test_b.py"]).all_passed


def test_fork_server_is_restarted_when_it_dies():
    files = {"t/test_ok.py": "def test_ok():\n    assert True\n"}
    assert sandbox.run_tests(files, ["t/test_ok.py"]).all_passed
    proc = sandbox._Zygote._proc
    if proc is not None:
        proc.kill()
        proc.wait()
    assert sandbox.run_tests(files, ["t/test_ok.py"]).all_passed


def test_printing_fake_results_does_not_forge_a_pass():
    files = {"t/test_f.py": f"def test_f():\n    print({sandbox.MARK!r} + repr(('t/test_f.py::test_f', 'passed', '')))\n    assert False\n"}
    r = sandbox.run_tests(files, ["t/test_f.py"])
    assert [t.outcome for t in r.tests] == ["failed"]


# ------------------------------------------------------------------------------- harness lever
def test_missing_domain_recipe_raises_weak_pass_rate():
    val = FAM.generate("val")
    base = FAM.baseline_harness()
    before = rollout_all(val, base, "synthetic/weak")
    missing = [f for t in before for c in t.causes if c.get("category") == "implicit-knowledge" for f in c["facts"]]
    top = max(sorted(set(missing)), key=missing.count)
    fact = next(f for f in FAM.facts if f.id == top)
    edited = apply_edit(base, HarnessEdit((AddRecipe(Recipe(fact.id, fact.statement)),), rationale="state missing fact"))
    after = rollout_all(val, edited, "synthetic/weak")
    still = [f for t in after for c in t.causes if c.get("category") == "implicit-knowledge" for f in c["facts"]]
    assert top not in still
    assert pass_rate(after) > pass_rate(before), (pass_rate(before), pass_rate(after))


def test_refactored_files_keep_everything_else():
    inst = instance_with(kind="extract")
    w = FAM.world(inst.seed, inst.params)
    before, after = original_files(w), refactored_files(w, FULL)
    assert set(before) <= set(after) and w.spec["hmod"] in after
    assert before["README.md"] == after["README.md"]
