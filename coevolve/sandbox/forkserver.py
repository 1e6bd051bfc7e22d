"""The fork server: PID 1 of its sandbox (weak mode: a plain process). It never runs untrusted code and
never holds a run's data. Protocol on stdin/stdout: it writes "ready"; then per run the parent writes a
header line "<request bytes> <tests bytes> <wall seconds> <output limit> <inode limit>" followed by the
JSON request and (graded runs) the JSON tests, which the run's child (not the server) reads; the server
answers with one JSON line written by a reporter child. A run's stdout, stderr and records are memfds of
the server's: no file of the sandbox's disk, so a full disk loses none of them.

Runs only inside the sandbox, never on the host: `server.py` hands this file's text, after `child.py`'s,
to the box's interpreter as one `python -I -S -B -c` program, so the runners' names (`_child`, `_graded`,
`_read_exact`, `RES`) are this program's globals. Standard library only; the guard below refuses an import.
"""

# stdlib the runs use, imported once, before any untrusted code (child.py imports `re` and the runners' own)
import fcntl
import gc
import json
import os
import select
import shutil
import signal
import stat
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # for the linter and type checkers only: in the box these are child.py's globals
    from coevolve.sandbox.child import RES, _child, _graded, _read_exact  # noqa: TC004 - globals of the one program

if __name__ != "__main__":
    raise ImportError(f"{__name__} runs only inside the sandbox, as the text of its program (see server.py)")

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
    except BaseException:  # noqa: BLE001 - whatever ended the run's child, it exits with code 70
        code = 70
    try:
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001, S110 - the child exits below whatever happened
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
        except Exception as e:  # noqa: BLE001 - any failure to remove the run's files is residue
            residue.append(f"files ({type(e).__name__})")
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
