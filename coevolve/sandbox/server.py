"""The host's side of the fork server (`forkserver.py`, inside the sandbox): `_Server` starts one sandbox
holding it and talks to it; `_Zygote` keeps this process's persistent one (or, with `PER_RUN_ENV`, starts
one per run, which is also the fallback when the persistent one cannot start or dies under a run)."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from importlib import resources

from coevolve.sandbox.box import _ENV, BASE_DIR, WEAK_ENV, _Plan
from coevolve.sandbox.results import SandboxError
from coevolve.settings import environment, variable

PER_RUN_ENV = variable("sandbox_per_run")


def _program() -> str:
    """The fork server's `python -c` program: the text of `child.py` (the runners), then of `forkserver.py`
    (the server), read from the package's files, never imported: the process in the box imports no module
    of the project, only the standard library."""
    here = resources.files(__package__)
    return "".join(here.joinpath(name).read_text(encoding="utf-8") for name in ("child.py", "forkserver.py"))


_PROGRAM = _program()


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
        argv = [*plan.argv, "-c", _PROGRAM, plan.work or self.workdir or "", plan.kind, "persist" if persistent else "once"]
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
            with contextlib.suppress(OSError):
                if f is not None:
                    f.close()
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
        if environment().sandbox_per_run != "1":
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
