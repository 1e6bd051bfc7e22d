"""Sandboxed execution of model-written Python (docs/ARCHITECTURE.md §6).

Every run of code an agent wrote happens here: a fresh process per run, in a fresh directory, with
nothing shared between runs. The API is three calls:

- `run_python(files, script)` runs one script of a file tree;
- `run_tests(files, test_paths)` runs test files with a tiny in-sandbox test runner (pytest-like
  discovery of `test_*` functions, a minimal `pytest` shim with `raises`/`approx`), which is far faster
  than starting pytest per run. The tests and the code they test share one process, so the code can
  write the run's records itself: this is an agent's own test run (its observation), never a verdict;
- `run_graded_tests(package, tests)` is a grader's run, with verdicts the package's code cannot write
  (below).

All return a `SandboxResult`; `result.stopped` says in words why the sandbox stopped or refused
something (None when nothing was), and `result.report()` renders the run for an observation. What a run
writes reaches a result only in bounded pieces: the stop reason at most MAX_STOPPED_CHARS characters
(the first MAX_VIOLATIONS distinct violation lines, the rest counted), each test's message at most
MAX_MESSAGE_CHARS, the report at most 6,000, stdout and stderr at most `output_bytes` each.

A graded run has three processes in the sandbox. The runner (trusted: it never runs the package's code)
reads the request, writes the package's files and forks the package's process before it reads the
tests, which exist in no file and in no memory the package can reach. The package's process imports the
package (all the tests' imports, in one request) and serves requests: import, attribute, call. The
runner runs the tests in its own memory against references to the package's objects; what the package
returns comes back as plain values (builtin scalars and containers, dates and times, Decimal, Fraction:
JSON, checked on the way in), anything else as a reference that compares equal only to itself, and
exceptions as the builtin exception class they derive from. Each test session is a fork of the
package's process, so a test that times out or ends the process costs that test only: the next one gets
a fresh session with the state the import left. Only the runner holds the record channel (fd 3, a
memfd of the fork server's); the runner and the fork server are not dumpable, so the package cannot open
their fds or memory through /proc or ptrace them (with the audit hook off too; a test shows that with
the runner made dumpable it could). The parent knows the expected test ids from the tests' syntax
trees: a test not reported is an error, a record for another id fails the run. What the package can do
is what any code can: return values, raise, end or stall its own process (failing those tests), or
kill the runner (failing the run). In weak mode none of this holds (the processes are the parent's
user's, dumpable).

Isolation is by the kernel, not by auditing Python (decided: an in-process audit hook alone is
bypassed by `_posixsubprocess.fork_exec`, by flipping its own flags through `gc` or frames, by
monkeypatching the builtins it calls, by `os.open(dir_fd=...)` and by links to outside targets):

1. bubblewrap (`bwrap`, Debian package `bubblewrap`) puts the code in new user, PID, network, IPC, UTS
   and cgroup namespaces (`--unshare-all`; nested user namespaces are disabled) as uid/gid 65534 with no
   capabilities and `no_new_privs`. Its filesystem is a read-only root holding only /usr (and the
   /bin, /lib, ... links or binds into it), `/etc/ld.so.cache`, the interpreter's real prefix
   (`sys.base_prefix` resolved, read-only; no site-packages: the interpreter runs with `-I -S`), a fresh
   /proc that shows only the sandbox's own processes, a minimal read-only /dev, and one size-capped
   tmpfs `/sandbox` holding the run's directory (`/tmp` is a link into it). The environment is cleared
   (PATH, HOME, LANG, TZ only); there is no network but a loopback of its own; `--die-with-parent`
   and `--new-session`. When the parent is root, bwrap itself is started as uid 65534, so that the
   sandbox's processes are an unprivileged host user and RLIMIT_NPROC holds (the kernel does not apply
   it to uid 0); if uid 65534 cannot reach the interpreter (a pyenv under /root, mode 0700), its prefix
   is first bind-mounted read-only on a reachable empty directory in a private mount namespace
   (`unshare -m`, `mount --bind`, then `setpriv` drops to 65534), which no other process sees.
2. Limits, set in the child before any untrusted code runs: address space, CPU seconds, file size (also
   caps captured stdout/stderr), open files, no core dumps, no POSIX message queues, and a process and
   thread count (RLIMIT_NPROC, counted per user namespace, i.e. per sandbox). The tmpfs caps the disk
   (WORK_MB); its inodes are capped by the fork server, which counts them (statvfs) every 5 ms during a
   run and stops the run past `Limits.inodes` (bwrap 0.8 mounts the tmpfs with size and mode only, no
   `nr_inodes`, and nothing in the sandbox may mount; measured overshoot: a few hundred files), so what
   the reporter removes after a run stays small and the call returns within the wall limit plus a
   fraction of a second. A run's stdout, stderr and records are memfds, not files of that disk, so a
   full disk loses none of them; the reporter sees a full disk and the stop reason names it (ENOSPC).
   Wall time is enforced by killing every process of the run, with a watchdog in the parent that
   kills the whole sandbox if the sandbox itself stops answering.
3. The old audit hook stays as a second layer inside (refuses sockets, process creation, ctypes and
   writes outside the run's directory, and reports them as violations, which is what the reports
   name); it is no longer what keeps the host safe.

Start-up cost: one sandbox per parent process holds a fork server (a trusted interpreter that never
runs untrusted code and never holds a run's data); each run is a fresh `fork` of it, so a run costs a
fork instead of a bwrap set-up plus an interpreter start. Isolation between runs of one sandbox:

- runs are serial; each gets a fresh directory (created for it, removed after it, nothing else in the
  tmpfs), and a fresh process forked from the server;
- the server is PID 1 of the sandbox: after each run it kills every other process of the sandbox
  (`kill(-1, SIGKILL)`, which cannot miss a daemon that double-forked or called setsid) and reaps them,
  so nothing of a run outlives it; code inside cannot signal PID 1 to death;
- the server is not dumpable (`PR_SET_DUMPABLE` 0), so code of a run cannot ptrace it or read or write
  its memory through /proc, and it never reads a request body or a run's output (a child reads the
  request and writes the tree; another short-lived child reads the outputs and removes the
  directory), so no earlier run's data is left in the memory a later run is forked from;
- after each run the sandbox is checked for anything a run could leave behind (files in the tmpfs,
  System V IPC objects, keys, processes); if anything is found, the whole sandbox is replaced before
  the next run. Everything else writable is read-only.

`COEVOLVE_SANDBOX_PER_RUN=1` starts one fresh sandbox per run instead (same code; measured on a
loaded 2-core machine: ~6x the cost of a fork-server run, ~90 ms against ~16 ms). It is also the
fallback when the persistent sandbox cannot start or dies under a run.

If no sandbox can be started (bwrap missing or unusable), a run raises `SandboxError` naming the
reason: model code is never run without it. `COEVOLVE_SANDBOX_WEAK=1` explicitly opts into the weak
development mode (no bwrap: the same fork server as a plain process with rlimits, the audit hook, a
network namespace when `unshare --net` works and a private directory, as the parent's own user); it
does not contain hostile code and must not be used for model code on a machine that holds secrets.

Not contained: memory is limited per process (RLIMIT_AS) and the process count per sandbox, not for the
whole sandbox (no cgroup), so a run may hold up to `processes` x `memory_mb`; CPU use is bounded by the
wall clock, not shared fairly; there is no seccomp filter, so the kernel's whole system-call surface is
reachable (inside the namespaces); /usr is readable.

Records (one line per test, MARK-prefixed) travel on fd 3, never on stdout; `sys.stdout` is pointed at
stderr while tests run. In `run_tests` and `run_python` the code under test can still write fd 3: their
results are the agent's own feedback; a grader must use `run_graded_tests`.
"""

from __future__ import annotations

import ast
import atexit
import json
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import PurePosixPath

from coevolve.settings import environment, variable
from coevolve.text import bounded

_AST_LOCK = threading.Lock()


