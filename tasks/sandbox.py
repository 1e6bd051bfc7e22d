"""Sandboxed execution of model-written Python (DESIGN §6).

Every run of code an agent wrote happens here: a fresh child interpreter per run, in a fresh temporary
directory, with nothing shared between runs. The API is two calls:

- `run_python(files, script)` runs one script of a file tree;
- `run_tests(files, test_paths)` runs test files with a tiny in-sandbox test runner (pytest-like
  discovery of `test_*` functions, a minimal `pytest` shim with `raises`/`approx`), which is far faster
  than starting pytest per run.

Both return a `SandboxResult`; `result.stopped` says in words why the sandbox stopped or refused
something (None when nothing was), and `result.report()` renders the run for an observation.

Layers, each of which alone refuses the listed behaviour (decided: defence in depth, all cheap):

1. A trusted boot prelude runs in the child before any untrusted code: it sets `resource` limits
   (address space, CPU seconds, file size, open files, no core dumps) and, when the parent is root
   and `nobody` can read the stdlib, drops to uid/gid `nobody` with no forks allowed (RLIMIT_NPROC 0). The limits are set in the child
   rather than in a `preexec_fn` because `preexec_fn` is not safe when the parent has threads (executor
   pools, litellm), and the prelude runs before any untrusted code anyway.
2. A `sys.addaudithook` hook (cannot be removed once installed) refuses socket creation and name
   resolution, process creation (fork, exec, spawn, subprocess, system, kill), `ctypes`, raising
   rlimits, any file write, rename, removal or mkdir outside the run's directory, and any access to
   other runs' directories. A refusal raises `PermissionError` and writes a marker line to stderr,
   which the parent turns into a violation even if the code swallows the exception.
3. When the `unshare` binary works, the child runs in its own network namespace (no interfaces up),
   so even a hook bypass has no network. Probed once per process; absent on some hosts.
4. The parent enforces a wall-clock limit (the whole process group is killed), a per-test alarm stops
   endless loops inside one test, and output is capped by RLIMIT_FSIZE on the captured stdout/stderr.

Start-up cost: a fork server (one per parent process, started inside the network namespace, never
running untrusted code itself) forks a child per run, so a run costs a fork instead of an interpreter
start (~10x cheaper on a loaded machine). The child applies layers 1-2 after the fork exactly as a fresh
interpreter would; preloaded modules are stdlib only. If the fork server cannot be used (it dies three
times), every run starts its own interpreter.

Test results travel on the child's original stdout fd; `sys.stdout` is pointed at stderr while tests
run, so code under test cannot print fake result lines. Nothing is cached across runs: every run gets a
fresh directory (removed afterwards) and a fresh process.
"""

from __future__ import annotations

import ast
import atexit
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

MARK = "\x1esbx "  # prefix of the runner's result lines on stdout
VIOLATION = "[sandbox-violation] "
NOBODY = 65534
BASE_DIR = os.path.join(tempfile.gettempdir(), "coevolve-sandbox")


