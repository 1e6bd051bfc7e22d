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
3. An audit hook is a second layer inside (refuses sockets, process creation, ctypes and writes
   outside the run's directory, and reports them as violations, which is what the reports name); the
   namespaces above, not the hook, are what keep the host safe.

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

The package's modules: `runner` (the three calls), `results` (Limits, SandboxResult, TestResult,
SandboxError), `box` (the bwrap command line, or the weak mode's, and `isolation`), `server` (the host's
side of the fork server), `syntax` (`parse_python`); and the two files that run only inside the sandbox,
as one `python -c` program read from their text, never imported: `child.py` (the runners) and
`forkserver.py` (the fork server). Both use the standard library only.
"""

from coevolve.sandbox.box import WEAK_ENV, isolation
from coevolve.sandbox.results import (
    MAX_MESSAGE_CHARS,
    MAX_STOPPED_CHARS,
    Limits,
    SandboxError,
    SandboxResult,
    TestResult,
)
from coevolve.sandbox.runner import (
    MARK,
    expected_test_ids,
    run_graded_tests,
    run_python,
    run_tests,
)
from coevolve.sandbox.server import PER_RUN_ENV
from coevolve.sandbox.syntax import parse_python

__all__ = [
    "MARK",
    "MAX_MESSAGE_CHARS",
    "MAX_STOPPED_CHARS",
    "PER_RUN_ENV",
    "WEAK_ENV",
    "Limits",
    "SandboxError",
    "SandboxResult",
    "TestResult",
    "expected_test_ids",
    "isolation",
    "parse_python",
    "run_graded_tests",
    "run_python",
    "run_tests",
]
