"""Sandboxed execution of model-written Python (DESIGN §6).

Every run of code an agent wrote happens here: a fresh process per run, in a fresh directory, with
nothing shared between runs. The API is two calls:

- `run_python(files, script)` runs one script of a file tree;
- `run_tests(files, test_paths)` runs test files with a tiny in-sandbox test runner (pytest-like
  discovery of `test_*` functions, a minimal `pytest` shim with `raises`/`approx`), which is far faster
  than starting pytest per run.

Both return a `SandboxResult`; `result.stopped` says in words why the sandbox stopped or refused
something (None when nothing was), and `result.report()` renders the run for an observation.

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
   thread count (RLIMIT_NPROC, counted per user namespace, i.e. per sandbox). The tmpfs caps the disk.
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

Test results travel on the child's original stdout fd; `sys.stdout` is pointed at stderr while tests
run, so code under test cannot print fake result lines.
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
from dataclasses import dataclass, field
from functools import cache
from pathlib import PurePosixPath

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


MARK = "\x1esbx "  # prefix of the runner's result lines on stdout
VIOLATION = "[sandbox-violation] "
NOBODY = 65534
BASE_DIR = os.path.join(tempfile.gettempdir(), "coevolve-sandbox")
BOX_WORK = "/sandbox"  # the sandbox's tmpfs, as seen inside
WORK_MB = 256  # size of that tmpfs (files a run may write, outputs included)
WEAK_ENV = "COEVOLVE_SANDBOX_WEAK"
PER_RUN_ENV = "COEVOLVE_SANDBOX_PER_RUN"


@dataclass(frozen=True)
class Limits:
    wall_s: float = 10.0  # whole run, enforced by the fork server (every process of the run is killed)
    per_test_s: float = 2.0  # one test function, enforced by an alarm in the child
    cpu_s: int = 10
    memory_mb: int = 512  # address space, per process
    output_bytes: int = 2_000_000  # stdout and stderr each, and any file written (RLIMIT_FSIZE)
    open_files: int = 64
    processes: int = 16  # processes and threads of the run at once (RLIMIT_NPROC in the sandbox)


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
        """Why the sandbox stopped or refused something, or None if it did not."""
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
        out = "\n".join(lines)
        return out if len(out) <= max_chars else out[: max_chars // 2] + "\n...\n" + out[-max_chars // 2 :]


class SandboxError(ValueError):
    """Bad input to the sandbox itself (e.g. a path escaping the tree), or no sandbox can be started."""


# ----------------------------------------------------------------------------------------- the child
_CHILD = r'''
import os, resource, signal, sys

def _child(argv):
    (MODE, ROOT, BASE, MARK, VIOL, NPROC, MEM, CPU, FSIZE, NOFILE, PER_TEST), ARGS = argv[:11], argv[11:]
    MEM, CPU, FSIZE, NOFILE, PER_TEST = int(MEM), int(CPU), int(FSIZE), int(NOFILE), float(PER_TEST)
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

    ROOT = os.path.realpath(ROOT)
    BASE = os.path.realpath(BASE)
    os.environ["HOME"] = ROOT
    os.environ["TMPDIR"] = os.path.join(ROOT, "tmp")
    WRITE = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
    OUT = os.dup(1)
    _busy = [False]

    def _emit(*rec):
        os.write(OUT, (MARK + repr(rec) + "\n").encode())

    def _mark(kind, what):
        try:
            os.write(2, ("\n" + VIOL + kind + ": " + what + "\n").encode())
        except OSError:
            pass

    def _refuse(kind, what):
        _mark(kind, what)
        raise PermissionError("sandbox refused " + kind + " access: " + what)

    def _inside(full, root):
        return full == root or full.startswith(root + os.sep)

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

    class _Timeout(BaseException):
        pass

    def _alarm(signum, frame):
        raise _Timeout()

    signal.signal(signal.SIGALRM, _alarm)

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

    pytest = type(sys)("pytest")
    pytest.raises = _Raises
    pytest.approx = _Approx
    sys.modules["pytest"] = pytest
    sys.path.insert(0, ROOT)
    os.chdir(ROOT)
    sys.stdout = sys.stderr

    def _short(exc):
        where = []
        tb = exc.__traceback__
        while tb is not None:
            name = tb.tb_frame.f_code.co_filename
            if not name.startswith("<") and _inside(os.path.realpath(name), ROOT):
                where.append("  at %s:%d in %s" % (os.path.relpath(name, ROOT), tb.tb_lineno, tb.tb_frame.f_code.co_name))
            tb = tb.tb_next
        text = type(exc).__name__ + (": " + str(exc) if str(exc) else "")
        return "\n".join([text] + where[-3:])

    _MEMORY = ("error", "stopped: memory limit exceeded")

    def _run(fn, tid):
        # built before the code runs: reporting must not need memory the code may have used up
        memline = ("\n" + VIOL + "memory: " + tid + " exceeded the " + str(MEM // 2**20) + " MiB limit\n").encode()
        signal.setitimer(signal.ITIMER_REAL, PER_TEST)
        try:
            fn()
            return "passed", ""
        except _Timeout:
            _mark("timeout", tid + " ran longer than " + str(PER_TEST) + " s")
            return "error", "stopped: ran longer than %s s (endless loop?)" % PER_TEST
        except MemoryError:
            try:
                os.write(2, memline)
            except OSError:
                pass
            return _MEMORY
        except BaseException as e:
            return "failed", _short(e)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)

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

    sys.addaudithook(_hook)

    if MODE == "script":
        outcome, message = _run(lambda: _load(ARGS[0]), ARGS[0])
        _emit(ARGS[0], outcome, message)
    else:
        for path in ARGS:
            box = []
            outcome, message = _run(lambda: box.append(_load(path)), path)
            if outcome != "passed":
                _emit(path + "::<collect>", "error", message)
                continue
            mod = box[0]
            for fname, fn in list(vars(mod).items()):
                if fname.startswith("test") and callable(fn) and getattr(fn, "__module__", None) == mod.__name__:
                    tid = path + "::" + fname
                    outcome, message = _run(fn, tid)
                    _emit(tid, outcome, message)
    _emit("<end>", "", "")
'''


# The fork server: PID 1 of its sandbox (weak mode: a plain process). It never runs untrusted code and
# never holds a run's data. Protocol on stdin/stdout: it writes "ready"; then per run the parent writes
# a header line "<body bytes> <wall seconds> <output limit>" followed by a JSON body, which the run's
# child (not the server) reads; the server answers with one JSON line written by a reporter child.
_ZYGOTE = _CHILD + r'''
import datetime, json, re, select, shutil, stat, time  # stdlib the runs use, imported once, before any untrusted code


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


def _start(work, run, size, fds, base):
    """The run's child: read the request, write the tree, then become the sandboxed runner."""
    code = 70
    try:
        body = bytearray()
        while len(body) < size:
            chunk = os.read(0, size - len(body))
            if not chunk:
                raise EOFError("short request")
            body += chunk
        req = json.loads(bytes(body))
        del body
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
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        for f in (null, *fds):
            os.close(f)
        argv = [req["mode"], root, base or root, *req["args"], *req["paths"]]
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


