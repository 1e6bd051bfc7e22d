"""The refactor services: an in-memory repository behind file tools (list, read, search, write, apply a
unified diff) and a test runner. Every run of code the agent wrote happens in `coevolve.sandbox` (a fresh
subprocess with time/memory limits, a temp directory, no network)."""

from __future__ import annotations

import re
from typing import Annotated, Any

from coevolve import sandbox
from coevolve.tasks.base import FINISH_TOOL, TaskEnv, ToolArgError, ToolResult
from coevolve.tasks.refactor.world import RefactorWorld, original_files
from coevolve.tasks.tools import Param, tool_specs
from coevolve.text import bounded
from coevolve.values import TaskInstance, ToolSpec

MAX_FILES = 300
MAX_FILE_CHARS = 200_000
MAX_SEARCH_CHARS = 60_000
PATH_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./-]{0,199}$")
ENV_LIMITS = sandbox.Limits(wall_s=15.0, per_test_s=2.0, cpu_s=10, memory_mb=256)
# run_tests' observation: at most this many characters (the sandbox's stop reason is itself cut at
# sandbox.MAX_STOPPED_CHARS and its report at 6,000), head and tail kept with a marker between
RUN_TESTS_CHARS = 8_000
Line = Annotated[int | None, Param(minimum=1)]


class RefactorEnv(TaskEnv):
    blocking_tools = frozenset({"run_tests"})  # a sandbox subprocess; the other tools are pure Python

    def __init__(self, instance: TaskInstance, world: RefactorWorld):
        super().__init__(instance)
        self.world = world
        self.files: dict[str, str] = original_files(world)

    def tool_specs(self) -> tuple[ToolSpec, ...]:
        return (*TOOLS, FINISH_TOOL)

    def _file(self, path: Any) -> str:
        _check_path(path)
        if path not in self.files:
            raise ToolArgError(f"{path}: no such file (list_files shows the repository)")
        return path

    def tool_list_files(self) -> str:
        """List the repository's files with their line counts."""
        return "\n".join(f"{p} ({c.count(chr(10))} lines)" for p, c in sorted(self.files.items()))

    def tool_read_file(self, path: str, start_line: Line = None, end_line: Line = None) -> str:
        """Read a file of the repository, optionally only lines start_line..end_line (1-based, inclusive)."""
        text = self.files[self._file(path)]
        if start_line is None and end_line is None:
            return text
        for v in (start_line, end_line):
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise ToolArgError("start_line and end_line must be positive integers")
        lines = text.split("\n")
        return "\n".join(lines[(start_line or 1) - 1 : end_line or len(lines)])

    def tool_search(
        self,
        pattern: Annotated[str, Param(minLength=1, maxLength=200)],
        context: Annotated[int, Param(minimum=0, maximum=10)] = 0,
        path: str | None = None,
    ) -> str:
        """Find lines containing a literal string in the repository (like grep -F -n), with `context` lines
        around each match; `path` limits the search to paths starting with it."""
        if not isinstance(pattern, str) or not pattern or len(pattern) > 200:
            raise ToolArgError("pattern must be a non-empty string of at most 200 characters")
        if not isinstance(context, int) or isinstance(context, bool) or not 0 <= context <= 10:
            raise ToolArgError("context must be an integer from 0 to 10")
        if path is not None and (not isinstance(path, str) or len(path) > 200):
            raise ToolArgError("path must be a string prefix such as pkg/ or tests/")
        out: list[str] = []
        hits = 0
        for p, text in sorted(self.files.items()):
            if path and not p.startswith(path):
                continue
            lines = text.split("\n")
            idx = [i for i, ln in enumerate(lines) if pattern in ln]
            if not idx:
                continue
            hits += len(idx)
            shown: set[int] = set()
            for i in idx:
                shown.update(range(max(0, i - context), min(len(lines), i + context + 1)))
            prev = None
            for j in sorted(shown):
                if prev is not None and j != prev + 1:
                    out.append("--")
                sep = ":" if j in idx else "-"
                out.append(f"{p}{sep}{j + 1}{sep}{lines[j]}")
                prev = j
            out.append("--")
        text = "\n".join(out[:-1]) if out else f"no matches for {pattern!r}"
        if len(text) > MAX_SEARCH_CHARS:
            text = text[:MAX_SEARCH_CHARS] + "\n...[truncated]"
        return text + (f"\n({hits} matching lines)" if hits else "")

    def tool_write_file(
        self, path: Annotated[str, Param(pattern="^[A-Za-z0-9_][A-Za-z0-9_./-]*$")], content: str
    ) -> str:
        """Create or overwrite a file with the given content."""
        _check_path(path)
        if not isinstance(content, str):
            raise ToolArgError("content must be a string")
        if len(content) > MAX_FILE_CHARS:
            raise ToolArgError(f"content is longer than {MAX_FILE_CHARS} characters")
        if path not in self.files and len(self.files) >= MAX_FILES:
            raise ToolArgError(f"the repository already has {MAX_FILES} files")
        self.files[path] = content
        return f"wrote {len(content)} characters to {path}"

    def tool_apply_patch(self, patch: Annotated[str, Param(minLength=1)]) -> str:
        """Apply a unified diff (as produced by `diff -u` / `git diff`, one or more files, paths a/... b/...,
        /dev/null to create a file). All hunks apply or none does."""
        if not isinstance(patch, str) or not patch.strip():
            raise ToolArgError("patch must be a non-empty unified diff")
        new, changed = apply_patch(self.files, patch)
        if len(new) > MAX_FILES or any(len(c) > MAX_FILE_CHARS for c in new.values()):
            raise ToolArgError("the patch makes the repository too large")
        self.files = new
        return f"patched {len(changed)} file(s): {', '.join(changed)}"

    def tool_run_tests(self, path: str | None = None) -> ToolResult:
        """Run the repository's tests (all tests/test_*.py, or one file) in a sandbox and report the
        results."""
        if path is not None:
            self._file(path)
            tests = [path]
        else:
            tests = sorted(p for p in self.files if p.startswith("tests/") and p.rsplit("/", 1)[-1].startswith("test_") and p.endswith(".py"))
        if not tests or not all(t.endswith(".py") for t in tests):
            raise ToolArgError("no test files (tests/test_*.py) to run")
        try:
            result = sandbox.run_tests(self.files, tests, ENV_LIMITS)
        except sandbox.SandboxError as e:
            raise ToolArgError(str(e)) from e
        if result.stopped:
            text = f"error: the sandbox stopped the test run: {result.stopped}\n{result.report()}"
            return ToolResult(bounded(text, RUN_TESTS_CHARS), error=True)
        return ToolResult(bounded(result.report(), RUN_TESTS_CHARS))


