"""The runners inside the sandbox: the classic runner (`_child`: tests and scripts, the code under test in
the same process), and the graded runner (`_graded`, the trusted side) with the package's process
(`_package_server`, the untrusted side) it talks to. Run records go to fd 3 (RES), never to stdout.

Runs only inside the sandbox, never on the host: `server.py` reads this file's text and hands it, followed
by `forkserver.py`'s, to the box's interpreter as one `python -I -S -B -c` program (so the process inside
never imports the project package). Standard library only; the guard below refuses an import.
"""

import builtins
import datetime as _dt
import gc
import itertools
import json as _json
import os
import re as _re
import resource
import signal
import sys

if __name__ != "__main__":
    raise ImportError(f"{__name__} runs only inside the sandbox, as the text of its program (see server.py)")

RES = 3  # the run's record channel (a memfd of the fork server's)
_FRAME = 8 << 20  # largest message between the graded runner and the package's process
_MESSAGE = 2000  # longest message the runners record for one test


def _settings(argv):
    """((MODE, ROOT, BASE, MARK, VIOL, MEM, PER_TEST), the paths) from a run's argv; sets its rlimits."""
    (MODE, ROOT, BASE, MARK, VIOL, NPROC, MEM, CPU, FSIZE, NOFILE, PER_TEST), rest = argv[:11], argv[11:]
    limits = {resource.RLIMIT_AS: MEM, resource.RLIMIT_CPU: CPU, resource.RLIMIT_FSIZE: FSIZE,
              resource.RLIMIT_CORE: 0, resource.RLIMIT_NOFILE: NOFILE,
              resource.RLIMIT_MSGQUEUE: 0}  # no POSIX message queues (they would outlive the run)
    if NPROC != "-":
        limits[resource.RLIMIT_NPROC] = NPROC
    for which, value in limits.items():
        resource.setrlimit(which, (int(value), int(value)))
    return (MODE, os.path.realpath(ROOT), os.path.realpath(BASE), MARK, VIOL, int(MEM), float(PER_TEST)), rest


def _quiet(fn, *args):
    """fn(*args), an OSError ignored (a write to a closed stderr, a kill of a process already gone)."""
    try:
        fn(*args)
    except OSError:
        pass


def _inside(full, root):
    return full == root or full.startswith(root + os.sep)


def _shown_in(ROOT):
    """`shown` for `_describe`: a file under ROOT by its path relative to it, any other None."""
    def shown(name):
        if name.startswith("<"):
            return None
        full = os.path.realpath(name)
        return os.path.relpath(full, ROOT) if _inside(full, ROOT) else None
    return shown


def _audit_hook(ROOT, BASE, VIOL):
    """The in-process second layer: (hook, busy, mark). busy[0] = True lets the runner's own calls through."""
    WRITE = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
    _busy = [False]

    def _mark(kind, what):
        _quiet(os.write, 2, ("\n" + VIOL + kind + ": " + what + "\n").encode())

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
        if self.match is not None and not _re.search(self.match, str(ev)):
            raise AssertionError(f"pattern {self.match!r} not found in {str(ev)!r}")
        self.value = ev
        return True


class _Approx:
    def __init__(self, expected, rel=1e-6, abs=1e-12):
        self.expected, self.rel, self.abs = expected, rel, abs
    def __eq__(self, other):
        return abs(other - self.expected) <= max(self.rel * abs(self.expected), self.abs)
    def __repr__(self):
        return f"approx({self.expected!r})"


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
            where.append(f"  at {shown(name)}:{tb.tb_lineno:d} in {tb.tb_frame.f_code.co_name}")
        tb = tb.tb_next
    where += [str(w) for w in getattr(exc, "_sbx_where", ())]
    try:
        text = str(exc)
    except BaseException:  # noqa: BLE001 - str() of the run's exception may raise anything
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
            return "error", f"stopped: ran longer than {PER_TEST} s (endless loop?)"
        except MemoryError:
            _quiet(os.write, 2, memline)
            return "error", "stopped: memory limit exceeded"
        except _Gone as e:
            return "error", _cut(str(e))
        except BaseException as e:  # noqa: BLE001 - whatever the test raised is its failure
            return "failed", _describe(e, shown)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    return _run


def _emit(MARK, *rec):
    os.write(RES, (MARK + repr(rec) + "\n").encode())


