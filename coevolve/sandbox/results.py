"""What a sandboxed run is given and gives back: its `Limits`, its `SandboxResult` (with one `TestResult`
per test), and `SandboxError` for bad input to the sandbox or a sandbox that cannot start."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field

from coevolve.errors import BadInput
from coevolve.text import bounded

MAX_STOPPED_CHARS = 2_000  # `SandboxResult.stopped` is cut to this (head and tail kept, with a marker)
MAX_MESSAGE_CHARS = 2_000  # and each test's message


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


class SandboxError(BadInput):
    """Bad input to the sandbox itself (e.g. a path escaping the tree), or no sandbox can be started."""