def parse_python(source: str, mode: str = "exec") -> ast.AST:
    """`ast.parse` that survives CPython 3.11.7's AST race. Before 3.11.8 the AST constructor keeps its
    recursion depth per interpreter (gh-106905), so a parse that overlaps another thread's (ours run on
    the executor's tool threads; Python's traceback formatting parses source lines to place its carets)
    can fail with "SystemError: AST constructor recursion depth mismatch". Ours go one at a time and a
    parse that lost the race is repeated: the depth is reset at the start of every parse."""
    for attempt in range(8):
        with _AST_LOCK:
            try:
                return ast.parse(source, mode=mode)
            except SystemError as e:
                if "recursion depth mismatch" not in str(e) or attempt == 7:
                    raise
        time.sleep(0.001 * (attempt + 1))
    raise AssertionError("unreachable")


MARK = "\x1esbx "  # prefix of the runners' record lines (on the run's record channel, fd 3, never stdout)
VIOLATION = "[sandbox-violation] "
NOBODY = 65534
BASE_DIR = os.path.join(tempfile.gettempdir(), "coevolve-sandbox")
BOX_WORK = "/sandbox"  # the sandbox's tmpfs, as seen inside
WORK_MB = 256  # size of that tmpfs (files a run may write; its outputs are memfds, outside it)
MAX_STOPPED_CHARS = 2_000  # `SandboxResult.stopped` is cut to this (head and tail kept, with a marker)
MAX_MESSAGE_CHARS = 2_000  # and each test's message
WEAK_ENV = variable("sandbox_weak")
PER_RUN_ENV = variable("sandbox_per_run")


@dataclass(frozen=True)
class Limits:
    wall_s: float = 10.0  # whole run, enforced by the fork server (every process of the run is killed)
    per_test_s: float = 2.0  # one test function, enforced by an alarm in the child
    cpu_s: int = 10
    memory_mb: int = 512  # address space, per process
    output_bytes: int = 2_000_000  # stdout and stderr each, and any file written (RLIMIT_FSIZE)
    open_files: int = 64
    processes: int = 16  # processes and threads of the run at once (RLIMIT_NPROC in the sandbox)
    inodes: int = 20_000  # files, directories and links the run may make on the sandbox's disk (polled)


@dataclass(frozen=True)
class TestResult:
    id: str  # path::function
    outcome: str  # passed | failed | error
    message: str = ""


@dataclass(frozen=True)
class SandboxResult:
    returncode: int | None
    stdout: str
    stderr: str
    duration_s: float  # wall-clock time of the run: a record only, never rendered (see `report`)
    timed_out: bool = False
    violations: tuple[str, ...] = ()  # "network: ...", "filesystem: ...", "process: ...", "memory: ...", "timeout: ..."
    tests: tuple[TestResult, ...] = ()
    completed: bool = True  # the runner reached its end marker (tests mode)
    isolation: tuple[str, ...] = field(default=())
    wall_limit_s: float = Limits.wall_s  # the run's wall-clock limit (what a timeout is reported against)

    @property
    def stopped(self) -> str | None:
        """Why the sandbox stopped or refused something, or None if it did not; at most about
        MAX_STOPPED_CHARS characters (the run can write violation lines, which this quotes)."""
        why = self._stopped()
        return None if why is None else bounded(why, MAX_STOPPED_CHARS)

    def _stopped(self) -> str | None:
        if self.timed_out:
            return f"the run was stopped at the {self.wall_limit_s:g} s wall-clock limit (endless loop?)"
        if self.violations:
            return "; ".join(dict.fromkeys(self.violations))
        if self.returncode is not None and self.returncode < 0:
            sig = -self.returncode
            name = {signal.SIGXCPU: "CPU time limit", signal.SIGXFSZ: "output size limit", signal.SIGKILL: "killed"}.get(
                sig, f"signal {sig}"
            )
            return f"the run was stopped: {name}"
        if not self.completed:
            return "the test run ended before all tests ran (the process exited early)"
        return None

    @property
    def passed(self) -> int:
        return sum(t.outcome == "passed" for t in self.tests)

    @property
    def all_passed(self) -> bool:
        return self.stopped is None and bool(self.tests) and all(t.outcome == "passed" for t in self.tests)

    def report(self, max_chars: int = 6000) -> str:
        """A pytest-like summary for a tool observation. It holds nothing measured by the clock (no
        durations): it reaches trajectories and the proposer's evidence, which feed ids and seeds, so the
        same run must render the same text on a quiet machine and a loaded one."""
        lines = [f"{t.id} {t.outcome.upper()}" for t in self.tests]
        bad = [t for t in self.tests if t.outcome != "passed"]
        if bad:
            lines.append("=== failures ===")
            for t in bad:
                lines.append(f"{t.id}\n  {t.message.strip()[:800]}".rstrip())
        counts = {o: sum(t.outcome == o for t in self.tests) for o in ("passed", "failed", "error")}
        summary = ", ".join(f"{n} {o}" for o, n in counts.items() if n) or "no tests ran"
        lines.append(f"=== {summary} ===")
        if self.stopped:
            lines.append(f"sandbox: {self.stopped}")
        return bounded("\n".join(lines), max_chars)


class SandboxError(ValueError):
    """Bad input to the sandbox itself (e.g. a path escaping the tree), or no sandbox can be started."""