def _child(argv):
    """The classic runner: the test files (or the script) and the code under test in this one process.
    Its records are the code's own to write: good for the agent's run_tests, never for a grader."""
    (MODE, ROOT, BASE, MARK, VIOL, MEM, PER_TEST), ARGS = _settings(argv)
    os.environ["HOME"] = ROOT
    os.environ["TMPDIR"] = os.path.join(ROOT, "tmp")
    hook, _, mark = _audit_hook(ROOT, BASE, VIOL)
    signal.signal(signal.SIGALRM, _alarm)
    sys.modules["pytest"] = _pytest_module()
    sys.path.insert(0, ROOT)
    os.chdir(ROOT)
    sys.stdout = sys.stderr
    _run = _runner(PER_TEST, MEM, VIOL, mark, _shown_in(ROOT))

    def _load(path):
        name = path[:-3].replace("/", ".")
        full = os.path.join(ROOT, path)
        mod = type(sys)(name)
        mod.__file__ = full
        sys.modules[name] = mod
        with open(full, encoding="utf-8") as f:
            code = compile(f.read(), full, "exec")
        exec(code, mod.__dict__)  # noqa: S102 - running the tree's code is this runner's job
        return mod

    sys.addaudithook(hook)

    if MODE == "script":
        outcome, message = _run(lambda: _load(ARGS[0]), ARGS[0])
        _emit(MARK, ARGS[0], outcome, message)
    else:
        for path in ARGS:
            box = []
            outcome, message = _run(lambda: box.append(_load(path)), path)  # noqa: B023 - called in this iteration
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
    return _dt.UTC if off == 0 else _dt.timezone(_dt.timedelta(microseconds=off))


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


_IMPORT_LINE = _re.compile(r"^(?:from[ \t]+([\w.]+)[ \t]+)?import[ \t]+([\w., \t]+)$", _re.MULTILINE)  # compiled once, in the server


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
                raise ValueError(f"a message longer than {_FRAME:d} bytes")
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


def _parsed(line):
    """A frame read back: the dict, or None for a line that is not one."""
    try:
        frame = _json.loads(line)
    except (ValueError, RecursionError):
        return None
    return frame if type(frame) is dict else None


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
        except BaseException:  # noqa: BLE001 - the package's type may raise anything
            kind = "object"
        return {"$": "ref", "id": id(v), "kind": kind}

    def deref(x):
        k = x.get("id") if type(x) is dict else None
        if type(k) is not int or k not in objs:
            raise LookupError("no such object of the package")
        return objs[k]

    shown = _shown_in(ROOT)

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
                raise ValueError(f"unknown request {op!r}")
            return {"ok": _enc(value, ref), **({"attrs": attrs} if attrs else {})}
        except MemoryError:
            _quiet(os.write, 2, memline)
            return {"raise": {"types": ["MemoryError"], "msg": "", "where": []}}
        except BaseException as e:  # noqa: BLE001 - whatever the package raised is the answer
            try:
                types = [str(c.__name__) for c in type(e).__mro__][:32]
                msg = _describe(e, shown).split("\n")
                return {"raise": {"types": types, "msg": msg[0].partition(": ")[2], "where": msg[1:]}}
            except BaseException:  # noqa: BLE001 - the package's exception may raise anything
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
                _write(wfd, _frame({"seq": seq, "fail": f"the package's process could not fork a session: {e}"}))
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
            out = _frame({"seq": seq, "fail": f"the package returned a value of more than {_FRAME:d} bytes"})
        try:
            _write(wfd, out)
        except OSError:
            os._exit(1)


# ------------------------------------------------------------------------------- the graded runner
class _Ref:
    """A reference to an object of the package's process: attribute access and calls are requests to it;
    nothing else (comparison, truth, hashing) is forwarded, so a reference equals only itself."""
    __slots__ = ("__weakref__", "_sbx_key", "_sbx_kind", "_sbx_link", "_sbx_next")

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
        return f"<{self._sbx_kind} of the package>"


