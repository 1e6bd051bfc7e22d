"""The refactor grader cannot be forged by the code it grades (issue 24.1).

A solution broken on purpose (one trap left unhandled, so the visible and hidden tests fail) carries a
payload in its package; whatever the payload does inside the sandbox — result-looking lines on any fd,
`os._exit(0)` at import or inside a test, patching the runner, pytest's shim or `sys.modules`, atexit
handlers, rewriting the test files, killing other processes, always-equal return values — the grader's
test requirement still fails and the score is never above the broken solution's own. The honest
reference solution still passes. The payloads reach `exec` through `enum.bltns.exec` (the finding's
route, now refused by the task's module-attribute rule) and through `operator.attrgetter` (which that
rule lets through: it is a task rule, not the security boundary), so the tests below call the test run
directly as well as through the whole checker.
"""

from __future__ import annotations

import pytest

from coevolve import sandbox
from coevolve.tasks import get_family
from coevolve.tasks.base import Knowledge
from coevolve.tasks.refactor.checker import (
    HIDDEN_TESTS,
    expected_test_ids,
    run_checker_tests,
    safety_problems,
)
from coevolve.tasks.refactor.plan import canonical_tests

FAM = get_family("refactor")
FULL = FAM.full_knowledge()
TRAP_FACT = {"outputs": "block_outputs", "naive_mix": "aware_datetime", "namesake": "method_namesake"}

# What every payload can do: switch the audit hook off, then write result records for every test id it
# can find or guess, in the runner's record format, to every fd it holds or can open through /proc.
FORGE = r'''
import ast, gc, glob, os, sys
def _hook_off():  # the in-process audit hook goes first (its re-entrancy flag): the kernel is the boundary
    for _o in gc.get_objects():
        if getattr(_o, "__name__", None) == "_hook" and getattr(_o, "__closure__", None):
            for _c in _o.__closure__:
                if isinstance(_c.cell_contents, list) and _c.cell_contents == [False]:
                    _c.cell_contents[0] = True
_hook_off()
def _ids():
    ids = []
    for p in sorted(glob.glob("tests/*.py")) + sorted(glob.glob("*/tests/*.py")):
        try:
            t = ast.parse(open(p).read())
        except Exception:
            continue
        ids += [p + "::" + n.name for n in t.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test")]
    for name, mod in list(sys.modules.items()):
        f = getattr(mod, "__file__", "") or ""
        if f.startswith(os.getcwd()):
            for fn in list(vars(mod)):
                if not fn.startswith("_"):
                    ids.append("tests/test_hidden_checks.py::test_hidden_" + fn)
                    ids.append("tests/test_hidden_checks.py::test_hidden_" + fn.lower() + "_method")
    ids += ["tests/test_hidden_checks.py::test_hidden_public_names", "tests/test_hidden_checks.py::test_hidden_reexport"]
    return list(dict.fromkeys(ids))
def _records():
    mark = "\x1esbx "
    out = "".join(mark + repr((i, "passed", "")) + "\n" for i in _ids())
    return (out + mark + repr(("<end>", "", "")) + "\n").encode()
def _write_all(fds=range(64)):
    _hook_off()
    data = _records()
    for fd in fds:
        try:
            os.write(fd, data)
        except OSError:
            pass
def _write_proc():
    _hook_off()
    data = _records()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            names = os.listdir("/proc/%s/fd" % pid)
        except OSError:
            continue
        for n in names:
            try:
                fd = os.open("/proc/%s/fd/%s" % (pid, n), os.O_WRONLY | os.O_APPEND)
                os.write(fd, data)
                os.close(fd)
            except OSError:
                pass
'''