# ----------------------------------------------------------------------------------------- the child
# Code that runs inside the sandbox: the classic runner (`_child`: tests and scripts, the code under test
# in the same process), and the graded runner (`_graded`, the trusted side) with the package's process
# (`_package_server`, the untrusted side) it talks to. Run records go to fd 3 (RES), never to stdout.
_CHILD = r'''
import builtins, datetime as _dt, gc, json as _json, os, resource, signal, sys

RES = 3  # the run's record channel (a memfd of the fork server's)
_FRAME = 8 << 20  # largest message between the graded runner and the package's process
_MESSAGE = 2000  # longest message the runners record for one test


def _limits(NPROC, MEM, CPU, FSIZE, NOFILE):
    def _lim(which, value):
        resource.setrlimit(which, (value, value))
    _lim(resource.RLIMIT_AS, MEM)
    _lim(resource.RLIMIT_CPU, CPU)
    _lim(resource.RLIMIT_FSIZE, FSIZE)
    _lim(resource.RLIMIT_CORE, 0)
    _lim(resource.RLIMIT_NOFILE, NOFILE)
    _lim(resource.RLIMIT_MSGQUEUE, 0)  # no POSIX message queues (they would outlive the run)
    if NPROC != "-":
        _lim(resource.RLIMIT_NPROC, int(NPROC))


def _inside(full, root):
    return full == root or full.startswith(root + os.sep)


def _audit_hook(ROOT, BASE, VIOL):
    """The in-process second layer: (hook, busy, mark). busy[0] = True lets the runner's own calls through."""
    WRITE = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
    _busy = [False]

    def _mark(kind, what):
        try:
            os.write(2, ("\n" + VIOL + kind + ": " + what + "\n").encode())
        except OSError:
            pass

    def _refuse(kind, what):
        _mark(kind, what)
        raise PermissionError("sandbox refused " + kind + " access: " + what)

    def _check(path, writing, event):
        if isinstance(path, int):
            return
        try:
            full = os.path.realpath(os.path.join(os.getcwd(), os.fsdecode(path)))
        except (TypeError, ValueError):
            return
        if _inside(full, BASE) and not _inside(full, ROOT):
            _refuse("filesystem", event + " of another sandbox's files")
        if writing and not _inside(full, ROOT):
            _refuse("filesystem", event + " of " + repr(full) + " outside the sandbox directory")

    PATH_WRITES = {"os.remove", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.truncate", "os.utime",
                   "shutil.rmtree", "os.link", "os.symlink", "os.chflags", "os.lchflags", "os.setxattr",
                   "os.removexattr", "shutil.copyfile", "shutil.copytree", "shutil.move"}
    PROCESS = {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
               "os.kill", "os.killpg", "pty.spawn", "os.startfile", "resource.setrlimit", "resource.prlimit",
               "os.setuid", "sys.remote_exec"}

    def _hook(event, args):
        if _busy[0]:
            return
        _busy[0] = True
        try:
            if event == "open":
                path, mode, flags = (tuple(args) + (None, None, None))[:3]
                writing = bool(isinstance(flags, int) and flags & WRITE) or bool(
                    isinstance(mode, str) and any(c in mode for c in "wax+"))
                _check(path, writing, "open")
            elif event in ("os.listdir", "os.scandir"):
                _check(args[0] if args and args[0] is not None else ".", False, event)
            elif event in PATH_WRITES:
                _check(args[0], True, event)
            elif event == "os.rename":
                _check(args[0], True, event)
                _check(args[1], True, event)
            elif event.startswith("socket."):
                _refuse("network", event)
            elif event in PROCESS:
                _refuse("process", event)
            elif event.startswith("ctypes."):
                _refuse("process", event + " (ctypes is not allowed)")
        finally:
            _busy[0] = False

    return _hook, _busy, _mark


class _Timeout(BaseException):
    pass


def _alarm(signum, frame):
    raise _Timeout()


class _Gone(Exception):
    """The package's process ended or stopped answering: the test could not run (graded runner)."""


class _Raises:
    def __init__(self, exc, match=None):
        self.exc, self.match, self.value = exc, match, None
    def __enter__(self):
        return self
    def __exit__(self, et, ev, tb):
        if et is None:
            raise AssertionError("DID NOT RAISE " + getattr(self.exc, "__name__", str(self.exc)))
        if not issubclass(et, self.exc):
            return False
        if self.match is not None:
            import re
            if not re.search(self.match, str(ev)):
                raise AssertionError("pattern %r not found in %r" % (self.match, str(ev)))
        self.value = ev
        return True


class _Approx:
    def __init__(self, expected, rel=1e-6, abs=1e-12):
        self.expected, self.rel, self.abs = expected, rel, abs
    def __eq__(self, other):
        return abs(other - self.expected) <= max(self.rel * abs(self.expected), self.abs)
    def __repr__(self):
        return "approx(%r)" % (self.expected,)


def _pytest_module():
    pytest = type(sys)("pytest")
    pytest.raises = _Raises
    pytest.approx = _Approx
    return pytest


def _cut(text, n=_MESSAGE):
    return text if len(text) <= n else text[: n // 2] + " ...[cut]... " + text[-n // 2 :]


def _describe(exc, shown):
    """A failure's message: its type and text, and where (the last frames of files `shown` accepts)."""
    where = []
    tb = exc.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if shown(name):
            where.append("  at %s:%d in %s" % (shown(name), tb.tb_lineno, tb.tb_frame.f_code.co_name))
        tb = tb.tb_next
    where += [str(w) for w in getattr(exc, "_sbx_where", ())]
    try:
        text = str(exc)
    except BaseException:
        text = "(no message)"
    return _cut("\n".join([type(exc).__name__ + (": " + text if text else "")] + where[-3:]))


def _runner(PER_TEST, MEM, VIOL, mark, shown, stop=None):
    """`run(fn, tid)` -> (outcome, message): one test function under the per-test alarm."""
    def _run(fn, tid):
        # built before the code runs: reporting must not need memory the code may have used up
        memline = ("\n" + VIOL + "memory: " + tid + " exceeded the " + str(MEM // 2**20) + " MiB limit\n").encode()
        signal.setitimer(signal.ITIMER_REAL, PER_TEST)
        try:
            fn()
            return "passed", ""
        except _Timeout:
            mark("timeout", tid + " ran longer than " + str(PER_TEST) + " s")
            if stop is not None:
                stop()
            return "error", "stopped: ran longer than %s s (endless loop?)" % PER_TEST
        except MemoryError:
            try:
                os.write(2, memline)
            except OSError:
                pass
            return "error", "stopped: memory limit exceeded"
        except _Gone as e:
            return "error", _cut(str(e))
        except BaseException as e:
            return "failed", _describe(e, shown)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    return _run


def _emit(MARK, *rec):
    os.write(RES, (MARK + repr(rec) + "\n").encode())


def _child(argv):
    """The classic runner: the test files (or the script) and the code under test in this one process.
    Its records are the code's own to write: good for the agent's run_tests, never for a grader."""
    (MODE, ROOT, BASE, MARK, VIOL, NPROC, MEM, CPU, FSIZE, NOFILE, PER_TEST), ARGS = argv[:11], argv[11:]
    MEM, CPU, FSIZE, NOFILE, PER_TEST = int(MEM), int(CPU), int(FSIZE), int(NOFILE), float(PER_TEST)
    _limits(NPROC, MEM, CPU, FSIZE, NOFILE)
    ROOT = os.path.realpath(ROOT)
    BASE = os.path.realpath(BASE)
    os.environ["HOME"] = ROOT
    os.environ["TMPDIR"] = os.path.join(ROOT, "tmp")
    hook, _, mark = _audit_hook(ROOT, BASE, VIOL)
    signal.signal(signal.SIGALRM, _alarm)
    sys.modules["pytest"] = _pytest_module()
    sys.path.insert(0, ROOT)
    os.chdir(ROOT)
    sys.stdout = sys.stderr

    def shown(name):
        if name.startswith("<"):
            return None
        full = os.path.realpath(name)
        return os.path.relpath(full, ROOT) if _inside(full, ROOT) else None

    _run = _runner(PER_TEST, MEM, VIOL, mark, shown)

    def _load(path):
        name = path[:-3].replace("/", ".")
        full = os.path.join(ROOT, path)
        mod = type(sys)(name)
        mod.__file__ = full
        sys.modules[name] = mod
        with open(full, encoding="utf-8") as f:
            code = compile(f.read(), full, "exec")
        exec(code, mod.__dict__)
        return mod

    sys.addaudithook(hook)

    if MODE == "script":
        outcome, message = _run(lambda: _load(ARGS[0]), ARGS[0])
        _emit(MARK, ARGS[0], outcome, message)
    else:
        for path in ARGS:
            box = []
            outcome, message = _run(lambda: box.append(_load(path)), path)
            if outcome != "passed":
                _emit(MARK, path + "::<collect>", "error", message)
                continue
            mod = box[0]
            for fname, fn in list(vars(mod).items()):
                if fname.startswith("test") and callable(fn) and getattr(fn, "__module__", None) == mod.__name__:
                    tid = path + "::" + fname
                    outcome, message = _run(fn, tid)
                    _emit(MARK, tid, outcome, message)
    _emit(MARK, "<end>", "", "")


# ------------------------------------------------------------------------- values between the processes
def _enc(v, ref, depth=0):
    """A value as JSON data: builtin scalars and containers (subclasses as their base type's value), dates
    and times, Decimal and Fraction by value; anything else through `ref` (a reference the other side
    cannot look into, which compares equal only to itself there)."""
    t = type(v)
    if v is None or t is bool or t is int or t is float or t is str:
        return v
    if depth > 64:
        raise ValueError("the value is nested too deeply to pass between the tests and the package")
    d = depth + 1
    if t is list:
        return [_enc(x, ref, d) for x in v]
    if t is tuple or t is set or t is frozenset:
        return {"$": t.__name__, "v": [_enc(x, ref, d) for x in v]}
    if t is dict:
        return {"$": "dict", "v": [[_enc(k, ref, d), _enc(x, ref, d)] for k, x in v.items()]}
    if t is bytes:
        return {"$": "bytes", "v": v.hex()}
    if t is _dt.datetime:
        return {"$": "datetime", "v": [v.year, v.month, v.day, v.hour, v.minute, v.second, v.microsecond],
                "off": _offset(v), "fold": v.fold}
    if t is _dt.date:
        return {"$": "date", "v": [v.year, v.month, v.day]}
    if t is _dt.time:
        return {"$": "time", "v": [v.hour, v.minute, v.second, v.microsecond], "off": _offset(v), "fold": v.fold}
    if t is _dt.timedelta:
        return {"$": "timedelta", "v": [v.days, v.seconds, v.microseconds]}
    for base in (int, float, str):  # a subclass (IntEnum, a str subclass) by its base type's value
        if isinstance(v, base):
            return _enc(base.__str__(v) if base is str else base(v), ref, d)
    for base in (list, tuple, set, frozenset, dict):  # namedtuple, OrderedDict, Counter, defaultdict, ...
        if isinstance(v, base):
            return _enc(base(v), ref, d)
    mod = sys.modules.get(getattr(t, "__module__", None) or "")  # no Decimal or Fraction unless the package imported it
    if mod is not None and t is getattr(mod, "Decimal", None) and mod.__name__ in ("decimal", "_decimal", "_pydecimal"):
        return {"$": "decimal", "v": str(v)}
    if mod is not None and t is getattr(mod, "Fraction", None) and mod.__name__ == "fractions":
        return {"$": "fraction", "v": [v.numerator, v.denominator]}
    return ref(v)


def _offset(v):
    off = v.utcoffset()
    return None if off is None else off // _dt.timedelta(microseconds=1)


def _tz(off):
    if off is None:
        return None
    if type(off) is not int:
        raise TypeError("bad offset")
    return _dt.timezone.utc if off == 0 else _dt.timezone(_dt.timedelta(microseconds=off))


def _ints(v, n):
    if type(v) is not list or len(v) != n or any(type(x) is not int for x in v):
        raise TypeError("bad fields")
    return v


def _dec(x, ref, depth=0):
    """The value `_enc` made; raises (TypeError, ValueError, ...) on anything else."""
    t = type(x)
    if x is None or t is bool or t is int or t is float or t is str:
        return x
    if depth > 64:
        raise ValueError("nested too deeply")
    d = depth + 1
    if t is list:
        return [_dec(i, ref, d) for i in x]
    if t is not dict:
        raise TypeError("not a value")
    tag, v = x.get("$"), x.get("v")
    if tag in ("tuple", "set", "frozenset"):
        if type(v) is not list:
            raise TypeError("bad items")
        return {"tuple": tuple, "set": set, "frozenset": frozenset}[tag](_dec(i, ref, d) for i in v)
    if tag == "dict":
        if type(v) is not list or any(type(p) is not list or len(p) != 2 for p in v):
            raise TypeError("bad items")
        return {_dec(k, ref, d): _dec(i, ref, d) for k, i in v}
    if tag == "bytes" and type(v) is str:
        return bytes.fromhex(v)
    if tag == "datetime":
        return _dt.datetime(*_ints(v, 7), tzinfo=_tz(x.get("off")), fold=int(x.get("fold") == 1))
    if tag == "date":
        return _dt.date(*_ints(v, 3))
    if tag == "time":
        return _dt.time(*_ints(v, 4), tzinfo=_tz(x.get("off")), fold=int(x.get("fold") == 1))
    if tag == "timedelta":
        return _dt.timedelta(*_ints(v, 3))
    if tag == "decimal" and type(v) is str and len(v) < 5000:
        import decimal
        return decimal.Decimal(v)
    if tag == "fraction":
        import fractions
        return fractions.Fraction(*_ints(v, 2))
    if tag == "ref":
        return ref(x)
    raise TypeError("not a value the runner knows")


import re as _re
_IMPORT_LINE = _re.compile(r"^(?:from[ \t]+([\w.]+)[ \t]+)?import[ \t]+([\w., \t]+)$", _re.M)  # compiled once, in the server


class _Lines:
    """Newline-framed messages from one fd; None at end of file, ValueError for a line over _FRAME."""
    def __init__(self, fd):
        self.fd, self.buf = fd, bytearray()
    def line(self):
        while True:
            i = self.buf.find(b"\n")
            if i >= 0:
                line = bytes(self.buf[:i])
                del self.buf[: i + 1]
                return line
            if len(self.buf) > _FRAME:
                self.buf.clear()
                raise ValueError("a message longer than %d bytes" % _FRAME)
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                return None
            self.buf += chunk
    def ready(self):
        import select
        return b"\n" in self.buf or bool(select.select([self.fd], [], [], 0)[0])


def _write(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _frame(obj):
    return ("\n" + _json.dumps(obj, ensure_ascii=True) + "\n").encode()  # a leading newline ends any torn line


# ---------------------------------------------------------------------------- the package's process
def _package_server(rfd, wfd, ROOT, BASE, VIOL, MEM):
    """Untrusted side of a graded run: imports the package and answers the tests' requests (import,
    getattr, call) with values as data or references. Forked from the runner before the runner read the
    tests; holds neither the tests nor the record channel. Each test session is a fork of it, so what the
    package did at import is the start of every session and a session that dies is replaced."""
    os.environ["HOME"] = ROOT
    os.environ["TMPDIR"] = os.path.join(ROOT, "tmp")
    hook, busy, _ = _audit_hook(ROOT, BASE, VIOL)
    sys.path.insert(0, ROOT)
    os.chdir(ROOT)
    sys.stdout = sys.stderr
    memline = ("\n" + VIOL + "memory: the package exceeded the " + str(MEM // 2**20) + " MiB limit\n").encode()
    objs = {}

    def ref(v):
        objs[id(v)] = v
        try:
            kind = str(type(v).__name__)[:80]
        except BaseException:
            kind = "object"
        return {"$": "ref", "id": id(v), "kind": kind}

    def deref(x):
        k = x.get("id") if type(x) is dict else None
        if type(k) is not int or k not in objs:
            raise LookupError("no such object of the package")
        return objs[k]

    def shown(name):
        if name.startswith("<"):
            return None
        full = os.path.realpath(name)
        return os.path.relpath(full, ROOT) if _inside(full, ROOT) else None

    def answer(op, req):
        """One request's answer: {"ok": value[, "attrs": ...]} | {"raise": exception} | {"fail": why}."""
        try:
            attrs = None
            if op == "import":
                fromlist = [str(n) for n in req.get("fromlist") or ()]
                value = builtins.__import__(str(req["name"]), {}, {}, fromlist, 0)
                attrs = {}
                for n in fromlist:  # sent with the module: what `from m import a, b` asks for next
                    try:
                        attrs[n] = _enc(getattr(value, n), ref)
                    except AttributeError:
                        pass
            elif op == "getattr":
                value = getattr(deref(req.get("ref")), str(req["name"]))
            elif op == "call":
                fn = deref(req.get("ref"))
                args = [_dec(a, deref) for a in req.get("args") or ()]
                kwargs = {str(k): _dec(v, deref) for k, v in req.get("kwargs") or ()}
                value = fn(*args, **kwargs)
            else:
                raise ValueError("unknown request %r" % (op,))
            return {"ok": _enc(value, ref), **({"attrs": attrs} if attrs else {})}
        except MemoryError:
            try:
                os.write(2, memline)
            except OSError:
                pass
            return {"raise": {"types": ["MemoryError"], "msg": "", "where": []}}
        except BaseException as e:
            try:
                types = [str(c.__name__) for c in type(e).__mro__][:32]
                msg = _describe(e, shown).split("\n")
                return {"raise": {"types": types, "msg": msg[0].partition(": ")[2], "where": msg[1:]}}
            except BaseException:
                return {"fail": "the package raised an exception that could not be described"}

    sys.addaudithook(hook)
    reader = _Lines(rfd)
    session, testing = False, False
    while True:
        line = reader.line()
        if line is None:
            os._exit(0)
        try:
            req = _json.loads(line)
        except ValueError:
            continue
        if type(req) is not dict:
            continue
        seq, op = req.get("seq"), req.get("op")
        if op == "start" and not session:
            testing = True
            was, busy[0] = busy[0], True  # the hook refuses forks; this one is the server's own
            try:
                gc.freeze()
                pid = os.fork()
            except OSError as e:
                pid = -1
                _write(wfd, _frame({"seq": seq, "fail": "the package's process could not fork a session: %s" % e}))
            finally:
                busy[0] = was
            if pid == 0:
                session = True
                _write(wfd, _frame({"seq": seq, "ok": os.getpid()}))
                continue
            if pid > 0:
                reader.buf.clear()  # what was read ahead belonged to the session
                _, status = os.waitpid(pid, 0)
                _write(wfd, _frame({"ended": status}))
            continue
        if testing and not session:
            _write(wfd, _frame({"seq": seq, "fail": "no session of the package is running"}))
            continue
        if op == "imports" and not testing:  # the test modules' imports, all at once before they run
            items = [i for i in req.get("items") or () if type(i) is list and len(i) == 2][:256]
            ans = {"ok": None, "each": [answer("import", {"name": n, "fromlist": f}) for n, f in items]}
        else:
            ans = answer(op, req)
        out = _frame({"seq": seq, **ans})
        if len(out) > _FRAME:
            out = _frame({"seq": seq, "fail": "the package returned a value of more than %d bytes" % _FRAME})
        try:
            _write(wfd, out)
        except OSError:
            os._exit(1)


# ------------------------------------------------------------------------------- the graded runner
class _Ref:
    """A reference to an object of the package's process: attribute access and calls are requests to it;
    nothing else (comparison, truth, hashing) is forwarded, so a reference equals only itself."""
    __slots__ = ("_sbx_link", "_sbx_key", "_sbx_kind", "_sbx_next", "__weakref__")

    def __getattr__(self, name):
        if name.startswith("_sbx_"):
            raise AttributeError(name)
        ahead = getattr(self, "_sbx_next", None)
        if ahead and name in ahead:  # fetched with the import this attribute access completes
            return ahead.pop(name)
        return self._sbx_link.request("getattr", self, name=name)

    def __call__(self, *args, **kwargs):
        return self._sbx_link.request("call", self, args=args, kwargs=kwargs)

    def __repr__(self):
        return "<%s of the package>" % self._sbx_kind


class _Link:
    """The runner's side of the talk with the package's process (`_package_server`): requests and their
    answers, references, and the package's test sessions (forks of that process, one at a time)."""

    def __init__(self, wfd, rfd, spid, packages):
        self.wfd, self.lines, self.spid, self.packages = wfd, _Lines(rfd), spid, frozenset(packages)
        self.seq, self.gen, self.session, self.dead, self.testing = 0, 0, None, None, False
        self.refs, self.ahead = {}, {}
        self.real_import = builtins.__import__

    # -- the import statement of the test modules: the package's modules come from its process
    def import_(self, name, globals=None, locals=None, fromlist=(), level=0):
        if level or name.partition(".")[0] not in self.packages:
            return self.real_import(name, globals, locals, fromlist, level)
        top = name.partition(".")[0]
        if fromlist:
            return self._import(name, [str(n) for n in fromlist])
        mod = self._import(name, [])
        return mod if top == name else self._import(top, [])

    def _import(self, name, fromlist):
        ahead = self.ahead.get((name, tuple(fromlist)))
        if ahead:
            return self._value(ahead.pop(0))
        return self.request("import", None, name=name, fromlist=fromlist)

    def prefetch(self, sources):
        """Ask for what the test modules import, in one request, before any of them runs (the answer is
        read by `prefetched`, so the runner can compile the tests meanwhile). Only a speed-up: the import
        statements are found by their lines (a parse would cost more than it saves), and an import that
        was not fetched ahead, or not in the same form, is asked for when it runs."""
        items = []
        for src in sources:
            for m in _IMPORT_LINE.finditer(src):
                names = [n.split()[0] for n in m.group(2).split(",") if n.split()]
                if m.group(1):
                    items.append([m.group(1), names])
                else:
                    for n in names:
                        items.append([n, []])
                        if "." in n:
                            items.append([n.partition(".")[0], []])
        items = [i for i in items if i[0].partition(".")[0] in self.packages]
        if not items:
            return None
        msg = {"seq": self._next(), "op": "imports", "items": items}
        self._send(msg)
        return msg

    def prefetched(self, msg):
        if msg is None:
            return
        each = self._answer(msg).get("each")
        if type(each) is list and len(each) == len(msg["items"]):
            for (name, fromlist), one in zip(msg["items"], each):
                self.ahead.setdefault((name, tuple(fromlist)), []).append(one)

    def _next(self):
        self.seq += 1
        return self.seq

    def request(self, op, ref, **fields):
        if self.testing and self.session is None:
            self._session()
        msg = {"seq": self._next(), "op": op}
        if ref is not None:
            msg["ref"] = self._key(ref)
        if "name" in fields:
            msg["name"] = str(fields["name"])
        if "fromlist" in fields:
            msg["fromlist"] = fields["fromlist"]
        if op == "call":
            msg["args"] = [_enc(a, self._out) for a in fields["args"]]
            msg["kwargs"] = [[str(k), _enc(v, self._out)] for k, v in fields["kwargs"].items()]
        return self._value(self._exchange(msg))

    def _value(self, answer):
        if type(answer) is not dict:
            raise _Gone("the package's answer is not a value the tests can read")
        if "ok" in answer:
            try:
                value = _dec(answer["ok"], self._in)
                attrs = answer.get("attrs")
                if type(value) is _Ref and type(attrs) is dict:
                    value._sbx_next = {str(n): _dec(v, self._in) for n, v in attrs.items()}
                return value
            except _Gone:
                raise
            except Exception as e:
                raise _Gone("the package's answer is not a value the tests can read (%s)" % type(e).__name__) from None
        if "raise" in answer:
            raise self._exception(answer["raise"])
        raise _Gone(str(answer.get("fail"))[:_MESSAGE])

    def _exchange(self, msg):
        self._send(msg)
        return self._answer(msg)

    def _send(self, msg):
        try:
            _write(self.wfd, _frame(msg))
        except OSError:
            raise _Gone(self._why_dead()) from None

    def _answer(self, msg):
        while True:
            try:
                line = self.lines.line()
            except ValueError as e:
                self.stop()
                raise _Gone("the package sent %s" % e) from None
            if line is None:
                raise _Gone(self._why_dead())
            try:
                frame = _json.loads(line)
            except (ValueError, RecursionError):
                continue
            if type(frame) is not dict:
                continue
            if "ended" in frame and self.session is not None:
                self._ended(frame["ended"])
                raise _Gone("the package's process ended during the test (%s)" % self.ended)
            if frame.get("seq") == msg["seq"]:
                return frame

    def between_tests(self):
        """Before a test: notice a session that ended since the last answer (it is replaced on demand)."""
        while self.session is not None and self.lines.ready():
            line = self.lines.line()
            if line is None:
                break
            try:
                frame = _json.loads(line)
            except (ValueError, RecursionError):
                continue
            if type(frame) is dict and "ended" in frame:
                self._ended(frame["ended"])

    def _session(self):
        if self.dead:
            raise _Gone(self.dead)
        self.testing = False
        try:
            pid = self.request("start", None)
        finally:
            self.testing = True
        if type(pid) is not int or pid <= 1:
            raise _Gone("the package's process did not start a session")
        self.session, self.gen = pid, self.gen + 1

    def _ended(self, status):
        self.session = None
        self.refs = {k: r for k, r in self.refs.items() if k[0] == 0}
        try:
            code = os.waitstatus_to_exitcode(int(status))
            self.ended = ("killed by signal %d" % -code) if code < 0 else ("exit status %d" % code)
        except (TypeError, ValueError):
            self.ended = "unknown status"

    def _why_dead(self):
        if self.dead is None:
            try:
                _, status = os.waitpid(self.spid, 0)
                code = os.waitstatus_to_exitcode(status)
                how = ("killed by signal %d" % -code) if code < 0 else ("exit status %d" % code)
            except (ChildProcessError, OSError, ValueError):
                how = "unknown status"
            self.dead = "the package's process ended (%s); no test can run after that" % how
        self.session = None
        return self.dead

    def stop(self):
        """After a timeout: end the session (or, while importing, the package's process)."""
        import select
        pid = self.session if self.testing else self.spid
        if pid is None:
            return
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        if not self.testing:
            self._why_dead()
            self.dead = "the package's process was stopped: it ran longer than the test time limit at import"
            return
        deadline = 2.0
        while self.session is not None:
            if not (b"\n" in self.lines.buf or select.select([self.lines.fd], [], [], deadline)[0]):
                self.dead = "the package's process stopped answering"
                try:
                    os.kill(self.spid, signal.SIGKILL)
                except OSError:
                    pass
                self.session = None
                return
            line = self.lines.line()
            if line is None:
                self._why_dead()
                return
            try:
                frame = _json.loads(line)
            except (ValueError, RecursionError):
                continue
            if type(frame) is dict and "ended" in frame:
                self._ended(frame["ended"])

    def _key(self, ref):
        if type(ref) is not _Ref or ref._sbx_link is not self:
            raise TypeError("not an object of the package")
        gen, key = ref._sbx_key
        if gen not in (0, self.gen) or (gen and self.session is None):
            raise _Gone("an object of the package's session that ended was used again")
        return {"$": "ref", "id": key}

    def _out(self, v):
        if type(v) is _Ref:
            return self._key(v)
        raise TypeError("a %s cannot be passed to the package" % type(v).__name__)

    def _in(self, x):
        key, kind = x.get("id"), x.get("kind")
        if type(key) is not int:
            raise TypeError("bad reference")
        gen = self.gen if self.testing else 0
        r = self.refs.get((0, key)) or self.refs.get((gen, key))
        if r is None:
            r = _Ref()
            r._sbx_link, r._sbx_key, r._sbx_kind = self, (gen, key), str(kind)[:80]
            self.refs[(gen, key)] = r
        return r

    def _exception(self, info):
        types = info.get("types") if type(info) is dict else None
        msg = _cut(str(info.get("msg", ""))) if type(info) is dict else ""
        where = info.get("where") if type(info) is dict else None
        exc = None
        for name in types if type(types) is list else ():
            cls = builtins.__dict__.get(name) if type(name) is str else None
            if isinstance(cls, type) and issubclass(cls, Exception):
                try:
                    exc = cls(msg) if msg else cls()
                    break
                except Exception:
                    continue
        if exc is None:
            first = types[0] if type(types) is list and types and type(types[0]) is str else "exception"
            exc = _Gone("the package raised %s%s" % (first[:80], (": " + msg) if msg else ""))
        if type(where) is list:
            exc._sbx_where = [_cut(str(w), 200) for w in where[:3]]
        return exc


def _read_exact(fd, size):
    body = bytearray()
    while len(body) < size:
        chunk = os.read(fd, size - len(body))
        if not chunk:
            raise EOFError("short request")
        body += chunk
    return bytes(body)


def _graded(argv, tsize, packages):
    """The graded runner (trusted): it forks the package's process before it reads the tests, so the
    tests never exist in any memory or file the package's code can reach; it runs the tests itself,
    against references to the package's objects, compares what they return as plain values in its own
    memory, and is the only process holding the record channel. It never runs the package's code."""
    (MODE, ROOT, BASE, MARK, VIOL, NPROC, MEM, CPU, FSIZE, NOFILE, PER_TEST), PATHS = argv[:11], argv[11:]
    MEM, CPU, FSIZE, NOFILE, PER_TEST = int(MEM), int(CPU), int(FSIZE), int(NOFILE), float(PER_TEST)
    _limits(NPROC, MEM, CPU, FSIZE, NOFILE)
    ROOT = os.path.realpath(ROOT)
    BASE = os.path.realpath(BASE)
    down_r, down_w = os.pipe()
    up_r, up_w = os.pipe()
    gc.freeze()  # a fork's memory is the parent's until written: keep collections off it
    spid = os.fork()
    if spid == 0:
        code = 70
        try:
            os.close(down_w)
            os.close(up_r)
            os.close(RES)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)  # the rest of the request (the tests) stays unread here
            os.close(null)
            _package_server(down_r, up_w, ROOT, BASE, VIOL, MEM)
        except BaseException:
            pass
        os._exit(code)
    os.close(down_r)
    os.close(up_w)
    tests = _json.loads(_read_exact(0, tsize))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    signal.signal(signal.SIGALRM, _alarm)
    sys.modules["pytest"] = _pytest_module()
    sys.stdout = sys.stderr
    _, _, mark = _audit_hook(ROOT, BASE, VIOL)  # only its violation lines; no hook here
    link = _Link(down_w, up_r, spid, packages)
    codes = {}
    signal.setitimer(signal.ITIMER_REAL, PER_TEST * max(1, len(PATHS)))  # each file's time for its imports
    try:
        asked = link.prefetch([tests[p] for p in PATHS])
        for path in PATHS:  # while the package's process imports
            try:
                codes[path] = compile(tests[path], path, "exec")
            except (SyntaxError, ValueError) as e:
                codes[path] = e
        link.prefetched(asked)
    except _Timeout:
        mark("timeout", "the test modules' imports ran longer than %g s" % (PER_TEST * max(1, len(PATHS))))
        link.stop()
    except _Gone:
        pass  # each import then asks on its own and meets the same end
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    paths = set(tests)
    _run = _runner(PER_TEST, MEM, VIOL, mark, lambda name: name if name in paths else None, link.stop)
    names = dict(builtins.__dict__, __import__=link.import_)
    collected = []
    for path in PATHS:
        mod = type(sys)(path[:-3].replace("/", "."))
        mod.__file__ = path
        mod.__dict__["__builtins__"] = names

        def load(path=path, mod=mod):
            code = codes.get(path) or compile(tests[path], path, "exec")
            if isinstance(code, BaseException):
                raise code
            exec(code, mod.__dict__)

        outcome, message = _run(load, path)
        if outcome != "passed":
            _emit(MARK, path + "::<collect>", "error", message)
            continue
        collected.append((path, mod))
    link.testing = True
    for path, mod in collected:
        for fname, fn in list(vars(mod).items()):
            # the functions `expected_test_ids` names: plain `def test*` of this module, no coroutines, no classes
            if (fname.startswith("test") and type(fn) is type(_emit) and fn.__module__ == mod.__name__
                    and not fn.__code__.co_flags & 0x180):
                tid = path + "::" + fname
                outcome, message = _run(lambda fn=fn: (link.between_tests(), fn()), tid)
                _emit(MARK, tid, outcome, message)
    _emit(MARK, "<end>", "", "")
'''