def _wait(pid, wall):
    """True if the child was still running after `wall` seconds."""
    try:
        pfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pfd = None
    if pfd is not None:
        try:
            return not select.select([pfd], [], [], wall)[0]
        finally:
            os.close(pfd)
    deadline = time.monotonic() + wall
    while time.monotonic() < deadline:
        if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            return False
        time.sleep(0.005)
    return True


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


def _report(work, run, fds, limit, status, timed_out, duration, box, keys):
    """The reporter child: outputs back to the parent, the run's directory removed, leftovers checked."""
    code = 1
    try:
        reply = {"status": status, "timed_out": timed_out, "duration": duration}
        for name, fd in zip(("out", "err"), fds):
            data = os.pread(fd, limit + 1, 0)
            reply[name] = data[:limit].decode("utf-8", "replace")
            reply[name + "_cut"] = len(data) > limit
            os.close(fd)
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
    keys = _lines("/proc/keys") if box else 0
    base = None if box else os.path.dirname(work)  # weak mode: the hook refuses other servers' directories
    _send(b"ready\n")
    while True:
        header = _readline()
        if header is None:
            return
        size, wall, limit = header.split()
        size, wall, limit = int(size), float(wall), int(limit)
        run = os.path.join(work, "run")
        os.mkdir(run, 0o700)
        os.mkdir(os.path.join(run, "tmp"), 0o700)
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        fds = [os.open(os.path.join(run, name), flags, 0o600) for name in ("out", "err")]
        started = time.monotonic()
        pid = os.fork()
        if pid == 0:
            _start(work, run, size, fds, base)
        timed_out = _wait(pid, wall)
        if timed_out:
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
            _report(work, run, fds, limit, status, timed_out, duration, box, keys)
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
    return os.environ.get(WEAK_ENV, "") == "1"


