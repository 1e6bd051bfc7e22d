"""The sandbox for model-written code contains hostile code (coevolve/sandbox/).

Every hostile snippet runs through `run_python` and through `run_tests` (as the body of a test function),
and each case asserts on effects on the host: the file outside was not written, the secret and the fake
API key never came back, nothing connected to the host's listener, the run was stopped with a reason
where it should be, and afterwards no process of the run is left (scanned by a marker in the command
line and by the sandbox's PID namespace). Most snippets first switch the in-sandbox audit hook off (the
bypasses that defeated it alone), so what is tested is the kernel isolation.
"""

from __future__ import annotations

import os
import socket
import textwrap
import threading
import time
import uuid

import pytest

from coevolve import sandbox

FAKE_KEY = "sk-fake-" + uuid.uuid4().hex
SECRET = "coevolve-store-secret-" + uuid.uuid4().hex
PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUICK = sandbox.Limits(wall_s=4.0, per_test_s=3.0, cpu_s=4)
ROOMY = sandbox.Limits(wall_s=30.0, per_test_s=25.0, cpu_s=25)  # time is not what should stop a memory bomb

# Switch the audit hook off the way that defeated it: its re-entrancy flag, found through gc.
OFF_GC = '''
import gc
for _o in gc.get_objects():
    if getattr(_o, "__name__", None) == "_hook" and getattr(_o, "__closure__", None):
        for _c in _o.__closure__:
            if isinstance(_c.cell_contents, list) and _c.cell_contents == [False]:
                _c.cell_contents[0] = True
'''
# ... or through the frames of the runner.
OFF_FRAME = '''
import sys
_f = sys._getframe()
while _f is not None:
    if _f.f_code.co_name == "_child":
        _f.f_locals["_busy"][0] = True
    _f = _f.f_back
'''
READ_SECRETS = '''
import os
for _p in ("SECRET_PATH", "WORKDIR/pyproject.toml", "/root/.bashrc", "/root/.npmrc", "/root/.ssh", "/etc/shadow"):
    try:
        print("READ", _p, open(_p).read())
    except OSError as _e:
        print("DENIED", _p, _e)
'''
WRITE_OUTSIDE = '''
for _p in ("OUTSIDE/MARKER.txt", "/tmp/MARKER.txt", "WORKDIR/MARKER.txt", "/root/MARKER.txt"):
    try:
        with open(_p, "w") as _f:
            _f.write("pwned")
        print("WROTE", _p)
    except OSError as _e:
        print("DENIED", _p, _e)
'''