# The fork server: PID 1 of its sandbox (weak mode: a plain process). It never runs untrusted code and
# never holds a run's data. Protocol on stdin/stdout: it writes "ready"; then per run the parent writes
# a header line "<request bytes> <tests bytes> <wall seconds> <output limit> <inode limit>" followed by
# the JSON request and (graded runs) the JSON tests, which the run's child (not the server) reads; the
# server answers with one JSON line written by a reporter child. A run's stdout, stderr and records are
# memfds of the server's: no file of the sandbox's disk, so a full disk loses none of them.
_ZYGOTE = _CHILD + r'''
import fcntl, json, re, select, shutil, stat, time  # stdlib the runs use, imported once, before any untrusted code

_POLL_S = 0.005  # how often the server counts the disk's inodes during a run


def _readline():
    data = b""
    while not data.endswith(b"\n"):  # unbuffered: the body after the header belongs to the run's child
        ch = os.read(0, 1)
        if not ch:
            return None
        data += ch
    return data


def _send(data):
    view = memoryview(data)
    while view:
        view = view[os.write(1, view):]


def _start(work, run, sizes, fds, base):
    """The run's child: read the request, write the tree, then become the sandboxed runner."""
    code = 70
    try:
        req = json.loads(_read_exact(0, sizes[0]))
        os.setsid()
        root = os.path.join(run, "w")
        os.mkdir(root, 0o700)
        for rel, content in req["files"].items():
            full = os.path.normpath(os.path.join(root, rel))
            if not full.startswith(root + os.sep):
                raise ValueError("bad path")
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w", encoding="utf-8") as f:
                f.write(content)
        os.makedirs(os.path.join(root, "tmp"), exist_ok=True)
        high = [fcntl.fcntl(f, fcntl.F_DUPFD, 10) for f in fds]
        for f in fds:
            os.close(f)
        for f, target in zip(high, (1, 2, RES)):  # stdout, stderr, records
            os.dup2(f, target)
            os.close(f)
        argv = [req["mode"], root, base or root, *req["args"], *req["paths"]]
        if req["mode"] == "graded":
            packages = req["packages"]
            del req
            code = 0
            _graded(argv, sizes[1], packages)  # reads the tests from fd 0 once the package's process is forked
        else:
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.close(null)
            del req
            code = 0
            _child(argv)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        code = 70
    try:
        sys.stderr.flush()
    except BaseException:
        pass
    os._exit(code)


def _inodes_used(path):
    st = os.statvfs(path)
    return st.f_files - st.f_ffree


def _wait(pid, wall, work, inodes):
    """Why the child was stopped ("timeout": still running after `wall` seconds; "inodes": it made more
    than `inodes` files, directories and links on the sandbox's disk), or None if it ended by itself."""
    deadline = time.monotonic() + wall
    base = _inodes_used(work) if work and inodes else None
    if base is not None and not os.statvfs(work).f_files:
        base = None  # a tmpfs without an inode count: nothing to poll
    try:
        pfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pfd = None
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout"
            step = left if base is None else min(left, _POLL_S)
            if pfd is not None:
                if select.select([pfd], [], [], step)[0]:
                    return None
            else:
                end = time.monotonic() + step
                while time.monotonic() < end:
                    if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                        return None
                    time.sleep(0.005)
            if base is not None and _inodes_used(work) - base > inodes:
                return "inodes"
    finally:
        if pfd is not None:
            os.close(pfd)


def _kill_all(pid, box):
    try:
        if box:
            os.kill(-1, signal.SIGKILL)  # every process of the sandbox but PID 1 (this server)
        else:
            os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _lines(path):
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except OSError:
        return 0


def _wipe(path):
    """Remove the run's directory, which the run may have made unreadable (or replaced by a link)."""
    def open_up(d):
        os.chmod(d, 0o700)  # only ever a real directory, and no process of the run is left to swap it
        for e in os.scandir(d):
            if e.is_dir(follow_symlinks=False):
                open_up(e.path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(path)
        return
    open_up(path)
    shutil.rmtree(path)


def _report(work, run, fds, limit, status, stop, duration, box, keys):
    """The reporter child: outputs back to the parent, the run's directory removed, leftovers checked."""
    code = 1
    try:
        reply = {"status": status, "timed_out": stop == "timeout", "inodes": stop == "inodes", "duration": duration}
        for name, fd in zip(("out", "err", "res"), fds):
            data = os.pread(fd, limit + 1, 0)
            reply[name] = data[:limit].decode("utf-8", "replace")
            reply[name + "_cut"] = len(data) > limit
            os.close(fd)
        if box:
            st = os.statvfs(work)
            reply["disk_full"] = st.f_bavail * st.f_frsize < (256 << 10)  # what a write that met ENOSPC leaves
        residue = []
        try:
            _wipe(run)
        except Exception as e:
            residue.append("files (%s)" % type(e).__name__)
        if os.listdir(work):
            residue.append("files")
        if box:
            for kind in ("shm", "msg", "sem"):
                if _lines("/proc/sysvipc/" + kind) > 1:
                    residue.append("System V " + kind)
            if _lines("/proc/keys") != keys:
                residue.append("keys")
            if [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, os.getpid())]:
                residue.append("processes")
        reply["residue"] = residue
        _send(json.dumps(reply).encode() + b"\n")
        code = 0
    finally:
        os._exit(code)


def _serve(work, kind, persistent):
    box = kind == "box" and os.getpid() == 1
    if box:
        import ctypes
        if ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE 0: no ptrace, no /proc/1/mem
            raise SystemExit("prctl(PR_SET_DUMPABLE) failed")
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    gc.freeze()  # what the server holds now is left out of its children's collections: fewer copied pages per fork
    keys = _lines("/proc/keys") if box else 0
    base = None if box else os.path.dirname(work)  # weak mode: the hook refuses other servers' directories
    _send(b"ready\n")
    while True:
        header = _readline()
        if header is None:
            return
        size, tsize, wall, limit, inodes = header.split()
        sizes, wall, limit, inodes = (int(size), int(tsize)), float(wall), int(limit), int(inodes)
        run = os.path.join(work, "run")
        os.mkdir(run, 0o700)
        os.mkdir(os.path.join(run, "tmp"), 0o700)
        fds = [os.memfd_create(name, 0) for name in ("out", "err", "res")]
        started = time.monotonic()
        pid = os.fork()
        if pid == 0:
            _start(work, run, sizes, fds, base)
        stop = _wait(pid, wall, work if box else None, inodes)
        if stop:
            _kill_all(pid, box)
        _, status = os.waitpid(pid, 0)
        duration = time.monotonic() - started
        _kill_all(pid, box)
        while box:
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                break
        rpid = os.fork()
        if rpid == 0:
            _report(work, run, fds, limit, status, stop, duration, box, keys)
        for fd in fds:
            os.close(fd)
        _, rstatus = os.waitpid(rpid, 0)
        if rstatus != 0:
            _send(b'{"error": "the sandbox reporter failed", "residue": ["reporter"]}\n')
        if not persistent:
            return


_serve(sys.argv[1], sys.argv[2], sys.argv[3] == "persist")
'''


