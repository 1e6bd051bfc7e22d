"""How a sandbox is started on this host: the bwrap command line (or, in the weak development mode, the
plain interpreter), as a `_Plan`, and the isolation layers it gives (`isolation`)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import cache

from coevolve.sandbox.results import SandboxError
from coevolve.settings import environment, variable

NOBODY = 65534
BASE_DIR = os.path.join(tempfile.gettempdir(), "coevolve-sandbox")
BOX_WORK = "/sandbox"  # the sandbox's tmpfs, as seen inside
WORK_MB = 256  # size of that tmpfs (files a run may write; its outputs are memfds, outside it)
WEAK_ENV = variable("sandbox_weak")
_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "TZ": "UTC"}  # all a sandbox process is started with


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
    if environment().sandbox_weak == "1":
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