CASES: dict[str, tuple[str, tuple[str, ...]]] = {
    # name: (snippet, words one of which the `stopped` reason must contain; () = no stop required)
    "fork_exec": ('''
import _posixsubprocess, os, time
r, w = os.pipe()
argv = [b"/bin/sh", b"-c", b"echo pwned > OUTSIDE/MARKER.txt; cat SECRET_PATH; sleep 60 # MARKER"]
pid = _posixsubprocess.fork_exec(argv, [b"/bin/sh"], True, (w,), None, None, -1, -1, -1, -1, -1, -1, r, w,
                                 True, True, -1, None, None, None, -1, None, True)
print("spawned", pid)
time.sleep(0.3)
''', ()),
    "gc_flag_flip": (OFF_GC + READ_SECRETS + WRITE_OUTSIDE, ()),
    "frame_flag_flip": (OFF_FRAME + READ_SECRETS + WRITE_OUTSIDE, ()),
    "monkeypatch_isinstance": ('''
import builtins
builtins.isinstance = lambda obj, kind: True
''' + WRITE_OUTSIDE + READ_SECRETS, ()),
    "monkeypatch_realpath": ('''
import os
_here = os.getcwd()
os.path.realpath = lambda path, *a, **k: _here
''' + WRITE_OUTSIDE + READ_SECRETS, ()),
    "open_dir_fd": ('''
import os
root = os.open("/", os.O_RDONLY)
for rel in ("OUTSIDE/MARKER.txt".lstrip("/"), "tmp/MARKER.txt", "WORKDIR/MARKER.txt".lstrip("/")):
    try:
        fd = os.open(rel, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=root)
        os.write(fd, b"pwned")
        print("WROTE", rel)
    except OSError as e:
        print("DENIED", rel, e)
for rel in ("SECRET_PATH".lstrip("/"), "WORKDIR/pyproject.toml".lstrip("/")):
    try:
        print("READ", os.read(os.open(rel, os.O_RDONLY, dir_fd=root), 10000))
    except OSError as e:
        print("DENIED", rel, e)
''', ()),
    "symlink_and_link_outside": (OFF_GC + '''
import os
for i, target in enumerate(("SECRET_PATH", "WORKDIR/pyproject.toml", "/root/.bashrc", "/proc/1/environ")):
    for make in (os.symlink, os.link):
        name = "l%d%s" % (i, make.__name__)
        try:
            make(target, name)
            print("READ", name, open(name).read())
        except OSError as e:
            print("DENIED", name, e)
for i, target in enumerate(("OUTSIDE/MARKER.txt", "/tmp/MARKER.txt", "WORKDIR/MARKER.txt")):
    try:
        os.symlink(target, "w%d" % i)
        with open("w%d" % i, "w") as f:
            f.write("pwned")
    except OSError as e:
        print("DENIED", target, e)
''', ()),
    "read_store_secret": (READ_SECRETS + OFF_GC + READ_SECRETS + '''
import os
for d in ("SECRET_PATH".rsplit("/", 1)[0], "/tmp", "/", "/work", "WORKDIR"):
    try:
        print("LIST", d, os.listdir(d))
    except OSError as e:
        print("DENIED", d, e)
''', ()),
    "read_home": (OFF_GC + '''
import os
for d, dirs, files in os.walk("/root"):
    print("WALK", d, dirs, files)
    for name in files:
        try:
            print("READ", open(os.path.join(d, name), "rb").read(200))
        except OSError as e:
            print("DENIED", name, e)
    if d.count("/") > 4:
        break
''', ()),
    "read_environ": (OFF_GC + '''
import os
print("ENV", dict(os.environ))
for pid in sorted({"1", "self", str(os.getppid()), "PPID"} | {p for p in os.listdir("/proc") if p.isdigit()}):
    for what in ("environ", "cmdline"):
        try:
            print("READ", pid, what, open("/proc/%s/%s" % (pid, what), "rb").read())
        except OSError as e:
            print("DENIED", pid, what, e)
''', ()),
    "fork_bomb": (OFF_GC + '''
import os, time
n = 0
for i in range(500):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        while True:
            try:
                os.fork()
            except OSError:
                pass
    n += 1
print("FORKED", n)
while True:
    time.sleep(0.1)
''', ("wall-clock", "ran longer", "timeout")),
    "memory_bomb": ('''
hog = []
while True:
    hog.append(bytearray(2**24))
''', ("memory",)),
    "endless_loop": ('''
while True:
    pass
''', ("wall-clock", "ran longer", "timeout")),
    "socket_naive": ('''
import socket
socket.create_connection(("127.0.0.1", PORT), timeout=1)
''', ("network",)),
    "socket_local_and_outside": (OFF_GC + '''
import socket
for host, port in (("127.0.0.1", PORT), ("1.1.1.1", 53), ("8.8.8.8", 443)):
    try:
        socket.create_connection((host, port), timeout=1).sendall(b"MARKER")
        print("CONNECTED", host)
    except OSError as e:
        print("REFUSED", host, e)
try:
    print("RESOLVED", socket.getaddrinfo("example.com", 80))
except OSError as e:
    print("NO DNS", e)
''', ()),
    "write_outside_naive": (WRITE_OUTSIDE.replace("except OSError", "except ZeroDivisionError"), ("filesystem",)),
    "write_outside_bypassed": (OFF_GC + WRITE_OUTSIDE, ()),
    "daemon": (OFF_GC + '''
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sh", ["sh", "-c", "while :; do echo pwned > OUTSIDE/MARKER.txt; sleep 0.2; done # MARKER"])
    os._exit(0)
if os.fork() == 0:  # a pure-Python one too (no exec, so no marker in its command line)
    os.setsid()
    if os.fork() == 0:
        while True:
            time.sleep(0.05)
            try:
                open("OUTSIDE/MARKER.txt", "w").write("pwned")
            except OSError:
                pass
    os._exit(0)
time.sleep(0.3)
print("DAEMONS STARTED")
''', ()),
    "attack_fork_server": (OFF_GC + '''
import ctypes, os, signal
libc = ctypes.CDLL(None, use_errno=True)
print("PTRACE", libc.ptrace(16, 1, 0, 0), ctypes.get_errno())
for path in ("/proc/1/mem", "/proc/1/environ"):
    try:
        open(path, "r+b")
        print("OPENED", path)
    except OSError as e:
        print("DENIED", path, e)
for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGSTOP):
    try:
        os.kill(1, sig)
    except OSError as e:
        print("DENIED", sig, e)
print("UNSHARE", libc.unshare(0x10000000), ctypes.get_errno())
''', ()),
}


# ------------------------------------------------------------------------------------------ helpers
def _all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def _with_marker(marker: str) -> list[int]:
    return [p for p in _all_pids() if p != os.getpid() and marker.encode() in _read(f"/proc/{p}/cmdline")]


def _sandbox_leftovers() -> list[int]:
    """Processes of the persistent sandbox other than its fork server (none may outlive a run)."""
    proc = sandbox.server._Zygote._proc
    if proc is None or proc.poll() is not None:
        return []
    parent: dict[int, int] = {}
    for p in _all_pids():
        stat = _read(f"/proc/{p}/stat").decode(errors="replace")
        if stat:
            parent[p] = int(stat.rsplit(")", 1)[1].split()[1])
    inside = set()
    frontier = {proc.pid}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier} - inside
        inside |= frontier
    server = [p for p in inside if _read(f"/proc/{p}/status").decode().split("NSpid:")[-1].split("\n")[0].split()[-1:] == ["1"]]
    return sorted(inside - set(server))