# ---------------------------------------------------------------------------------------- the parent
_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "TZ": "UTC"}  # all a sandbox process is started with


def _weak() -> bool:
    return environment().sandbox_weak == "1"


def _per_run() -> bool:
    return environment().sandbox_per_run == "1"


@dataclass(frozen=True)
class _Plan:
    """How to start the fork server on this host."""

    kind: str  # "box" (bwrap) | "weak"
    argv: tuple[str, ...]  # up to and including the interpreter's flags; "-c", source and arguments follow
    work: str | None  # the work area as seen by the server; None: a fresh host directory per server
    user: int | None  # start the command as this uid/gid (root parent); None: as we are
    layers: tuple[str, ...]
    mountpoint: str | None = None  # empty directory the interpreter's prefix is bound on (staged start)


@cache
def _unshare_prefix() -> tuple[str, ...]:
    """`unshare` argv prefix giving a process its own empty network namespace, or () (weak mode only)."""
    exe = shutil.which("unshare")
    if not exe:
        return ()
    argv = (exe, "--net") if os.geteuid() == 0 else (exe, "--map-root-user", "--net")
    try:
        ok = subprocess.run([*argv, "true"], capture_output=True, timeout=10, check=False, env=_ENV).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return argv if ok else ()


@cache
def _weak_plan() -> _Plan:
    net = _unshare_prefix()
    layers = ("weak", "rlimits", "audit-hook", "temp-dir", "wall-clock") + (("netns",) if net else ())
    return _Plan("weak", (*net, sys.executable, "-I", "-S", "-B"), None, None, layers)