def _per_run() -> bool:
    return os.environ.get(PER_RUN_ENV, "") == "1"


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

    def run(self, body: bytes, wall_s: float, limit: int) -> dict | None:
        """The server's reply for one run; None if it stopped answering (the sandbox is then killed)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"%d %r %d\n" % (len(body), float(wall_s), limit) + body)
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
    def run(cls, plan: _Plan, body: bytes, wall_s: float, limit: int) -> dict | None:
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
                        reply = server.run(body, wall_s, limit)
                    except (OSError, ValueError):  # the server died under the run: retry once in a fresh sandbox
                        cls.failures += 1
                        cls.reset()
                    else:
                        if reply is None or reply.get("residue") or "error" in reply:
                            cls.reset()  # a fresh sandbox for the next run
                        return reply
        return cls._once(plan, body, wall_s, limit)

    @staticmethod
    def _once(plan: _Plan, body: bytes, wall_s: float, limit: int) -> dict | None:
        try:
            server = _Server(plan, persistent=False)
        except _StartError as e:
            raise SandboxError(
                f"the sandbox for model-written code cannot start: {e}. Model code is not run without it "
                f"(set {WEAK_ENV}=1 for the weak development mode)"
            ) from None
        try:
            return server.run(body, wall_s, limit)
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


def _run(files: Mapping[str, str], mode: str, paths: list[str], limits: Limits) -> SandboxResult:
    plan = _plan()
    tree = {_safe_rel(rel): content for rel, content in files.items()}
    args = [
        MARK, VIOLATION, str(limits.processes + 1) if plan.kind == "box" else "-",  # +1: the fork server
        str(limits.memory_mb * 2**20), str(limits.cpu_s), str(limits.output_bytes), str(limits.open_files),
        str(limits.per_test_s),
    ]
    body = json.dumps({"files": tree, "mode": mode, "args": args, "paths": paths}).encode()
    reply = _Zygote.run(plan, body, limits.wall_s, limits.output_bytes)
    if reply is None:  # the sandbox itself stopped answering; it was killed
        return SandboxResult(None, "", "", float(limits.wall_s), timed_out=True, completed=False, isolation=plan.layers,
                             wall_limit_s=limits.wall_s)
    if "error" in reply:
        return SandboxResult(None, "", str(reply["error"]), 0.0, violations=(f"sandbox: {reply['error']}",),
                             completed=False, isolation=plan.layers, wall_limit_s=limits.wall_s)
    timed_out = bool(reply["timed_out"])
    stdout = reply["out"] + ("\n...[output truncated]" if reply["out_cut"] else "")
    stderr = reply["err"] + ("\n...[output truncated]" if reply["err_cut"] else "")
    tests: dict[str, TestResult] = {}
    completed = False
    plain: list[str] = []
    for line in stdout.split("\n"):
        if not line.startswith(MARK):
            plain.append(line)
            continue
        try:
            tid, outcome, message = ast.literal_eval(parse_python(line[len(MARK) :], mode="eval"))
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if tid == "<end>":
            completed = True
        elif isinstance(tid, str):
            tests[tid] = TestResult(tid, str(outcome), str(message))
    violations = tuple(
        dict.fromkeys(line[len(VIOLATION) :].strip() for line in stderr.splitlines() if line.startswith(VIOLATION))
    )
    if not timed_out and not completed and "MemoryError" in stderr:
        violations += ("memory: the run exceeded the memory limit",)
    return SandboxResult(
        returncode=None if timed_out else os.waitstatus_to_exitcode(int(reply["status"])),
        stdout="\n".join(plain),
        stderr="\n".join(line for line in stderr.splitlines() if not line.startswith(VIOLATION)).strip(),
        duration_s=round(float(reply["duration"]), 3),
        timed_out=timed_out,
        violations=violations,
        tests=tuple(tests.values()),
        completed=completed,
        isolation=plan.layers,
        wall_limit_s=limits.wall_s,
    )


def run_tests(files: Mapping[str, str], test_paths: Sequence[str], limits: Limits = Limits()) -> SandboxResult:
    """Run the `test_*` functions of `test_paths` (paths inside `files`) in a fresh sandbox."""
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


__all__ = ["Limits", "SandboxError", "SandboxResult", "TestResult", "isolation", "run_python", "run_tests"]