class _Link:
    """The runner's side of the talk with the package's process (`_package_server`): requests and their
    answers, references, and the package's test sessions (forks of that process, one at a time)."""

    def __init__(self, wfd, rfd, spid, packages):
        self.wfd, self.lines, self.spid, self.packages = wfd, _Lines(rfd), spid, frozenset(packages)
        self.gen, self.session, self.dead, self.testing = 0, None, None, False
        self.refs, self.ahead, self.seq = {}, {}, itertools.count(1)
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
        msg = {"seq": next(self.seq), "op": "imports", "items": items}
        self._send(msg)
        return msg

    def prefetched(self, msg):
        if msg is None:
            return
        each = self._answer(msg).get("each")
        if type(each) is list and len(each) == len(msg["items"]):
            for (name, fromlist), one in zip(msg["items"], each):
                self.ahead.setdefault((name, tuple(fromlist)), []).append(one)

    def request(self, op, ref, **fields):
        if self.testing and self.session is None:
            self._session()
        msg = {"seq": next(self.seq), "op": op}
        if ref is not None:
            msg["ref"] = self._key(ref)
        if "name" in fields:
            msg["name"] = str(fields["name"])
        if "fromlist" in fields:
            msg["fromlist"] = fields["fromlist"]
        if op == "call":
            msg["args"] = [_enc(a, self._out) for a in fields["args"]]
            msg["kwargs"] = [[str(k), _enc(v, self._out)] for k, v in fields["kwargs"].items()]
        self._send(msg)
        return self._value(self._answer(msg))

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
            except Exception as e:  # noqa: BLE001 - any answer the runner cannot read
                raise _Gone(f"the package's answer is not a value the tests can read ({type(e).__name__})") from None
        if "raise" in answer:
            raise self._exception(answer["raise"])
        raise _Gone(str(answer.get("fail"))[:_MESSAGE])

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
                raise _Gone(f"the package sent {e}") from None
            if line is None:
                raise _Gone(self._why_dead())
            frame = _parsed(line)
            if frame is None:
                continue
            if "ended" in frame and self.session is not None:
                self._ended(frame["ended"])
                raise _Gone(f"the package's process ended during the test ({self.ended})")
            if frame.get("seq") == msg["seq"]:
                return frame

    def between_tests(self):
        """Before a test: notice a session that ended since the last answer (it is replaced on demand)."""
        while self.session is not None and self.lines.ready():
            line = self.lines.line()
            if line is None:
                break
            frame = _parsed(line)
            if frame is not None and "ended" in frame:
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
            self.ended = f"killed by signal {-code:d}" if code < 0 else f"exit status {code:d}"
        except (TypeError, ValueError):
            self.ended = "unknown status"

    def _why_dead(self):
        if self.dead is None:
            try:
                _, status = os.waitpid(self.spid, 0)
                code = os.waitstatus_to_exitcode(status)
                how = f"killed by signal {-code:d}" if code < 0 else f"exit status {code:d}"
            except (ChildProcessError, OSError, ValueError):
                how = "unknown status"
            self.dead = f"the package's process ended ({how}); no test can run after that"
        self.session = None
        return self.dead

    def stop(self):
        """After a timeout: end the session (or, while importing, the package's process)."""
        import select
        pid = self.session if self.testing else self.spid
        if pid is None:
            return
        _quiet(os.kill, pid, signal.SIGKILL)
        if not self.testing:
            self._why_dead()
            self.dead = "the package's process was stopped: it ran longer than the test time limit at import"
            return
        while self.session is not None:
            if not (b"\n" in self.lines.buf or select.select([self.lines.fd], [], [], 2.0)[0]):
                self.dead = "the package's process stopped answering"
                _quiet(os.kill, self.spid, signal.SIGKILL)
                self.session = None
                return
            line = self.lines.line()
            if line is None:
                self._why_dead()
                return
            frame = _parsed(line)
            if frame is not None and "ended" in frame:
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
        raise TypeError(f"a {type(v).__name__} cannot be passed to the package")

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
                except Exception:  # noqa: BLE001, S112 - a builtin exception class that refuses the message
                    continue
        if exc is None:
            first = types[0] if type(types) is list and types and type(types[0]) is str else "exception"
            exc = _Gone(f"the package raised {first[:80]}{(': ' + msg) if msg else ''}")
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
    (_, ROOT, BASE, MARK, VIOL, MEM, PER_TEST), PATHS = _settings(argv)
    down_r, down_w = os.pipe()
    up_r, up_w = os.pipe()
    gc.freeze()  # a fork's memory is the parent's until written: keep collections off it
    spid = os.fork()
    if spid == 0:
        try:
            for fd in (down_w, up_r, RES):
                os.close(fd)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)  # the rest of the request (the tests) stays unread here
            os.close(null)
            _package_server(down_r, up_w, ROOT, BASE, VIOL, MEM)
        except BaseException:  # noqa: BLE001, S110 - the package's process ends with code 70 whatever happened
            pass
        os._exit(70)
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
            exec(code, mod.__dict__)  # noqa: S102 - running the grader's tests is this runner's job

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