def _reachable_by_nobody(path: str) -> bool:
    """Whether uid 65534 can traverse every directory down to `path` and read it."""
    while True:
        mode = os.stat(path).st_mode
        if not mode & stat.S_IXOTH or not mode & stat.S_IROTH:
            return False
        parent = os.path.dirname(path)
        if parent == path:
            return True
        path = parent


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


@cache
def _box_plan() -> _Plan | str:
    """The bwrap command that starts a sandbox here, or why there is none."""
    bwrap = shutil.which("bwrap", path=_ENV["PATH"]) or shutil.which("bwrap")
    if not bwrap:
        return "bwrap is not installed (Debian package bubblewrap: apt-get install -y bubblewrap)"
    try:
        usage = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10, env=_ENV, check=False).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return f"bwrap does not run: {e}"
    prefix = os.path.realpath(sys.base_prefix)
    exe = os.path.realpath(sys.executable)
    if not _under(exe, prefix):  # a venv's python links to the base interpreter; fall back to its usual name
        exe = os.path.join(prefix, "bin", f"python{sys.version_info[0]}.{sys.version_info[1]}")
    if not os.access(exe, os.X_OK):
        return f"no interpreter at {exe}"
    mounts = ["--ro-bind", "/usr", "/usr"]
    for d in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(d):
            mounts += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            mounts += ["--ro-bind", d, d]
    mounts += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    stage: list[str] = []
    user = NOBODY if os.geteuid() == 0 else None  # uid 0 outside would exempt the sandbox from RLIMIT_NPROC
    if not _under(prefix, "/usr"):
        source = prefix
        if user is not None and not _reachable_by_nobody(prefix):
            # e.g. a pyenv under /root (0700): bind it on a path nobody can reach, in a private mount namespace
            tools = {t: shutil.which(t, path=_ENV["PATH"]) for t in ("unshare", "setpriv", "sh")}
            if not all(tools.values()):
                return f"uid 65534 cannot read the interpreter under {prefix}, and unshare/setpriv are missing to bind it"
            source = os.path.join(BASE_DIR, "python")
            script = 'mount --bind -o ro "$0" "$1" && shift && exec "$@"'
            stage = [tools["unshare"], "-m", "--propagation", "private", "--", tools["sh"], "-c", script, prefix, source,
                     tools["setpriv"], f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--inh-caps=-all", "--"]
            user = None  # setpriv drops to 65534 after the mount
        mounts += ["--ro-bind", source, prefix]
    optional = []
    if "--disable-userns" in usage:
        optional += ["--unshare-user", "--disable-userns"]
    work = ["--tmpfs", BOX_WORK]
    if "--size" in usage and "--perms" in usage:
        work = ["--perms", "0700", "--size", str(WORK_MB << 20), *work]
    argv = (
        *stage, bwrap, "--unshare-all", *optional, "--uid", str(NOBODY), "--gid", str(NOBODY),
        "--die-with-parent", "--new-session", "--as-pid-1", "--clearenv",
        "--setenv", "PATH", _ENV["PATH"], "--setenv", "LANG", "C.UTF-8", "--setenv", "TZ", "UTC", "--setenv", "HOME", BOX_WORK,
        *mounts, "--proc", "/proc", "--dev", "/dev", *work, "--symlink", BOX_WORK + "/run/tmp", "/tmp",
        "--remount-ro", "/dev", "--remount-ro", "/", "--chdir", BOX_WORK,
        exe, "-I", "-S", "-B",
    )
    layers = ("bwrap", "userns", "pidns", "netns", "ipcns", "mountns", "uid-65534", "rlimits", "nproc",
              "audit-hook", "temp-dir", "wall-clock")
    return _Plan("box", argv, BOX_WORK, user, layers, source if stage else None)


def _plan() -> _Plan:
    if _weak():
        return _weak_plan()
    plan = _box_plan()
    if isinstance(plan, str):
        raise SandboxError(
            f"the sandbox for model-written code is unavailable: {plan}. Install bubblewrap, or set {WEAK_ENV}=1 "
            "for the weak development mode (audit hook only; not safe for model code)"
        )
    return plan


def isolation() -> tuple[str, ...]:
    """The isolation layers runs get on this host (for reports and tests); () if runs are refused."""
    try:
        return _plan().layers
    except SandboxError:
        return ()


class _StartError(OSError):
    pass


class _Server:
    """One sandbox holding a fork server: persistent (one per parent process) or for a single run."""

    def __init__(self, plan: _Plan, persistent: bool) -> None:
        self.plan, self.owner, self._buf = plan, os.getpid(), b""
        self.workdir = None
        if plan.work is None:  # weak mode: a private host directory
            os.makedirs(BASE_DIR, mode=0o711, exist_ok=True)
            self.workdir = tempfile.mkdtemp(prefix="weak-", dir=BASE_DIR)
        self._err = tempfile.TemporaryFile()  # noqa: SIM115 (closed in close())
        ids = {} if plan.user is None else {"user": plan.user, "group": plan.user, "extra_groups": []}
        argv = [*plan.argv, "-c", _ZYGOTE, plan.work or self.workdir or "", plan.kind, "persist" if persistent else "once"]
        try:
            if plan.mountpoint:
                os.makedirs(BASE_DIR, mode=0o711, exist_ok=True)
                os.chmod(BASE_DIR, 0o711)
                os.makedirs(plan.mountpoint, mode=0o755, exist_ok=True)
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err, env=_ENV, cwd="/",
                start_new_session=True, close_fds=True, **ids,
            )
        except OSError as e:
            self._err.close()
            if self.workdir:
                shutil.rmtree(self.workdir, ignore_errors=True)
            raise _StartError(str(e)) from None
        try:
            line = self._line(time.monotonic() + 30)
        except OSError:
            line = None
        if line != b"ready":
            why = self._stderr() or "no answer"
            self.close()
            raise _StartError(why)

    def _stderr(self) -> str:
        self._err.seek(0)
        return self._err.read(4000).decode("utf-8", "replace").strip()

    def _line(self, deadline: float) -> bytes | None:
        """The next line from the server, None at the deadline; OSError if it exited."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return None
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise OSError(f"the sandbox exited: {self._stderr()}".rstrip(": "))
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def alive(self) -> bool:
        return self.owner == os.getpid() and self.proc.poll() is None

    def run(self, request: bytes, wall_s: float) -> dict | None:
        """The server's reply for one run (`request`: header line and bodies, see `_request`); None if it
        stopped answering (the sandbox is then killed)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(request)
        self.proc.stdin.flush()
        line = self._line(time.monotonic() + wall_s + 30)
        if line is None:
            self.close()
            return None
        return json.loads(line)

    def close(self) -> None:
        if self.owner != os.getpid():
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # bwrap; --die-with-parent takes the sandbox with it
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
            self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self._err):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


