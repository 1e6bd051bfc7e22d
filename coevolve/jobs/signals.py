"""Stopping a job: SIGINT and SIGTERM raise `Interrupted`, and the job says which run it stopped.

Inside `stop_on_signals()` (the CLI's eval, evolve and transfer use it) SIGINT (Ctrl-C) and SIGTERM
raise `Interrupted` in the main thread, also after Ray has started (Ray's core worker installs a C++
handler for SIGTERM that prints a stack dump and aborts: `coevolve.jobs.runtime.start_ray` puts ours
back with `install_handlers`). The job's `finally` blocks run: actors are shut down, an evolve run's
lease is released (the run is marked `interrupted` and `coevolve evolve --resume RUN_ID` continues it),
an eval run is recorded as `interrupted`. The exception carries the run id (`mark_interruption`), and
the CLI prints one line and exits 128 + signal (130 for SIGINT, 143 for SIGTERM). A second signal while
stopping exits at once.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived while a job ran. The job that was running fills in `kind`, `run_id`
    and `runs` (run id -> status it was left in) on its way out."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.kind: str | None = None
        self.run_id: str | None = None
        self.runs: dict[str, str] = {}

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


@dataclass
class _SignalState:
    active: bool = False
    raised: Interrupted | None = None
    previous: dict[int, Any] = field(default_factory=dict)


_signals = _SignalState()


def _on_signal(signum: int, frame: Any) -> None:
    if _signals.raised is not None:  # a second signal while the job stops: stop now
        os._exit(128 + signum)
    _signals.raised = Interrupted(signum)
    raise _signals.raised


def install_handlers() -> None:
    """Our handlers for the stop signals, while `stop_on_signals` is active in the main thread (else a no-op)."""
    if _signals.active and threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            signal.signal(sig, _on_signal)


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGINT and SIGTERM raise `Interrupted` while the block runs (main thread only; elsewhere a no-op);
    the previous handlers come back afterwards."""
    if threading.current_thread() is not threading.main_thread() or _signals.active:
        yield
        return
    _signals.previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    _signals.active, _signals.raised = True, None
    install_handlers()
    try:
        yield
    finally:
        _signals.active = False
        for sig, handler in _signals.previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def interruption(e: BaseException) -> Interrupted | None:
    """The `Interrupted` behind `e`: itself, or, for a plain KeyboardInterrupt (Ray's `ray.get` turns a
    signal handler's exception into a new one), the one the handler raised (a SIGINT if none did)."""
    if isinstance(e, Interrupted):
        return e
    if not isinstance(e, KeyboardInterrupt):
        return None
    if _signals.raised is None:
        _signals.raised = Interrupted(signal.SIGINT)
    return _signals.raised


def mark_interruption(e: BaseException, kind: str, run_id: str | None, status: str | None = None) -> None:
    """Tell the interruption on its way to the CLI which run it stopped (the first mark wins)."""
    intr = interruption(e)
    if intr is not None:
        intr.kind = intr.kind or kind
        if run_id is not None:
            intr.run_id = intr.run_id or run_id
            if status is not None:
                intr.runs.setdefault(run_id, status)
