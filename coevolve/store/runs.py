"""Runs of a store: their records, the `Lease` one process holds on a run, and owner liveness.

A run records its owner (pid, host, process start time) when created or claimed. `claim_run` gives
one process at a time a `Lease` on a run (a `done` run is refused; a claim whose owner is gone is
taken over). A run id is `<kind>-<12 random hex>`: nothing in it comes from the clock, and runs are
ordered by their created column.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import sqlite3
import threading
import time
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from coevolve.store.db import Database, StoreError, _dumps

LEASE_BEAT_S = 30.0  # a lease's heartbeat period
LEASE_TTL_S = 180.0  # a lease not renewed for this long is abandoned (owner on another host)
HOST = socket.gethostname()

_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]*")


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    kind: str
    config: dict[str, Any]
    status: str
    result: dict[str, Any]
    created: float
    finished: float | None
    updated: float | None = None  # last change to the run, its events or its trajectories
    pid: int | None = None  # the process that created or last claimed the run
    host: str | None = None
    owner_start: str | None = None  # that process's start time (tells a reused pid apart)
    claimed: bool = False  # a `Lease` is held on the run
    beat: float | None = None  # the lease's last heartbeat

    def owner_alive(self) -> bool | None:
        """Is the owning process alive? None when it runs on another host and holds no lease."""
        return _owner_alive(self.pid, self.host, self.owner_start, self.claimed, self.beat)


class Lease:
    """One process's claim on a run (`HarnessStore.claim_run`); `release()` or leave the `with` block.

    While held, a daemon thread renews the lease every `LEASE_BEAT_S` so that a host that cannot see
    the owner's pid can still tell a live owner from an abandoned lease. Releasing a run still marked
    `running` marks it `interrupted` (nobody runs it any more)."""

    def __init__(self, store: Runs, run_id: str, token: str, heartbeat_s: float | None) -> None:
        self.store = store
        self.run_id = run_id
        self.token = token
        self._pid = os.getpid()
        self._released = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if heartbeat_s:
            self._thread = threading.Thread(
                target=self._beat, args=(heartbeat_s,), name=f"lease-{run_id}", daemon=True
            )
            self._thread.start()

    def _beat(self, every: float) -> None:
        while not self._stop.wait(every):
            with suppress(Exception):  # best effort: a missed beat only ages the lease
                self.store._renew(self.run_id, self.token)

    @property
    def held(self) -> bool:
        return not self._released

    def release(self) -> None:
        if self._released or self._pid != os.getpid():  # a forked child never releases its parent's
            return
        self._released = True
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self.store._release(self.run_id, self.token)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"Lease({self.run_id!r}, held={self.held})"


class Runs(Database):
    """The run part of `HarnessStore`: records, claims and leases."""

    def create_run(self, kind: str, config: dict[str, Any], run_id: str | None = None) -> str:
        """Open a run record (status `running`, owned by this process); the id is `<kind>-<12 hex>`
        (random: `list_runs` orders runs by their created column, never by id)."""
        if not isinstance(kind, str) or not kind:
            raise StoreError("run kind must be a non-empty string")
        if run_id is not None and (not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id)):
            raise StoreError(f"run id {run_id!r} must be a word of letters, digits and _.:-")
        config_json = _dumps(config, "config")
        result_json = _dumps({}, "result")
        pid, host, pstart = _me()
        for _ in range(8):
            rid = run_id or _new_run_id(kind)

            def insert(c: sqlite3.Connection, rid: str = rid) -> bool:
                now = time.time()
                try:
                    c.execute(
                        "INSERT INTO runs(run_id, kind, config, status, result, created, finished,"
                        " updated, pid, host, pstart) VALUES (?, ?, ?, 'running', ?, ?, NULL, ?, ?, ?, ?)",
                        (rid, kind, config_json, result_json, now, now, pid, host, pstart),
                    )
                except sqlite3.IntegrityError:
                    return False
                return True

            if self._write(insert):
                return rid
            if run_id is not None:
                raise StoreError(f"run {run_id!r} already exists")
        raise StoreError("could not allocate a unique run id")  # pragma: no cover

    def update_run(
        self, run_id: str, status: str | None = None, result: dict[str, Any] | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        """Set the status and/or replace the result or the config of a run (a resumed run's corrections)."""
        given = {"config": config, "status": status, "result": result}
        fields = {col: _status(v) if col == "status" else _dumps(v, col) for col, v in given.items() if v is not None}
        if not fields:
            self.get_run(run_id)  # still reports an unknown run
            return
        self._update_run(run_id, ", ".join(f"{col} = ?" for col in fields), list(fields.values()))

    def finish_run(self, run_id: str, status: str, result: dict[str, Any]) -> None:
        self._update_run(
            run_id,
            "status = ?, result = ?, finished = ?",
            [_status(status), _dumps(result, "result"), time.time()],
        )

    def _update_run(self, run_id: str, sets: str, params: list[Any]) -> None:
        n = self._write(
            lambda c: (
                c.execute(
                    f"UPDATE runs SET {sets}, updated = ? WHERE run_id = ?", (*params, time.time(), run_id)
                ).rowcount
            )
        )
        if n == 0:
            raise StoreError(f"unknown run {run_id!r}")

    @property
    def _run_cols(self) -> str:
        if self._v1:
            return (
                "run_id, kind, config, status, result, created, finished, COALESCE(finished, created),"
                " NULL, NULL, NULL, 0, NULL"
            )
        return (
            "run_id, kind, config, status, result, created, finished, updated, pid, host, pstart,"
            " lease IS NOT NULL, beat"
        )

    @staticmethod
    def _run(row: Sequence[Any]) -> RunRecord:
        rid, kind, config, status, result, created, finished, updated, pid, host, pstart, claimed, beat = row
        return RunRecord(
            rid,
            kind,
            json.loads(config),
            status,
            json.loads(result),
            created,
            finished,
            updated,
            pid,
            host,
            pstart,
            bool(claimed),
            beat,
        )

    def get_run(self, run_id: str) -> RunRecord:
        rows = self._read(f"SELECT {self._run_cols} FROM runs WHERE run_id = ?", (run_id,))
        if not rows:
            raise StoreError(f"unknown run {run_id!r}")
        return self._run(rows[0])

    def list_runs(self, kind: str | None = None, status: str | None = None) -> list[RunRecord]:
        """Runs in creation order, optionally only those of one kind and/or one stored status."""
        sql = f"SELECT {self._run_cols} FROM runs WHERE 1 = 1"
        params: list[Any] = []
        for column, value in (("kind", kind), ("status", status)):
            if value is not None:
                sql += f" AND {column} = ?"
                params.append(value)
        return [self._run(r) for r in self._read(sql + " ORDER BY created, rowid", params)]

    def claim_run(self, run_id: str, *, heartbeat_s: float | None = LEASE_BEAT_S) -> Lease:
        """Make this process the one owner of a run (status `running`) until the returned `Lease` is
        released. Refused with a `StoreError` when the run is `done`, or when another live process owns
        it (it holds a lease, or the run is `running` under it); a dead owner's claim is taken over."""
        self._require_writable(f"claim run {run_id!r}")
        pid, host, pstart = _me()
        token = secrets.token_hex(8)

        def claim(c: sqlite3.Connection) -> None:
            row = c.execute(
                "SELECT status, finished, pid, host, pstart, lease, beat FROM runs WHERE run_id = ?",
                (run_id,),
            ).fetchone()
            if row is None:
                raise StoreError(f"unknown run {run_id!r}")
            status, finished, opid, ohost, opstart, olease, obeat = row
            if status == "done":
                when = f" at {_iso(finished)}" if finished else ""
                raise StoreError(
                    f"run {run_id!r} is done (finished{when}); start a new run instead of resuming it"
                )
            if olease is not None or status == "running":
                if (opid, ohost, opstart) == (pid, host, pstart):
                    if olease is not None:
                        raise StoreError(f"run {run_id!r} is already claimed by this process (pid {pid})")
                else:
                    alive = _owner_alive(opid, ohost, opstart, olease is not None, obeat)
                    if alive is True:
                        raise StoreError(
                            f"run {run_id!r} is in use by pid {opid} on {ohost} (status {status});"
                            " wait for it to end or stop that process"
                        )
                    if alive is None:
                        raise StoreError(
                            f"run {run_id!r} is {status} under pid {opid} on host {ohost}, which cannot be"
                            " checked from here; if that process is gone, run `coevolve store check"
                            f" --repair` on {ohost}"
                        )
            now = time.time()
            c.execute(
                "UPDATE runs SET status = 'running', finished = NULL, pid = ?, host = ?, pstart = ?,"
                " lease = ?, beat = ?, updated = ? WHERE run_id = ?",
                (pid, host, pstart, token, now, now, run_id),
            )

        self._write(claim)
        return Lease(self, run_id, token, heartbeat_s)

    def _renew(self, run_id: str, token: str) -> None:
        self._write(
            lambda c: c.execute(
                "UPDATE runs SET beat = ? WHERE run_id = ? AND lease = ?", (time.time(), run_id, token)
            )
        )

    def _release(self, run_id: str, token: str) -> None:
        now = time.time()
        self._write(
            lambda c: c.execute(
                "UPDATE runs SET lease = NULL, beat = ?, updated = ?,"
                " status = CASE WHEN status = 'running' THEN 'interrupted' ELSE status END"
                " WHERE run_id = ? AND lease = ?",
                (now, now, run_id, token),
            )
        )

    def _require_run(self, run_id: str) -> None:
        if not self._read("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)):
            raise StoreError(f"unknown run {run_id!r}")


def _status(status: str) -> str:
    if not isinstance(status, str) or not status:
        raise StoreError("run status must be a non-empty string")
    return status


def _new_run_id(kind: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", kind.lower()).strip("-") or "run"
    return f"{slug}-{secrets.token_hex(6)}"


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """(state, start time) of a process from /proc; ('X', '') when /proc exists but the process does
    not; None where there is no /proc."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return ("X", "") if Path("/proc/self/stat").exists() else None
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], fields[19]


_ME: tuple[int, tuple[int, str, str | None]] | None = None


def _me() -> tuple[int, str, str | None]:
    """This process as a run owner: (pid, host, start time)."""
    global _ME
    pid = os.getpid()
    if _ME is None or _ME[0] != pid:
        st = _proc_stat(pid)
        _ME = (pid, (pid, HOST, st[1] if st else None))
    return _ME[1]


def _pid_alive(pid: int, start: str | None = None) -> bool:
    """Is process `pid` (on this host) alive, and the same process that had start time `start`?"""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    except OSError:
        return False
    st = _proc_stat(pid)
    if st is None:
        return True
    state, started = st
    if state in ("X", "Z", "x"):  # gone, or a zombie nobody has reaped yet
        return False
    return start is None or started == start


def _owner_alive(
    pid: int | None, host: str | None, start: str | None, leased: bool, beat: float | None
) -> bool | None:
    """Is a run's owner alive? Exact on this host (pid + start time); on another host a lease renewed
    within `LEASE_TTL_S` counts as alive, an older one as dead, and an owner without a lease is
    unknown (None). A run with no recorded owner (made before schema 2) has no live owner."""
    if pid is None:
        return False
    if host == HOST:
        return _pid_alive(int(pid), start)
    if leased:
        return beat is not None and time.time() - beat < LEASE_TTL_S
    return None


def _iso(t: float | None) -> str:
    if t is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