class _Zygote:
    """The persistent sandbox of this process (replaced when it dies, leaves residue, or the process forked)."""

    _lock = threading.Lock()
    _server: _Server | None = None
    _proc: subprocess.Popen[bytes] | None = None  # the server's process (for tests)
    failures = 0

    @classmethod
    def reset(cls) -> None:
        if cls._server is not None:
            cls._server.close()
        cls._server, cls._proc = None, None

    @classmethod
    def _after_fork(cls) -> None:  # in a forked child: the parent's sandbox is not ours
        cls._lock, cls._server, cls._proc = threading.Lock(), None, None

    @classmethod
    def run(cls, plan: _Plan, request: bytes, wall_s: float) -> dict | None:
        if not _per_run():
            with cls._lock:
                server = cls._server
                if server is None or not server.alive() or server.plan != plan:
                    cls.reset()
                    if cls.failures < 3:
                        try:
                            server = cls._server = _Server(plan, persistent=True)
                            cls._proc = server.proc
                        except _StartError:
                            cls.failures += 1
                            server = None
                if server is not None:
                    try:
                        reply = server.run(request, wall_s)
                    except (OSError, ValueError):  # the server died under the run: retry once in a fresh sandbox
                        cls.failures += 1
                        cls.reset()
                    else:
                        if reply is None or reply.get("residue") or "error" in reply:
                            cls.reset()  # a fresh sandbox for the next run
                        return reply
        return cls._once(plan, request, wall_s)

    @staticmethod
    def _once(plan: _Plan, request: bytes, wall_s: float) -> dict | None:
        try:
            server = _Server(plan, persistent=False)
        except _StartError as e:
            raise SandboxError(
                f"the sandbox for model-written code cannot start: {e}. Model code is not run without it "
                f"(set {WEAK_ENV}=1 for the weak development mode)"
            ) from None
        try:
            return server.run(request, wall_s)
        except (OSError, ValueError) as e:
            return {"error": f"the sandbox failed: {e}"}
        finally:
            server.close()


