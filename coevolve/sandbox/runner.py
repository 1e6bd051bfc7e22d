"""The sandbox's calls: `run_python`, `run_tests` and `run_graded_tests` (with `expected_test_ids`, the
tests a graded run must report): each builds the fork server's request, runs it in this process's sandbox
and reads the reply into a `SandboxResult`."""

from __future__ import annotations

import ast
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import PurePosixPath

from coevolve.sandbox.box import WORK_MB, _Plan, _plan
from coevolve.sandbox.results import MAX_MESSAGE_CHARS, Limits, SandboxError, SandboxResult, TestResult
from coevolve.sandbox.server import _Zygote
from coevolve.sandbox.syntax import parse_python
from coevolve.text import bounded

MARK = "\x1esbx "  # prefix of the runners' record lines (on the run's record channel, fd 3, never stdout)
VIOLATION = "[sandbox-violation] "
MAX_VIOLATIONS = 20  # distinct violation lines a result keeps (the run writes them; it may write millions)


def _safe_rel(path: str) -> str:
    p = PurePosixPath(path)
    if not path or p.is_absolute() or ".." in p.parts or "\\" in path or "\x00" in path:
        raise SandboxError(f"bad path {path!r}")
    return str(p)


def _request(files: Mapping[str, str], mode: str, paths: list[str], limits: Limits, plan: _Plan,
             tests: Mapping[str, str] | None = None, packages: Sequence[str] = ()) -> bytes:
    """The fork server's request: a header line, the JSON request (files, runner arguments) and, for a
    graded run, the JSON tests, which only the graded runner reads (after the package's process started)."""
    extra = 3 if mode == "graded" else 1  # the fork server, and the graded runner and the package's process
    args = [
        MARK, VIOLATION, str(limits.processes + extra) if plan.kind == "box" else "-",
        str(limits.memory_mb * 2**20), str(limits.cpu_s), str(limits.output_bytes), str(limits.open_files),
        str(limits.per_test_s),
    ]
    body = json.dumps({"files": dict(files), "mode": mode, "args": args, "paths": paths, "packages": list(packages)}).encode()
    more = json.dumps(dict(tests)).encode() if tests is not None else b""
    header = b"%d %d %r %d %d\n" % (len(body), len(more), float(limits.wall_s), limits.output_bytes, limits.inodes)
    return header + body + more


def _records(text: str) -> tuple[dict[str, TestResult], bool]:
    """The run's records (test id -> result) and whether the runner reached its end."""
    tests: dict[str, TestResult] = {}
    completed = False
    for line in text.split("\n"):
        if not line.startswith(MARK):
            continue
        try:
            tid, outcome, message = ast.literal_eval(parse_python(line[len(MARK) :], mode="eval"))
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if tid == "<end>":
            completed = True
        elif isinstance(tid, str) and len(tid) <= 1000:
            tests[tid] = TestResult(tid, str(outcome)[:16], bounded(str(message), MAX_MESSAGE_CHARS))
    return tests, completed


def _run(files: Mapping[str, str], mode: str, paths: list[str], limits: Limits,
         tests: Mapping[str, str] | None = None, packages: Sequence[str] = ()) -> SandboxResult:
    plan = _plan()
    tree = {_safe_rel(rel): content for rel, content in files.items()}
    reply = _Zygote.run(plan, _request(tree, mode, paths, limits, plan, tests, packages), limits.wall_s)
    if reply is None:  # the sandbox itself stopped answering; it was killed
        return SandboxResult(None, "", "", float(limits.wall_s), timed_out=True, completed=False, isolation=plan.layers,
                             wall_limit_s=limits.wall_s)
    if "error" in reply:
        return SandboxResult(None, "", str(reply["error"]), 0.0, violations=(f"sandbox: {reply['error']}",),
                             completed=False, isolation=plan.layers, wall_limit_s=limits.wall_s)
    timed_out = bool(reply["timed_out"])
    stdout = reply["out"] + ("\n...[output truncated]" if reply["out_cut"] else "")
    stderr = reply["err"] + ("\n...[output truncated]" if reply["err_cut"] else "")
    records, completed = _records(reply["res"])
    found = dict.fromkeys(line[len(VIOLATION) :].strip() for line in stderr.splitlines() if line.startswith(VIOLATION))
    violations = tuple(bounded(v, 300) for v in list(found)[:MAX_VIOLATIONS])
    if len(found) > MAX_VIOLATIONS:
        violations += (f"... and {len(found) - MAX_VIOLATIONS} more violation lines",)
    if reply.get("inodes"):
        violations += ((f"disk: the run made more than {limits.inodes} files, directories and links on the "
                        "sandbox's disk (its inode limit) and was stopped"),)
    if reply.get("disk_full"):
        violations += ((f"disk: the sandbox's {WORK_MB} MiB disk was full (ENOSPC, no space left on device); "
                        "the output and results up to then are kept"),)
    if not timed_out and not completed and "MemoryError" in stderr:
        violations += ("memory: the run exceeded the memory limit",)
    return SandboxResult(
        returncode=None if timed_out else os.waitstatus_to_exitcode(int(reply["status"])),
        stdout=stdout,
        stderr="\n".join(line for line in stderr.splitlines() if not line.startswith(VIOLATION)).strip(),
        duration_s=round(float(reply["duration"]), 3),
        timed_out=timed_out,
        violations=violations,
        tests=tuple(records.values()),
        completed=completed,
        isolation=plan.layers,
        wall_limit_s=limits.wall_s,
    )