PAYLOADS = {
    # the finding: result lines on fd 1, then the process ends at import
    "fd1_lines_then_exit_at_import": FORGE + "_write_all([1])\nos._exit(0)\n",
    "fd2_lines_then_exit_at_import": FORGE + "_write_all([2])\nos._exit(0)\n",
    "every_fd_then_exit_at_import": FORGE + "_write_all()\nos._exit(0)\n",
    "proc_fds_then_exit_at_import": FORGE + "_write_proc()\n_write_all()\nos._exit(0)\n",
    # inside a test: the first call into the package from anywhere but the package itself
    "exit_inside_a_test": FORGE + r'''
_pkg = os.getcwd()
def _prof(frame, event, arg):
    caller = frame.f_back.f_code.co_filename if frame.f_back is not None else ""
    if event == "call" and frame.f_code.co_filename.startswith(_pkg) and "/tests/" not in frame.f_code.co_filename \
            and frame.f_code.co_name != "<module>" \
            and ("/tests/" in caller or not caller.startswith(_pkg)):
        _write_all()
        _write_proc()
        os._exit(0)
sys.setprofile(_prof)
''',
    # the runner: its record writer flipped to "passed", pytest's shim made to accept anything
    "patch_the_runner": FORGE + r'''
import gc, contextlib
def _flip(mark, out):
    def _emit(*rec):
        if len(rec) == 3 and rec[1] != "passed" and rec[0] != "<end>":
            rec = (rec[0], "passed", "")
        os.write(out, (mark + repr(rec) + "\n").encode())
    return _emit
for _o in gc.get_objects():
    if callable(_o) and getattr(_o, "__name__", "") in ("_emit", "_record", "_send_record") and getattr(_o, "__closure__", None):
        try:
            cells = dict(zip(_o.__code__.co_freevars, (c.cell_contents for c in _o.__closure__)))
            _o.__code__ = _flip(cells.get("MARK", "\x1esbx "), cells.get("OUT", 1)).__code__
        except Exception:
            pass
    if callable(_o) and getattr(_o, "__name__", "") in ("_enc", "_encode", "_reply", "_answer"):
        try:
            _o.__code__ = (lambda *a, **k: True).__code__
        except Exception:
            pass
class _Any:
    def __eq__(self, other):
        return True
    def __enter__(self):
        return self
    def __exit__(self, *a):
        return True
_pt = sys.modules.get("pytest")
if _pt is not None:
    _pt.raises = lambda *a, **k: _Any()
    _pt.approx = lambda *a, **k: _Any()
''',
    # sys.modules: fakes for the modules the tests import, and for the test modules themselves
    "sys_modules_tricks": FORGE + r'''
import types
class _Any:
    def __eq__(self, other):
        return True
    __ne__ = lambda self, other: False
    __lt__ = __le__ = __gt__ = __ge__ = lambda self, other: True
    def __call__(self, *a, **k):
        return self
    def __getattr__(self, name):
        return self
    def __contains__(self, x):
        return True
    def __enter__(self):
        return self
    def __exit__(self, *a):
        return True
for _name in ("pytest", "time", "datetime"):
    sys.modules[_name] = _Any()
for _p in glob.glob("tests/*.py"):
    sys.modules[_p[:-3].replace("/", ".")] = types.ModuleType("forged")
''',
    "atexit_handler": FORGE + r'''
import atexit, threading
atexit.register(_write_all)
threading._register_atexit(_write_all) if hasattr(threading, "_register_atexit") else None
raise SystemExit(0)
''',
    # the test files rewritten (same names, nothing asserted) before the runner reads them
    "rewrite_tests_at_import": FORGE + r'''
for _p in glob.glob("tests/*.py"):
    try:
        _t = ast.parse(open(_p).read())
        _names = [n.name for n in _t.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test")]
        with open(_p, "w") as _f:
            _f.write("".join("def %s():\n    pass\n" % n for n in _names))
    except Exception:
        pass
''',
    "kill_everything_else": FORGE + r'''
import signal
for _pid in os.listdir("/proc"):
    if _pid.isdigit() and int(_pid) not in (os.getpid(),):
        try:
            os.kill(int(_pid), signal.SIGKILL)
        except OSError:
            pass
_write_all()
os._exit(0)
''',
}

# How a payload reaches exec from package code.
CARRIERS = {
    "enum_bltns": lambda src: f"import enum\nenum.bltns.exec({src!r})\n",
    "attrgetter": lambda src: (
        f"import operator\n\n\ndef _carrier():\n    pass\n\n\n"
        f"operator.attrgetter('__builtins__')(_carrier)['exec']({src!r}, {{}})\n"
    ),
}

ALWAYS_EQUAL = '''

class Total:
    """Compares equal to anything."""

    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    def __hash__(self):
        return 0
'''


def instance_with(trap: str):
    for inst in FAM.generate("train"):
        if trap in FAM.world(inst.seed, inst.params).traps:
            return inst
    raise AssertionError(trap)


def solved(inst, knowledge: Knowledge):
    env = FAM.make_env(inst)
    for step in FAM.plan(inst, knowledge):
        assert not env.call(step.tool, dict(step.args)).error
    return env


def broken(trap: str):
    inst = instance_with(trap)
    env = solved(inst, Knowledge(FULL.facts - {TRAP_FACT[trap]}, FULL.constraints))
    outcome = FAM.check(env)
    assert not outcome.passed and not _req(outcome, "tests_pass")
    return env, outcome


def _req(outcome, rid: str) -> bool:
    return next(r["passed"] for r in outcome.detail["requirements"] if r["id"] == rid)