os.register_at_fork(after_in_child=_Zygote._after_fork)
atexit.register(_Zygote.reset)


def _safe_rel(path: str) -> str:
    p = PurePosixPath(path)
    if not path or p.is_absolute() or ".." in p.parts or "\\" in path or "\x00" in path:
        raise SandboxError(f"bad path {path!r}")
    return str(p)


MAX_VIOLATIONS = 20  # distinct violation lines a result keeps (the run writes them; it may write millions)


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


def run_tests(files: Mapping[str, str], test_paths: Sequence[str], limits: Limits = Limits()) -> SandboxResult:
    """Run the `test_*` functions of `test_paths` (paths inside `files`) in a fresh sandbox. The tests and
    the code they test share one process, so the code can write the run's records itself: this is the
    agent's own test run, never a grader's (a grader uses `run_graded_tests`)."""
    paths = [_safe_rel(p) for p in test_paths]
    missing = [p for p in paths if p not in files]
    if missing:
        raise SandboxError(f"test files not in the tree: {missing}")
    return _run(files, "tests", paths, limits)


def run_python(files: Mapping[str, str], script: str, limits: Limits = Limits()) -> SandboxResult:
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


def run_graded_tests(package: Mapping[str, str], tests: Mapping[str, str], limits: Limits = Limits()) -> SandboxResult:
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


__all__ = ["Limits", "SandboxError", "SandboxResult", "TestResult", "expected_test_ids", "isolation", "run_graded_tests",
           "run_python", "run_tests"]