def run_tests(files: Mapping[str, str], test_paths: Sequence[str], limits: Limits = Limits()) -> SandboxResult:  # noqa: B008 - Limits is frozen
    """Run the `test_*` functions of `test_paths` (paths inside `files`) in a fresh sandbox. The tests and
    the code they test share one process, so the code can write the run's records itself: this is the
    agent's own test run, never a grader's (a grader uses `run_graded_tests`)."""
    paths = [_safe_rel(p) for p in test_paths]
    missing = [p for p in paths if p not in files]
    if missing:
        raise SandboxError(f"test files not in the tree: {missing}")
    return _run(files, "tests", paths, limits)


def run_python(files: Mapping[str, str], script: str, limits: Limits = Limits()) -> SandboxResult:  # noqa: B008 - Limits is frozen
    """Run one script of `files` as __main__ in a fresh sandbox; its result is one TestResult."""
    script = _safe_rel(script)
    if script not in files:
        raise SandboxError(f"script {script!r} not in the tree")
    return _run(files, "script", [script], limits)


def expected_test_ids(tests: Mapping[str, str]) -> list[str]:
    """The ids (`path::name`) of the test functions the graded runner runs: the top-level `def test*` of
    each file, by the syntax tree, in file order and then source order."""
    ids: list[str] = []
    for path in sorted(tests):
        tree = parse_python(tests[path])
        names = [n.name for n in getattr(tree, "body", []) if isinstance(n, ast.FunctionDef) and n.name.startswith("test")]
        ids += [f"{path}::{name}" for name in dict.fromkeys(names)]
    return ids


def run_graded_tests(package: Mapping[str, str], tests: Mapping[str, str], limits: Limits = Limits()) -> SandboxResult:  # noqa: B008 - Limits is frozen
    """A grader's test run: the tests (path -> source, the caller's own) against the package (path ->
    source), in a fresh sandbox, with verdicts the package's code cannot write.

    The tests run in a trusted runner that never runs the package's code; the package runs in its own
    process (forked before the runner read the tests: the tests are in no file and no memory it can
    reach), and the runner calls it through references, getting back plain values (builtin scalars and
    containers, dates and times, Decimal, Fraction) that it compares in its own memory. Only the runner
    holds the record channel. The result lists exactly `expected_test_ids(tests)`: a test that was not
    reported is an error, a record for any other id makes the run fail (it cannot come from the runner),
    and the run passes only if every expected test passed and the runner reached its end."""
    pkg = {_safe_rel(p): c for p, c in package.items()}
    srcs = {_safe_rel(p): c for p, c in tests.items()}
    if not srcs or not all(p.endswith(".py") for p in srcs):
        raise SandboxError("graded tests must be one or more .py files")
    if set(pkg) & set(srcs):
        raise SandboxError(f"paths both in the package and the tests: {sorted(set(pkg) & set(srcs))}")
    tops = sorted({p.split("/", 1)[0].removesuffix(".py") for p in pkg})
    shadowing = [t for t in tops if t in sys.stdlib_module_names or t in ("pytest", "tests") or not t.isidentifier()]
    if shadowing:
        raise SandboxError(f"package names the graded runner cannot route: {shadowing}")
    expected = expected_test_ids(srcs)
    result = _run(pkg, "graded", sorted(srcs), limits, tests=srcs, packages=tops)
    got = {t.id: t for t in result.tests}
    uncollected = {t.id.removesuffix("::<collect>") for t in result.tests if t.id.endswith("::<collect>")}
    ordered: list[TestResult] = [got[f"{p}::<collect>"] for p in sorted(uncollected) if p in srcs]
    for tid in expected:
        path = tid.split("::", 1)[0]
        if tid in got:
            ordered.append(got[tid])
        elif path in uncollected:
            ordered.append(TestResult(tid, "error", f"not run: {path} could not be collected"))
        else:
            ordered.append(TestResult(tid, "error", "not run: the test run ended before this test was reported"))
    unknown = sorted(set(got) - set(expected) - {f"{p}::<collect>" for p in srcs})
    violations = result.violations
    if unknown:
        violations += ((f"protocol: the run reported {len(unknown)} test(s) the grader does not know: "
                        f"{bounded(', '.join(unknown), 300)}"),)
    return replace(result, tests=tuple(ordered), violations=violations)