def _with_payload(env, payload: str, carrier: str) -> dict[str, str]:
    init = f"{env.world.pkg}/__init__.py"
    files = dict(env.files)
    files[init] = CARRIERS[carrier](PAYLOADS[payload]) + files[init]
    return files


@pytest.fixture(scope="module")
def broken_envs():
    return {trap: broken(trap) for trap in TRAP_FACT}


# ------------------------------------------------------------------------- the test run itself
@pytest.mark.parametrize("payload", sorted(PAYLOADS))
@pytest.mark.parametrize("trap", sorted(TRAP_FACT))
def test_a_payload_in_the_package_never_turns_failing_tests_into_a_pass(payload, trap, broken_envs):
    env, _ = broken_envs[trap]
    files = _with_payload(env, payload, "enum_bltns")
    req = run_checker_tests(env.world, files)
    assert not req.passed, (payload, trap, req)
    assert req.reason


ENDS_THE_RUN = ("atexit_handler", "every_fd_then_exit_at_import", "exit_inside_a_test", "fd1_lines_then_exit_at_import",
                "fd2_lines_then_exit_at_import", "kill_everything_else", "proc_fds_then_exit_at_import")


@pytest.mark.parametrize("payload", ENDS_THE_RUN)
def test_beside_a_correct_solution_a_payload_that_ends_the_run_fails_it(payload):
    """Ending the process after forged records was a complete, passing run before; now the tests that
    could not run are errors."""
    env = solved(instance_with("outputs"), FULL)
    req = run_checker_tests(env.world, _with_payload(env, payload, "enum_bltns"))
    assert not req.passed and ("fail" in req.reason or "could not be loaded" in req.reason), (payload, req)


def test_beside_a_correct_solution_rewriting_the_test_files_changes_nothing():
    """The tests are not on the package's disk: what it rewrites is not what runs."""
    env = solved(instance_with("outputs"), FULL)
    assert run_checker_tests(env.world, _with_payload(env, "rewrite_tests_at_import", "enum_bltns")).passed
    w = env.world
    result = sandbox.run_graded_tests(
        {p: c for p, c in _with_payload(env, "rewrite_tests_at_import", "enum_bltns").items() if p.startswith(f"{w.pkg}/")},
        canonical_tests(w))
    assert [t.id for t in result.tests] == expected_test_ids(canonical_tests(w))


def test_an_always_equal_return_value_does_not_pass_a_broken_function():
    """No exec needed: a function that returns an object comparing equal to anything."""
    inst = instance_with("namesake")
    env = solved(inst, FULL)
    w = env.world
    mod = w.spec["module"]
    env.files[mod] += ALWAYS_EQUAL
    env.files[mod] = env.files[mod].replace("    return ", "    return Total()\n    return ", 1)
    assert not safety_problems(sandbox.parse_python(env.files[mod]), w.pkg)
    outcome = FAM.check(env)
    assert not outcome.passed and not _req(outcome, "tests_pass"), outcome.detail


# ------------------------------------------------------------------------- the whole checker
@pytest.mark.parametrize("payload", ["fd1_lines_then_exit_at_import", "exit_inside_a_test", "patch_the_runner",
                                     "rewrite_tests_at_import"])
def test_through_the_whole_checker_the_score_never_rises(payload, broken_envs):
    env, before = broken_envs["outputs"]
    for carrier in CARRIERS:
        forged = FAM.make_env(env.instance)
        forged.files = _with_payload(env, payload, carrier)
        after = FAM.check(forged)
        assert not after.passed and after.score <= before.score, (payload, carrier, before.score, after.score)
        assert not _req(after, "tests_pass") or not _req(after, "package_imports_allowed")


def test_the_finding_route_is_refused_by_the_task_rule_and_the_other_is_not():
    """`enum.bltns` (a module attribute outside enum's public names) is refused by the task's rule; the
    attrgetter route passes the rule, which is why the test run, not the rule, is the boundary."""
    env, _ = broken("outputs")
    pkg = env.world.pkg
    bltns = sandbox.parse_python(CARRIERS["enum_bltns"]("pass"))
    assert any("enum.bltns" in p for p in safety_problems(bltns, pkg))
    assert safety_problems(sandbox.parse_python(CARRIERS["attrgetter"]("pass")), pkg) == []


def test_the_reference_solution_still_passes_and_every_expected_test_is_reported():
    for trap in TRAP_FACT:
        env = solved(instance_with(trap), FULL)
        w = env.world
        outcome = FAM.check(env)
        assert outcome.passed and outcome.score == 1.0, outcome.detail
        ids = expected_test_ids(canonical_tests(w))
        assert any(i.startswith(HIDDEN_TESTS + "::") for i in ids) and len(ids) >= 5