@dataclass(frozen=True)
class Limits:
    wall_s: float = 10.0  # whole run, enforced by the parent
    per_test_s: float = 2.0  # one test function, enforced by an alarm in the child
    cpu_s: int = 10
    memory_mb: int = 512  # address space
    output_bytes: int = 2_000_000  # stdout and stderr each (RLIMIT_FSIZE)
    open_files: int = 64


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
    duration_s: float
    timed_out: bool = False
    violations: tuple[str, ...] = ()  # "network: ...", "filesystem: ...", "process: ...", "memory: ...", "timeout: ..."
    tests: tuple[TestResult, ...] = ()
    completed: bool = True  # the runner reached its end marker (tests mode)
    isolation: tuple[str, ...] = field(default=())

    @property
    def stopped(self) -> str | None:
        """Why the sandbox stopped or refused something, or None if it did not."""
        if self.timed_out:
            return f"the run was stopped after the {self.duration_s:.1f} s wall-clock limit (endless loop?)"
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
        """A pytest-like summary for a tool observation."""
        lines = [f"{t.id} {t.outcome.upper()}" for t in self.tests]
        bad = [t for t in self.tests if t.outcome != "passed"]
        if bad:
            lines.append("=== failures ===")
            for t in bad:
                lines.append(f"{t.id}\n  {t.message.strip()[:800]}".rstrip())
        counts = {o: sum(t.outcome == o for t in self.tests) for o in ("passed", "failed", "error")}
        summary = ", ".join(f"{n} {o}" for o, n in counts.items() if n) or "no tests ran"
        lines.append(f"=== {summary} in {self.duration_s:.2f}s ===")
        if self.stopped:
            lines.append(f"sandbox: {self.stopped}")
        out = "\n".join(lines)
        return out if len(out) <= max_chars else out[: max_chars // 2] + "\n...\n" + out[-max_chars // 2 :]


class SandboxError(ValueError):
    """Bad input to the sandbox itself (e.g. a path escaping the tree)."""


# ----------------------------------------------------------------------------------------- the child
_CHILD = r'''
import os, resource, signal, sys

def _child(argv):
    (MODE, ROOT, BASE, MARK, VIOL, UID, MEM, CPU, FSIZE, NOFILE, PER_TEST), ARGS = argv[:11], argv[11:]
    MEM, CPU, FSIZE, NOFILE, PER_TEST = int(MEM), int(CPU), int(FSIZE), int(NOFILE), float(PER_TEST)
    def _lim(which, value):
        resource.setrlimit(which, (value, value))
    _lim(resource.RLIMIT_AS, MEM)
    _lim(resource.RLIMIT_CPU, CPU)
    _lim(resource.RLIMIT_FSIZE, FSIZE)
    _lim(resource.RLIMIT_CORE, 0)
    _lim(resource.RLIMIT_NOFILE, NOFILE)
    if UID != "-":
        os.setgroups([])
        os.setgid(int(UID))
        os.setuid(int(UID))
        _lim(resource.RLIMIT_NPROC, 0)

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

    def _run(fn, tid):
        signal.setitimer(signal.ITIMER_REAL, PER_TEST)
        try:
            fn()
            return "passed", ""
        except _Timeout:
            _mark("timeout", tid + " ran longer than " + str(PER_TEST) + " s")
            return "error", "stopped: ran longer than %s s (endless loop?)" % PER_TEST
        except MemoryError:
            _mark("memory", tid + " exceeded the " + str(MEM // 2**20) + " MiB limit")
            return "error", "stopped: memory limit exceeded"
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

# One fresh interpreter per run (fallback when the fork server is unavailable).
_DIRECT = _CHILD + "\n_child(sys.argv[1:])\n"

# The fork server: started once per parent process (inside the network namespace), it never runs
# untrusted code itself; each request forks a child that sets up the sandbox and runs one job.
_ZYGOTE = _CHILD + r'''
import datetime, re, time  # stdlib the generated tests use, imported once, before any untrusted code
_fin = os.fdopen(0, "rb", buffering=0)
_reply = os.dup(1)
_buf = b""
while True:
    while b"\n" not in _buf:
        chunk = _fin.read(65536)
        if not chunk:
            os._exit(0)
        _buf += chunk
    line, _, _buf = _buf.partition(b"\n")
    req = line.decode().split("\x1f")
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.setsid()
            fd = os.open(os.devnull, os.O_RDONLY)
            os.dup2(fd, 0)
            out = os.open(req[0], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            err = os.open(req[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(out, 1)
            os.dup2(err, 2)
            for f in (fd, out, err, _reply):
                os.close(f)
            _child(req[2:])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:
            code = 70
        try:
            sys.stderr.flush()
        except BaseException:
            pass
        os._exit(code)
    os.write(_reply, b"%d\n" % pid)
    _, status = os.waitpid(pid, 0)
    os.write(_reply, b"%d\n" % status)
'''


# ---------------------------------------------------------------------------------------- the parent
@cache
def _unshare_prefix() -> tuple[str, ...]:
    """`unshare` argv prefix giving the child its own empty network namespace, or () if unavailable."""
    exe = shutil.which("unshare")
    if not exe:
        return ()
    argv = (exe, "--net") if os.geteuid() == 0 else (exe, "--map-root-user", "--net")
    try:
        ok = subprocess.run([*argv, "true"], capture_output=True, timeout=10, check=False).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return argv if ok else ()


@cache
def _drop_uid() -> int | None:
    """Run as `nobody` when the parent is root and `nobody` can still read the interpreter's stdlib
    (a Python installed under a private home directory cannot be used after the drop)."""
    if os.geteuid() != 0:
        return None
    path = os.path.dirname(os.__file__)
    while True:
        mode = os.stat(path).st_mode
        if not mode & stat.S_IXOTH or not mode & stat.S_IROTH:
            return None
        parent = os.path.dirname(path)
        if parent == path:
            return NOBODY
        path = parent


def isolation() -> tuple[str, ...]:
    """The isolation layers active on this host (for reports and tests)."""
    layers = ["rlimits", "audit-hook", "temp-dir", "wall-clock"]
    if _drop_uid() is not None:
        layers.append("uid-nobody")
    if _unshare_prefix():
        layers.append("netns")
    return tuple(layers)


def _safe_rel(path: str) -> str:
    p = PurePosixPath(path)
    if not path or p.is_absolute() or ".." in p.parts or "\\" in path or "\x00" in path:
        raise SandboxError(f"bad path {path!r}")
    return str(p)


def _write_tree(root: str, files: Mapping[str, str], uid: int | None) -> None:
    for rel, content in files.items():
        full = os.path.join(root, _safe_rel(rel))
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as f:
            f.write(content)
    os.makedirs(os.path.join(root, "tmp"), exist_ok=True)
    if uid is not None:
        for d, dirs, names in os.walk(root):
            os.chown(d, uid, uid)
            for n in names:
                os.chown(os.path.join(d, n), uid, uid)


_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "TZ": "UTC"}


class _Zygote:
    """The fork server of this process (restarted if it dies or the process forked)."""

    _lock = threading.Lock()
    _proc: subprocess.Popen[bytes] | None = None
    _owner = 0
    _buf = b""
    failures = 0

    @classmethod
    def reset(cls) -> None:
        with cls._lock:
            cls.failures += 1
            if cls._proc is not None and cls._owner == os.getpid():
                cls._stop(cls._proc)
            cls._proc = None

    @classmethod
    def _start(cls) -> subprocess.Popen[bytes]:
        if cls._proc is not None and cls._owner == os.getpid() and cls._proc.poll() is None:
            return cls._proc
        argv = [*_unshare_prefix(), sys.executable, "-I", "-S", "-B", "-c", _ZYGOTE]
        cls._proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=_ENV,
            cwd=BASE_DIR, start_new_session=True, close_fds=True,
        )
        cls._owner, cls._buf = os.getpid(), b""
        atexit.register(cls._stop, cls._proc)
        return cls._proc

    @staticmethod
    def _stop(proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    @classmethod
    def _line(cls, proc: subprocess.Popen[bytes], deadline: float | None) -> int | None:
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        while b"\n" not in cls._buf:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([fd], [], [], wait)
            if not ready:
                return None
            chunk = os.read(fd, 4096)
            if not chunk:
                raise OSError("fork server exited")
            cls._buf += chunk
        line, _, cls._buf = cls._buf.partition(b"\n")
        return int(line)

    @classmethod
    def run(cls, out: str, err: str, args: list[str], wall_s: float) -> tuple[int | None, bool]:
        """(exit status as returncode, timed out)."""
        with cls._lock:
            proc = cls._start()
            assert proc.stdin is not None
            proc.stdin.write("\x1f".join([out, err, *args]).encode() + b"\n")
            proc.stdin.flush()
            pid = cls._line(proc, time.monotonic() + 30)
            if pid is None:
                raise OSError("fork server did not answer")
            status = cls._line(proc, time.monotonic() + wall_s)
            timed_out = status is None
            if timed_out:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                status = cls._line(proc, time.monotonic() + 30)
                if status is None:
                    raise OSError("fork server hung")
            return os.waitstatus_to_exitcode(status), timed_out


def _direct(root: str, out: str, err: str, args: list[str], wall_s: float) -> tuple[int | None, bool]:
    argv = [*_unshare_prefix(), sys.executable, "-I", "-S", "-B", "-c", _DIRECT, *args]
    with open(out, "wb") as fo, open(err, "wb") as fe:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=fo, stderr=fe, cwd=root, env=_ENV,
            start_new_session=True, close_fds=True,
        )
        try:
            return proc.wait(timeout=wall_s), False
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
            return None, True


def _read_capped(path: str, limit: int) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError:
        return ""
    text = data.decode("utf-8", "replace")
    return text[:limit] + ("\n...[output truncated]" if len(data) > limit else "")


def _run(files: Mapping[str, str], mode: str, paths: list[str], limits: Limits) -> SandboxResult:
    uid = _drop_uid()
    os.makedirs(BASE_DIR, mode=0o711, exist_ok=True)
    run_dir = tempfile.mkdtemp(prefix="run-", dir=BASE_DIR)
    try:
        os.chmod(run_dir, 0o711)
        root = os.path.join(run_dir, "w")
        os.mkdir(root)
        _write_tree(root, files, uid)
        out, err = os.path.join(run_dir, "out"), os.path.join(run_dir, "err")
        args = [
            mode, root, BASE_DIR, MARK, VIOLATION, "-" if uid is None else str(uid),
            str(limits.memory_mb * 2**20), str(limits.cpu_s), str(limits.output_bytes), str(limits.open_files),
            str(limits.per_test_s), *paths,
        ]
        started = time.monotonic()
        returncode: int | None = None
        ran = False
        while not ran and _Zygote.failures < 3:
            try:
                returncode, timed_out = _Zygote.run(out, err, args, limits.wall_s)
                ran = True
            except OSError:
                _Zygote.reset()  # a fresh fork server next time; after 3 failures, one interpreter per run
        if not ran:
            started = time.monotonic()
            returncode, timed_out = _direct(root, out, err, args, limits.wall_s)
        duration = time.monotonic() - started
        stdout = _read_capped(out, limits.output_bytes)
        stderr = _read_capped(err, limits.output_bytes)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    tests: dict[str, TestResult] = {}
    completed = False
    plain: list[str] = []
    for line in stdout.split("\n"):
        if not line.startswith(MARK):
            plain.append(line)
            continue
        try:
            tid, outcome, message = ast.literal_eval(line[len(MARK) :])
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
        returncode=None if timed_out else returncode,
        stdout="\n".join(plain),
        stderr="\n".join(line for line in stderr.splitlines() if not line.startswith(VIOLATION)).strip(),
        duration_s=round(duration, 3),
        timed_out=timed_out,
        violations=violations,
        tests=tuple(tests.values()),
        completed=completed,
        isolation=isolation(),
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