# ------------------------------------------------------------------------------------- unified diff
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _strip_prefix(path: str) -> str | None:
    path = path.split("\t")[0].strip()
    if path == "/dev/null":
        return None
    if path.startswith(("a/", "b/")):
        path = path[2:]
    return path


def apply_patch(files: dict[str, str], patch: str) -> tuple[dict[str, str], list[str]]:
    """Apply a (multi-file) unified diff atomically. Returns (new files, changed paths); raises
    ToolArgError naming the first hunk that does not apply."""
    lines = patch.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    out = dict(files)
    changed: list[str] = []
    i = 0
    n_files = 0
    while i < len(lines):
        if not (lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")):
            i += 1
            continue
        src, dst = _strip_prefix(lines[i][4:]), _strip_prefix(lines[i + 1][4:])
        i += 2
        n_files += 1
        path = dst if dst is not None else src
        if path is None:
            raise ToolArgError("a file header names /dev/null on both sides")
        _check_path(path)
        if src is None:
            if path in out:
                raise ToolArgError(f"{path} already exists (the patch creates it)")
            text = ""
        else:
            if src not in out:
                raise ToolArgError(f"{src}: no such file")
            text = out[src]
        cur = text.split("\n")
        ends_nl = text.endswith("\n")
        if ends_nl:
            cur.pop()
        elif text == "":
            cur = []
        offset = 0
        hunk_no = 0
        while i < len(lines) and lines[i].startswith("@@"):
            m = _HUNK.match(lines[i])
            if not m:
                raise ToolArgError(f"bad hunk header {lines[i][:80]!r}")
            hunk_no += 1
            old_start, old_n = int(m.group(1)), int(m.group(2) or 1)
            new_n = int(m.group(4) or 1)
            i += 1
            old_seg: list[str] = []
            new_seg: list[str] = []
            seen_old = seen_new = 0
            while i < len(lines):
                ln = lines[i]
                if ln.startswith("@@") or (ln.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")):
                    break
                if seen_old >= old_n and seen_new >= new_n and not ln.startswith(("+", "-", " ")):
                    break
                if ln.startswith("\\"):
                    i += 1
                    continue
                tag, body = (ln[:1], ln[1:]) if ln else (" ", "")
                if tag == " ":
                    old_seg.append(body)
                    new_seg.append(body)
                    seen_old += 1
                    seen_new += 1
                elif tag == "-":
                    old_seg.append(body)
                    seen_old += 1
                elif tag == "+":
                    new_seg.append(body)
                    seen_new += 1
                else:
                    break
                i += 1
            at = old_start - 1 + offset if old_seg else old_start + offset
            pos = _find(cur, old_seg, at)
            if pos is None:
                raise ToolArgError(
                    f"hunk {hunk_no} for {path} does not apply: its context/removed lines do not match the file "
                    f"near line {old_start}"
                )
            cur[pos : pos + len(old_seg)] = new_seg
            offset += len(new_seg) - len(old_seg)
        if dst is None:
            out.pop(path, None)
        else:
            if src is not None and src != dst:
                out.pop(src, None)
            out[path] = "\n".join(cur) + ("\n" if cur and (ends_nl or src is None) else "")
        changed.append(path)
    if not n_files:
        raise ToolArgError("no file headers (--- a/path / +++ b/path) found in the patch")
    return out, changed


def _find(cur: list[str], seg: list[str], at: int) -> int | None:
    if not seg:
        return min(max(at, 0), len(cur))
    n = len(seg)
    order = sorted(range(len(cur) - n + 1), key=lambda p: abs(p - at))
    for p in order:
        if cur[p : p + n] == seg:
            return p
    stripped = [s.rstrip() for s in seg]
    for p in order:
        if [c.rstrip() for c in cur[p : p + n]] == stripped:
            return p
    return None


def _check_path(path: Any) -> str:
    if not isinstance(path, str) or not PATH_RE.match(path) or ".." in path.split("/") or "//" in path:
        raise ToolArgError(f"bad path {str(path)[:80]!r}: use a relative path like pkg/module.py")
    return path


# `required` even when empty, as these schemas were first written (harness ids hash them)
TOOLS = tool_specs(
    RefactorEnv.tool_list_files,
    RefactorEnv.tool_read_file,
    RefactorEnv.tool_search,
    RefactorEnv.tool_write_file,
    RefactorEnv.tool_apply_patch,
    RefactorEnv.tool_run_tests,
    required_always=True,
)