def _wait_gone(check, timeout=5.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := check()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


@pytest.fixture(scope="module")
def host():
    """The parent's secrets and listeners: a fake API key in the environment (set before the sandbox
    starts), a secret file in a 'store' outside any run, a world-writable directory outside, and a TCP
    listener on 127.0.0.1 that records connections."""
    import tempfile

    old = os.environ.get("COEVOLVE_TEST_FAKE_KEY")
    os.environ["COEVOLVE_TEST_FAKE_KEY"] = FAKE_KEY
    sandbox.server._Zygote.reset()  # the next sandbox starts from a parent that holds the key
    top = tempfile.mkdtemp(prefix="coevolve-sandbox-test-")
    os.chmod(top, 0o755)
    store = os.path.join(top, "store")
    os.mkdir(store)
    secret_path = os.path.join(store, "secret.txt")
    with open(secret_path, "w") as f:
        f.write(SECRET)
    outside = os.path.join(top, "outside")
    os.mkdir(outside)
    os.chmod(outside, 0o777)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted: list[bytes] = []

    def accept():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(conn.recv(100) or b"<connected>")
            conn.close()

    threading.Thread(target=accept, daemon=True).start()
    yield {"secret_path": secret_path, "outside": outside, "port": listener.getsockname()[1], "accepted": accepted}
    listener.close()
    import shutil

    shutil.rmtree(top, ignore_errors=True)
    if old is None:
        os.environ.pop("COEVOLVE_TEST_FAKE_KEY", None)
    else:
        os.environ["COEVOLVE_TEST_FAKE_KEY"] = old
    sandbox.server._Zygote.reset()


def _source(snippet: str, host: dict, marker: str) -> str:
    for token, value in (("SECRET_PATH", host["secret_path"]), ("OUTSIDE", host["outside"]), ("MARKER", marker),
                         ("WORKDIR", PROJECT), ("PPID", str(os.getpid())), ("PORT", str(host["port"]))):
        snippet = snippet.replace(token, value)
    return snippet


def _run_case(name: str, api: str, host: dict) -> tuple[sandbox.SandboxResult, str]:
    marker = "coevolve-mark-" + uuid.uuid4().hex[:12]
    snippet, _ = CASES[name]
    code = _source(snippet, host, marker)
    limits = ROOMY if name == "memory_bomb" else QUICK
    if api == "run_python":
        result = sandbox.run_python({"evil.py": code}, "evil.py", limits)
    elif api == "run_graded_tests":  # the code as the package's, called by a grader's test
        package = {"evilpkg/__init__.py": "", "evilpkg/evil.py": "def run():\n" + textwrap.indent(code, "    ") + "\n"}
        tests = {"tests/test_evil.py": "from evilpkg.evil import run\n\n\ndef test_evil():\n    run()\n\n\n"
                                       "def test_after():\n    assert True\n"}
        result = sandbox.run_graded_tests(package, tests, limits)
    else:
        test = "def test_evil():\n" + textwrap.indent(code, "    ") + "\n\n\ndef test_after():\n    assert True\n"
        result = sandbox.run_tests({"tests/test_evil.py": test}, ["tests/test_evil.py"], limits)
    return result, marker


def _assert_contained(result: sandbox.SandboxResult, marker: str, host: dict) -> None:
    seen = result.stdout + result.stderr + result.report(max_chars=10**7)
    assert FAKE_KEY not in seen, "the parent's API key came back"
    assert SECRET not in seen, "the store's secret came back"
    assert "Co-evolve an LLM agent" not in seen, "a project file came back"
    assert "CONNECTED" not in seen and "OPENED" not in seen, seen[-3000:]
    wrote = [line for line in seen.splitlines() if line.startswith("WROTE")]
    assert all(line.split()[1].startswith(("/tmp/", "tmp/")) for line in wrote), wrote  # the sandbox's own /tmp only
    assert not host["accepted"], f"the host listener got a connection: {host['accepted']}"
    time.sleep(0.3)  # a surviving daemon would write again by now
    assert os.listdir(host["outside"]) == [], "a file outside the run was written"
    for path in (f"/tmp/{marker}.txt", os.path.join(PROJECT, f"{marker}.txt"), f"/root/{marker}.txt"):
        assert not os.path.exists(path), f"{path} was written"
    assert not _wait_gone(lambda: _with_marker(marker)), "a process of the run outlived it"
    assert not _wait_gone(_sandbox_leftovers), "a process of the run outlived it (sandbox PID namespace)"


# -------------------------------------------------------------------------------------- hostile cases
@pytest.mark.parametrize("api", ["run_python", "run_tests", "run_graded_tests"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_code_is_contained(name, api, host):
    result, marker = _run_case(name, api, host)
    _assert_contained(result, marker, host)
    reasons = CASES[name][1]
    if reasons:
        assert result.stopped and any(r in result.stopped for r in reasons), (result.stopped, result.report())
    assert "bwrap" in result.isolation
    # the sandbox still works afterwards
    assert sandbox.run_tests({"t/test_ok.py": "def test_ok():\n    assert True\n"}, ["t/test_ok.py"]).all_passed


def test_fork_bomb_is_held_to_the_process_limit_and_killed_at_the_wall_clock(host):
    marker = "coevolve-mark-" + uuid.uuid4().hex[:12]
    limits = sandbox.Limits(wall_s=3.0, per_test_s=60.0, cpu_s=30, processes=8)
    started = time.monotonic()
    result = sandbox.run_python({"bomb.py": _source(CASES["fork_bomb"][0], host, marker)}, "bomb.py", limits)
    forked = [int(line.split()[1]) for line in result.stderr.splitlines() if line.startswith("FORKED")]
    assert forked and forked[0] <= limits.processes, result.stderr[-2000:]
    assert result.timed_out and "wall-clock" in (result.stopped or "")
    assert time.monotonic() - started < limits.wall_s + 3
    _assert_contained(result, marker, host)


def test_sandbox_shows_nothing_of_the_host(host):
    code = OFF_GC + '''
import os
print("UID", os.getuid(), os.getgid())
print("ROOT", sorted(os.listdir("/")))
print("PROCS", sorted(p for p in os.listdir("/proc") if p.isdigit()))
print("HOME", os.listdir("/root") if os.path.isdir("/root") else [])
'''
    r = sandbox.run_python({"a.py": code}, "a.py")
    lines = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in r.stderr.splitlines() if " " in line}
    assert lines["UID"] == "65534 65534"
    assert set(eval(lines["ROOT"])) <= {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "root", "sandbox", "sbin", "tmp", "usr"}
    assert len(eval(lines["PROCS"])) <= 2  # the fork server and the run
    assert eval(lines["HOME"]) in ([], [".pyenv"])


# ------------------------------------------------------------------------- isolation between runs
def test_a_run_leaves_nothing_for_the_next(host):
    token = "coevolve-prev-run-" + uuid.uuid4().hex
    first = OFF_GC + f'''
import ctypes, os, time
TOKEN = {token!r}
for path in ("/tmp/left.txt", "/sandbox/left.txt", "../left.txt", "/dev/shm/left.txt", "/left.txt"):
    try:
        open(path, "w").write(TOKEN)
    except OSError as e:
        print("DENIED", path, e)
libc = ctypes.CDLL(None, use_errno=True)
print("SHM", libc.shmget(0x5eed, 4096, 0o1666))
print("MQ", libc.mq_open(b"/left", 0o102, 0o600, None) if hasattr(libc, "mq_open") else "n/a", ctypes.get_errno())
if os.fork() == 0:
    os.setsid()
    while True:
        time.sleep(0.05)
'''
    second = OFF_GC + f'''
import gc, os
TOKEN = "".join([{token[:10]!r}, {token[10:]!r}])
found = []
for path in ("/tmp/left.txt", "/sandbox/left.txt", "../left.txt", "/dev/shm/left.txt", "/left.txt", "/sandbox"):
    if os.path.isfile(path):
        found.append(path)
found += [n for n in os.listdir("/sandbox") if n != "run"]
found += [l for l in open("/proc/sysvipc/shm").read().splitlines()[1:]]
found += [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, os.getpid())]
for obj in gc.get_objects():  # the previous run's files in memory this process was forked from?
    values = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()
    for v in values:
        if isinstance(v, (str, bytes)) and v is not TOKEN and (TOKEN in v if isinstance(v, str) else TOKEN.encode() in v):
            found.append("memory")
print("FOUND", found)
'''
    for mode in ("persistent", "per-run"):
        os.environ.pop(sandbox.PER_RUN_ENV, None)
        if mode == "per-run":
            os.environ[sandbox.PER_RUN_ENV] = "1"
        try:
            sandbox.run_python({"a.py": first, "data.txt": token}, "a.py")
            r = sandbox.run_python({"b.py": second}, "b.py")
        finally:
            os.environ.pop(sandbox.PER_RUN_ENV, None)
        assert "FOUND []" in r.stderr, (mode, r.stderr[-2000:])


def test_the_fork_server_survives_and_is_reused(host):
    sandbox.run_tests({"t/test_ok.py": "def test_ok():\n    pass\n"}, ["t/test_ok.py"])
    before = sandbox.server._Zygote._proc
    result, _ = _run_case("attack_fork_server", "run_python", host)
    assert "PTRACE -1" in result.stderr and "UNSHARE -1" in result.stderr
    assert sandbox.server._Zygote._proc is before and before is not None and before.poll() is None
    assert sandbox.run_tests({"t/test_ok.py": "def test_ok():\n    pass\n"}, ["t/test_ok.py"]).all_passed


@pytest.mark.parametrize("name", ["fork_exec", "daemon", "read_environ", "write_outside_bypassed", "socket_local_and_outside"])
def test_one_sandbox_per_run_mode_contains_too(name, host, monkeypatch):
    monkeypatch.setenv(sandbox.PER_RUN_ENV, "1")
    result, marker = _run_case(name, "run_python", host)
    _assert_contained(result, marker, host)
    assert "bwrap" in result.isolation


# ---------------------------------------------------------------------------- no bwrap, no run
def test_without_bwrap_model_code_is_refused_unless_weak_mode_is_asked_for(monkeypatch):
    monkeypatch.setattr(sandbox.box, "_box_plan", lambda: "bwrap is not installed (test)")
    monkeypatch.delenv(sandbox.WEAK_ENV, raising=False)
    files = {"t/test_ok.py": "def test_ok():\n    assert True\n"}
    with pytest.raises(sandbox.SandboxError, match="bwrap is not installed"):
        sandbox.run_tests(files, ["t/test_ok.py"])
    with pytest.raises(sandbox.SandboxError, match=sandbox.WEAK_ENV):
        sandbox.run_python({"a.py": "print(1)\n"}, "a.py")
    assert sandbox.isolation() == ()
    monkeypatch.setenv(sandbox.WEAK_ENV, "1")
    r = sandbox.run_tests(files, ["t/test_ok.py"])
    assert r.all_passed and r.isolation[0] == "weak"
    r = sandbox.run_tests({"t/test_w.py": "def test_w():\n    open('/tmp/coevolve_weak_escape.txt', 'w')\n"}, ["t/test_w.py"])
    assert r.stopped and "filesystem" in r.stopped and not os.path.exists("/tmp/coevolve_weak_escape.txt")
    r = sandbox.run_graded_tests(GRADED_PKG, GRADED_TESTS)  # runs, though its verdicts are not protected here
    assert [t.outcome for t in r.tests].count("passed") == 4 and r.isolation[0] == "weak"
    sandbox.server._Zygote.reset()


def test_a_sandbox_that_cannot_start_raises(monkeypatch):
    plan = sandbox.box._box_plan()
    assert not isinstance(plan, str), plan
    broken = sandbox.box._Plan(plan.kind, ("/bin/false",), plan.work, plan.user, plan.layers)
    monkeypatch.setattr(sandbox.box, "_box_plan", lambda: broken)
    monkeypatch.delenv(sandbox.WEAK_ENV, raising=False)
    sandbox.server._Zygote.reset()
    with pytest.raises(sandbox.SandboxError, match="cannot start"):
        sandbox.run_python({"a.py": "print(1)\n"}, "a.py")
    sandbox.server._Zygote.reset()
    sandbox.server._Zygote.failures = 0


# ------------------------------------------------------------------------------------------ benign
def test_benign_tests_pass_and_fail_as_written():
    files = {
        "pkg/__init__.py": "",
        "pkg/calc.py": "def add(a, b):\n    return a + b\n",
        "tests/test_ok.py": "from pkg.calc import add\nimport pytest\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
                            "def test_raises():\n    with pytest.raises(TypeError):\n        add(1, 'x')\n\n\n"
                            "def test_approx():\n    assert add(0.1, 0.2) == pytest.approx(0.3)\n",
        "tests/test_bad.py": "from pkg.calc import add\n\n\ndef test_wrong():\n    assert add(2, 2) == 5\n",
    }
    ok = sandbox.run_tests(files, ["tests/test_ok.py"])
    assert ok.all_passed and ok.passed == 3 and ok.stopped is None, ok.report()
    bad = sandbox.run_tests(files, ["tests/test_ok.py", "tests/test_bad.py"])
    assert not bad.all_passed and bad.passed == 3 and bad.stopped is None
    assert [t.outcome for t in bad.tests if t.id.startswith("tests/test_bad.py")] == ["failed"]
    assert "tests/test_bad.py::test_wrong FAILED" in bad.report() and "AssertionError" in bad.report()
    script = sandbox.run_python({"main.py": "import json, tempfile, os\nprint(json.dumps({'ok': True}))\n"
                                 "with tempfile.TemporaryFile() as f:\n    f.write(b'x')\n"}, "main.py")
    assert script.stopped is None and script.tests[0].outcome == "passed" and '{"ok": true}' in script.stderr


def test_limits_memory_and_wall_clock():
    files = {"t/test_m.py": "def test_memory():\n    hog = []\n    while True:\n        hog.append(bytearray(2**24))\n",
             "loop.py": "while True:\n    pass\n"}
    r = sandbox.run_tests(files, ["t/test_m.py"], sandbox.Limits(memory_mb=128, per_test_s=20, wall_s=30))
    assert r.stopped and "memory" in r.stopped and r.tests[0].outcome == "error", r.report()
    r = sandbox.run_python(files, "loop.py", sandbox.Limits(per_test_s=60, wall_s=1.5))
    assert r.timed_out and "wall-clock" in (r.stopped or "") and r.duration_s < 3
    assert {"rlimits", "audit-hook", "temp-dir", "wall-clock", "bwrap"} <= set(r.isolation)


def test_runs_share_nothing_and_the_server_restarts_when_it_dies():
    files = {"t/test_a.py": "import os\n\n\ndef test_a():\n    open('mark.txt', 'w').write('1')\n    assert os.path.exists('mark.txt')\n",
             "t/test_b.py": "import os\n\n\ndef test_b():\n    assert not os.path.exists('mark.txt')\n"}
    assert sandbox.run_tests(files, ["t/test_a.py"]).all_passed
    assert sandbox.run_tests(files, ["t/test_b.py"]).all_passed
    proc = sandbox.server._Zygote._proc
    assert proc is not None
    proc.kill()
    proc.wait()
    assert sandbox.run_tests(files, ["t/test_b.py"]).all_passed
    assert sandbox.server._Zygote._proc is not proc


def test_printing_fake_results_does_not_forge_a_pass():
    files = {"t/test_f.py": f"def test_f():\n    print({sandbox.MARK!r} + repr(('t/test_f.py::test_f', 'passed', '')))\n    assert False\n"}
    assert [t.outcome for t in sandbox.run_tests(files, ["t/test_f.py"]).tests] == ["failed"]


def test_bad_paths_are_refused():
    with pytest.raises(sandbox.SandboxError):
        sandbox.run_python({"../x.py": "print(1)\n"}, "../x.py")
    with pytest.raises(sandbox.SandboxError):
        sandbox.run_tests({"/abs.py": ""}, ["/abs.py"])


def test_a_parse_that_lost_the_ast_race_is_repeated_and_other_errors_are_not(monkeypatch):
    """CPython 3.11.7's AST constructor raises a spurious SystemError when two threads parse at once."""
    import ast

    from coevolve.sandbox import parse_python

    real, calls = ast.parse, []

    def racing(source, mode="exec"):
        calls.append(source)
        if len(calls) < 3:
            raise SystemError("AST constructor recursion depth mismatch (before=30, after=33)")
        return real(source, mode=mode)

    monkeypatch.setattr(ast, "parse", racing)
    assert isinstance(parse_python("x = 1"), ast.Module) and len(calls) == 3
    monkeypatch.setattr(ast, "parse", lambda *a, **k: (_ for _ in ()).throw(SystemError("something else")))
    with pytest.raises(SystemError, match="something else"):
        parse_python("x = 1")


# ------------------------------------------------------------------------- resource limits (issue 24.5)
def test_many_files_meet_the_inode_limit_and_the_call_returns_inside_the_wall_limit():
    """1.3 M empty files pinned 1.34 GB of kernel memory and the call took 23 s against a 15 s limit:
    the run is stopped at the inode limit, and removing what it made fits in the slack."""
    files = {"t/test_files.py": "import os\n\n\ndef test_files():\n    i = 0\n    while True:\n"
                                "        os.close(os.open('f%d' % i, os.O_CREAT | os.O_WRONLY))\n        i += 1\n",
             "t/test_dirs.py": "import os\n\n\ndef test_dirs():\n    i = 0\n    while True:\n        os.mkdir('d%d' % i)\n"
                               "        i += 1\n"}
    limits = sandbox.Limits(wall_s=4.0, per_test_s=60.0, cpu_s=30, inodes=5_000)
    for path in sorted(files):
        started = time.monotonic()
        r = sandbox.run_tests(files, [path], limits)
        took = time.monotonic() - started
        assert r.stopped and "inode limit" in r.stopped and "5000 files" in r.stopped, r.report()
        assert not r.timed_out and took < limits.wall_s + 1.5, took
    assert sandbox.run_tests(files | {"t/test_ok.py": "def test_ok():\n    pass\n"}, ["t/test_ok.py"]).all_passed


def test_a_full_disk_is_named_and_the_output_so_far_is_kept():
    """When the tmpfs filled, every result was lost behind "the process exited early"."""
    files = {"t/test_disk.py": (
        "def test_fill():\n    print('before the disk filled')\n    chunk = b'x' * (1 << 20)\n    i = 0\n"
        "    while True:\n        with open('big%d' % i, 'wb') as f:\n            f.write(chunk)\n        i += 1\n\n\n"
        "def test_after():\n    print('after the disk filled')\n"
    )}
    r = sandbox.run_tests(files, ["t/test_disk.py"], sandbox.Limits(wall_s=20.0, per_test_s=15.0, cpu_s=20))
    assert [(t.id, t.outcome) for t in r.tests] == [("t/test_disk.py::test_fill", "failed"), ("t/test_disk.py::test_after", "passed")]
    assert "No space left on device" in r.tests[0].message
    assert r.completed and r.stopped and "ENOSPC" in r.stopped and "exited early" not in r.stopped
    assert "before the disk filled" in r.stderr and "after the disk filled" in r.stderr
    assert sandbox.run_tests(files | {"t/test_ok.py": "def test_ok():\n    pass\n"}, ["t/test_ok.py"]).all_passed


def test_what_a_run_writes_reaches_a_result_only_in_bounded_pieces():
    flood = ("def test_flood():\n    for i in range(2000):\n        print('\\n[sandbox-violation] x' * 3, i, 'y' * 100)\n"
             "    raise ValueError('z' * 10**6)\n")
    r = sandbox.run_tests({"t/test_flood.py": flood}, ["t/test_flood.py"], sandbox.Limits(wall_s=20.0, per_test_s=15.0))
    assert r.stopped and len(r.stopped) <= sandbox.MAX_STOPPED_CHARS + 60
    assert r.stopped.endswith("more violation lines")
    assert len(r.tests[0].message) <= sandbox.MAX_MESSAGE_CHARS + 60 and "characters cut" in r.tests[0].message
    assert len(r.report()) <= 6000 + 60


# ------------------------------------------------------------------------- graded runs (issue 24.1)
GRADED_PKG = {
    "calc/__init__.py": "from calc.ops import add\n",
    "calc/ops.py": (
        "import datetime\n\n\ndef add(a, b):\n    return a + b\n\n\ndef when():\n"
        "    return datetime.datetime(2020, 1, 2, 3, 4, tzinfo=datetime.timezone.utc)\n\n\n"
        "def check(s):\n    if not s.strip():\n        raise ValueError('empty')\n    return s.strip()\n\n\n"
        "class Box:\n    def __init__(self, x):\n        self.x = x\n\n    def scaled(self, k):\n        return {'x': self.x * k}\n"
    ),
}
GRADED_TESTS = {
    "tests/test_calc.py": (
        "import datetime\n\nimport pytest\nimport calc\nfrom calc.ops import Box, add, check, when\n\n\n"
        "def test_add():\n    assert add(2, 3) == 5 and add('a', 'b') == 'ab' and add([1], (2,)) if False else add(2, 3) == 5\n\n\n"
        "def test_raises():\n    with pytest.raises(ValueError, match='empty'):\n        check('  ')\n    assert check(' x ') == 'x'\n\n\n"
        "def test_values():\n    assert when() == datetime.datetime(2020, 1, 2, 3, 4, tzinfo=datetime.timezone.utc)\n"
        "    assert Box(3).scaled(2) == {'x': 6}\n    assert add(0.1, 0.2) == pytest.approx(0.3)\n\n\n"
        "def test_identity():\n    assert calc.add is add and calc.ops.Box is Box and Box(1) is not Box(1)\n\n\n"
        "def test_wrong():\n    assert add(2, 2) == 5\n\n\n"
        "async def test_not_a_test():\n    pass\n\n\nclass test_neither:\n    pass\n"
    ),
}


def test_a_graded_run_reports_exactly_the_tests_the_grader_wrote():
    r = sandbox.run_graded_tests(GRADED_PKG, GRADED_TESTS)
    assert "bwrap" in r.isolation
    assert [t.id for t in r.tests] == sandbox.expected_test_ids(GRADED_TESTS)
    assert {t.id.split("::")[1]: t.outcome for t in r.tests} == {
        "test_add": "passed", "test_raises": "passed", "test_values": "passed", "test_identity": "passed", "test_wrong": "failed"}
    assert r.stopped is None and not r.all_passed
    ok = {p: c.replace("def test_wrong():\n    assert add(2, 2) == 5\n", "") for p, c in GRADED_TESTS.items()}
    assert sandbox.run_graded_tests(GRADED_PKG, ok).all_passed
    with pytest.raises(sandbox.SandboxError, match="cannot route"):
        sandbox.run_graded_tests({"json/__init__.py": ""}, GRADED_TESTS)


def test_a_graded_test_compares_values_not_the_packages_objects():
    """An object that says it equals anything is a reference in the runner: equal only to itself."""
    liar = {"calc/__init__.py": "", "calc/ops.py": (
        "class Anything:\n    def __eq__(self, other):\n        return True\n\n    def __bool__(self):\n        return True\n\n\n"
        "def add(a, b):\n    return Anything()\n")}
    tests = {"tests/test_c.py": "from calc.ops import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
                                "def test_not_equal():\n    assert add(2, 3) != 5\n"}
    r = sandbox.run_graded_tests(liar, tests)
    assert [t.outcome for t in r.tests] == ["failed", "passed"], r.report()


def test_a_graded_test_sees_subclasses_and_singletons_as_python_would():
    """A subclass of a builtin type comes back as its base type's value, a singleton as the same reference."""
    pkg = {"calc/__init__.py": "", "calc/ops.py": (
        "import collections, enum\n\n\nclass Color(enum.Enum):\n    RED = 1\n\n\nclass Level(enum.IntEnum):\n    HIGH = 3\n\n\n"
        "P = collections.namedtuple('P', 'x y')\n\n\ndef f():\n    return collections.OrderedDict(a=1)\n\n\n"
        "def g():\n    return Level.HIGH\n\n\ndef h():\n    return P(1, 2)\n\n\ndef k():\n    return Color.RED\n\n\n"
        "def c():\n    return collections.Counter('aab')\n")}
    tests = {"tests/test_c.py": (
        "from calc.ops import Color, c, f, g, h, k\n\n\ndef test_f():\n    assert f() == {'a': 1}\n\n\n"
        "def test_g():\n    assert g() == 3\n\n\ndef test_h():\n    assert h() == (1, 2)\n\n\n"
        "def test_k():\n    assert k() is Color.RED and k() == Color.RED\n\n\ndef test_c():\n    assert c() == {'a': 2, 'b': 1}\n")}
    assert sandbox.run_graded_tests(pkg, tests).all_passed


def test_a_test_that_times_out_or_ends_the_package_costs_only_that_test():
    pkg = {"calc/__init__.py": "", "calc/ops.py": (
        "import os\n\nSTATE = []\n\n\ndef spin():\n    while True:\n        pass\n\n\ndef die():\n    os._exit(3)\n\n\n"
        "def push(x):\n    STATE.append(x)\n    return len(STATE)\n")}
    tests = {"tests/test_c.py": (
        "from calc.ops import die, push, spin\n\n\ndef test_1():\n    assert push(1) == 1\n\n\ndef test_2_spin():\n    spin()\n\n\n"
        "def test_3():\n    assert push(1) == 1  # a fresh session: the state after import\n\n\ndef test_4_die():\n    die()\n\n\n"
        "def test_5():\n    assert push(2) == 1\n\n\ndef test_6():\n    assert push(3) == 2\n")}
    r = sandbox.run_graded_tests(pkg, tests, sandbox.Limits(wall_s=10.0, per_test_s=1.0))
    got = {t.id.split("::")[1]: (t.outcome, t.message) for t in r.tests}
    assert [got[k][0] for k in sorted(got)] == ["passed", "error", "passed", "error", "passed", "passed"], r.report()
    assert "ran longer than 1.0 s" in got["test_2_spin"][1] and "exit status 3" in got["test_4_die"][1]
    assert r.stopped and "timeout" in r.stopped


def test_a_graded_run_as_a_whole_keeps_the_wall_limit():
    """Every test under the per-test limit, together over the wall limit: the run is stopped at the wall
    limit, the tests that did not run are errors, and the call returns a moment later."""
    pkg = {"slow/__init__.py": "", "slow/nap.py": "import time\n\n\ndef nap():\n    time.sleep(0.9)\n    return 1\n"}
    tests = {"tests/test_nap.py": "from slow.nap import nap\n\n" + "".join(
        f"\ndef test_{i}():\n    assert nap() == 1\n\n" for i in range(6))}
    limits = sandbox.Limits(wall_s=3.0, per_test_s=2.0)
    started = time.monotonic()
    r = sandbox.run_graded_tests(pkg, tests, limits)
    assert time.monotonic() - started < limits.wall_s + 1.5
    assert r.timed_out and "wall-clock" in (r.stopped or "") and not r.all_passed
    outcomes = [t.outcome for t in r.tests]
    assert len(outcomes) == 6 and 1 <= outcomes.count("passed") <= 3 and outcomes[-1] == "error", r.report()


def test_the_package_cannot_reach_the_tests_nor_the_record_channel(host):
    """The package's process holds no copy of the tests (no file, no memory) and cannot open the
    runner's record channel, even with the audit hook off."""
    token = "coevolve-hidden-test-" + uuid.uuid4().hex
    pkg = {"spy/__init__.py": "", "spy/look.py": OFF_GC + textwrap.dedent('''
        import gc, os
        def find(prefix):
            found = []
            for top in ("/sandbox", "/tmp", "/", os.getcwd()):
                for d, _, names in os.walk(top) if top != "/" else [("/", [], os.listdir("/"))]:
                    for n in names:
                        try:
                            if prefix in open(os.path.join(d, n), errors="replace").read():
                                found.append(os.path.join(d, n))
                        except OSError:
                            pass
            for o in gc.get_objects():
                for v in (o.values() if isinstance(o, dict) else o if isinstance(o, (list, tuple)) else ()):
                    if isinstance(v, str) and prefix in v and v != prefix:
                        found.append("memory: " + v[:80])
            return found
        def channel():
            opened = []
            for pid in os.listdir("/proc"):
                if pid.isdigit() and int(pid) != os.getpid():
                    for fd in range(0, 16):
                        try:
                            os.close(os.open("/proc/%s/fd/%d" % (pid, fd), os.O_WRONLY))
                            opened.append("%s/%d" % (pid, fd))
                        except OSError:
                            pass
            return opened
    ''')}
    tests = {"tests/test_spy.py": (
        f"from spy.look import channel, find\n\nTOKEN = {token!r}\n\n\n"
        "def test_no_copy_of_the_tests():\n    found = find(TOKEN[:24])\n    assert found == [], found\n\n\n"
        "def test_no_channel():\n    opened = channel()\n    assert opened == [], opened\n"
    )}
    r = sandbox.run_graded_tests(pkg, tests, sandbox.Limits(wall_s=20.0, per_test_s=15.0, cpu_s=20))
    assert [t.outcome for t in r.tests] == ["passed", "passed"], r.report()
