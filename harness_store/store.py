"""The persistent, content-addressed harness store (DESIGN §2-§4).

One directory holds everything the system records:

```
<root>/store.db            sqlite (WAL): harness records, aliases, runs, trajectory batches, events,
                           adapters, schema version
<root>/objects/ab/<sha256> immutable blobs named by the sha256 of their bytes (encoded values,
                           trajectory batches), written atomically (tmp file + os.replace)
```

Several processes may write at once: every write is one short `BEGIN IMMEDIATE` transaction, sqlite
waits up to 30 s for the lock (`busy_timeout`) and a write that still meets `database is locked` is
retried with backoff. Blobs are content-addressed, so two processes writing the same blob write the
same bytes and either rename wins.

Harness ids are `Harness.id` (sha256 of the canonical encoding); the blob that stores a harness is
named by the sha256 of its plain encoding, which keeps dict insertion order (tool schemas) intact.
A harness record's `parent`, `edit` and `rationale` live here, never in the value.

Nothing here imports ray.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self, TypeVar

from harness_store.codec import CodecError, decode, encode
from harness_store.values import AdapterRef, Harness, HarnessEdit, Trajectory

SCHEMA_VERSION = 1
DB_NAME = "store.db"
OBJECTS = "objects"
MIN_PREFIX = 6
BUSY_TIMEOUT_MS = 30_000
WRITE_DEADLINE_S = 120.0

_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX = re.compile(r"[0-9a-f]+")
_ALIAS = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/@+-]*")
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]*")

T = TypeVar("T")
_INHERITED: list[sqlite3.Connection] = []  # connections inherited through fork, never touched

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS harnesses (
    id        TEXT PRIMARY KEY,
    family    TEXT NOT NULL,
    blob      TEXT NOT NULL,
    parent    TEXT REFERENCES harnesses(id),
    edit      BLOB,
    rationale TEXT NOT NULL DEFAULT '',
    run_id    TEXT,
    val_gain  REAL,
    created   REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS harnesses_family ON harnesses(family);
CREATE INDEX IF NOT EXISTS harnesses_parent ON harnesses(parent);
CREATE TABLE IF NOT EXISTS aliases (
    name       TEXT PRIMARY KEY,
    harness_id TEXT NOT NULL REFERENCES harnesses(id),
    updated    REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
    run_id   TEXT PRIMARY KEY,
    kind     TEXT NOT NULL,
    config   TEXT NOT NULL,
    status   TEXT NOT NULL,
    result   TEXT NOT NULL,
    created  REAL NOT NULL,
    finished REAL
);
CREATE INDEX IF NOT EXISTS runs_kind ON runs(kind);
CREATE TABLE IF NOT EXISTS trajectory_batches (
    seq     INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id  TEXT NOT NULL REFERENCES runs(run_id),
    batch   TEXT NOT NULL,
    blob    TEXT NOT NULL,
    count   INTEGER NOT NULL,
    created REAL NOT NULL,
    UNIQUE (run_id, batch)
);
CREATE TABLE IF NOT EXISTS events (
    seq     INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id  TEXT NOT NULL REFERENCES runs(run_id),
    kind    TEXT NOT NULL,
    payload TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS events_run ON events(run_id, seq);
CREATE TABLE IF NOT EXISTS adapters (
    id      TEXT PRIMARY KEY,
    value   BLOB NOT NULL,
    created REAL NOT NULL
);
"""
_TABLES = frozenset({"meta", "harnesses", "aliases", "runs", "trajectory_batches", "events", "adapters"})


class StoreError(ValueError):
    """The store cannot do what was asked; the message is one line that says why."""


# ------------------------------------------------------------------------------------- records
@dataclass(frozen=True)
class HarnessRecord:
    id: str
    family: str
    parent: str | None
    edit: HarnessEdit | None
    rationale: str
    run_id: str | None
    val_gain: float | None
    created: float


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    kind: str
    config: dict[str, Any]
    status: str
    result: dict[str, Any]
    created: float
    finished: float | None


@dataclass(frozen=True)
class Event:
    seq: int
    run_id: str
    kind: str
    payload: dict[str, Any]
    created: float


# --------------------------------------------------------------------------------------- store
class HarnessStore:
    """A directory of harness versions, runs, trajectories, events and adapters (module docstring)."""

    def __init__(self, root: str | Path, *, create: bool = True) -> None:
        self.root = Path(root).expanduser()
        self.db_path = self.root / DB_NAME
        self.objects = self.root / OBJECTS
        self._create = create
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid = os.getpid()
        self._open()

    # -- opening -------------------------------------------------------------------------------
    def _open(self) -> None:
        root, create = self.root, self._create
        if root.exists() or root.is_symlink():
            if not root.is_dir():
                raise StoreError(f"store path {str(root)!r} exists and is not a directory")
            if not os.access(root, os.R_OK | os.W_OK | os.X_OK):
                raise StoreError(f"store directory {str(root)!r} is not readable and writable")
            try:
                entries = {p.name for p in root.iterdir()}
            except OSError as e:
                raise StoreError(f"cannot list store directory {str(root)!r}: {e.strerror}") from None
            if DB_NAME not in entries:
                if entries:
                    raise StoreError(f"{str(root)!r} is not a harness store (no {DB_NAME}) and is not empty")
                if not create:
                    raise StoreError(f"no harness store at {str(root)!r} (empty directory, create=False)")
            elif not os.access(self.db_path, os.R_OK | os.W_OK):
                raise StoreError(f"store database {str(self.db_path)!r} is not readable and writable")
        else:
            if not create:
                raise StoreError(f"no harness store at {str(root)!r} (create=False)")
            try:
                root.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise StoreError(f"cannot create store directory {str(root)!r}: {e.strerror}") from None

        conn = self._connect()
        try:
            self._check_schema(conn, create=create)  # before any write to a file that may not be ours
            self._retry(lambda: _ensure_wal(conn))
        except sqlite3.DatabaseError as e:
            conn.close()
            raise StoreError(f"cannot switch {str(self.db_path)!r} to WAL mode: {e}") from None
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        # objects/ after store.db: a concurrent opener never sees a non-empty dir without store.db
        self.objects.mkdir(exist_ok=True)

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.db_path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as e:
            raise StoreError(f"cannot open {str(self.db_path)!r}: {e}") from None
        try:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            # reading the journal mode reads the header: a corrupt file fails here, before any write
            conn.execute("PRAGMA journal_mode").fetchone()
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = ON")
        except sqlite3.DatabaseError as e:
            conn.close()
            raise StoreError(f"{str(self.db_path)!r} is not a readable harness store: {e}") from None
        return conn

    def _check_schema(self, conn: sqlite3.Connection, *, create: bool) -> None:
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            tables.discard("sqlite_sequence")
            if not tables:
                if not create:
                    raise StoreError(f"{str(self.db_path)!r} holds no harness store (create=False)")
                self._init_schema(conn)
                return
            if "meta" not in tables:
                raise StoreError(f"{str(self.db_path)!r} is an sqlite database but not a harness store")
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
            if row is None:  # the schema is created in one transaction, so this is a foreign db
                raise StoreError(f"{str(self.db_path)!r} has no harness store schema version")
            version = int(row[0])
            if version != SCHEMA_VERSION:
                raise StoreError(
                    f"{str(self.db_path)!r} has schema version {version}; this code reads {SCHEMA_VERSION}"
                )
            missing = _TABLES - tables
            if missing:
                raise StoreError(f"{str(self.db_path)!r} lacks tables {sorted(missing)}")
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{str(self.db_path)!r} is not a readable harness store: {e}") from None

    def _init_schema(self, conn: sqlite3.Connection) -> None:
        def init(c: sqlite3.Connection) -> None:
            for stmt in _SCHEMA.split(";"):
                if stmt.strip():
                    c.execute(stmt)
            c.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('schema', ?)", (str(SCHEMA_VERSION),))

        self._transact(conn, init)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"HarnessStore({str(self.root)!r})"

    # A store travels to other processes (multiprocessing, Ray) as its path and reopens there.
    def __getstate__(self) -> dict[str, Any]:
        return {"root": str(self.root)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["root"], create=False)  # type: ignore[misc]

    # -- transactions --------------------------------------------------------------------------
    def _connection(self) -> sqlite3.Connection:
        if self._pid != os.getpid():
            # Forked: never use (or close: closing drops this process's POSIX locks on the file)
            # the parent's connection; keep it referenced so it is never garbage-collected.
            if self._conn is not None:
                _INHERITED.append(self._conn)
            self._conn = None
            self._pid = os.getpid()
        if self._conn is None:
            self._conn = self._connect()
        return self._conn

    @staticmethod
    def _retry(fn: Callable[[], T]) -> T:
        deadline = time.monotonic() + WRITE_DEADLINE_S
        delay = 0.005
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as e:
                msg = str(e)
                if "locked" not in msg and "busy" not in msg:
                    raise
                if time.monotonic() > deadline:
                    raise StoreError(
                        f"store is busy: {msg} (gave up after {WRITE_DEADLINE_S:.0f} s)"
                    ) from None
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 0.5)

    def _transact(self, conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
        def attempt() -> T:
            conn.execute("BEGIN IMMEDIATE")
            try:
                out = fn(conn)
                conn.execute("COMMIT")
                return out
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

        return self._retry(attempt)

    def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock, _sqlite_errors():
            return self._transact(self._connection(), fn)

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with self._lock, _sqlite_errors():
            conn = self._connection()
            return self._retry(lambda: conn.execute(sql, tuple(params)).fetchall())

    # -- blobs ---------------------------------------------------------------------------------
    def _object_path(self, digest: str) -> Path:
        if not isinstance(digest, str) or not _HEX64.fullmatch(digest):
            raise StoreError(f"{digest!r} is not a sha256 digest")
        return self.objects / digest[:2] / digest

    def put_blob(self, data: bytes) -> str:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise StoreError(f"put_blob takes bytes, not {type(data).__name__}")
        data = bytes(data)
        digest = hashlib.sha256(data).hexdigest()
        path = self._object_path(digest)
        if path.exists():
            return digest
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.parent / f".tmp-{digest[:12]}-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise StoreError(f"cannot write object {digest[:12]}: {e.strerror}") from None
        return digest

    def get_blob(self, digest: str) -> bytes:
        path = self._object_path(digest)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise StoreError(f"no object {digest}") from None
        except OSError as e:
            raise StoreError(f"cannot read object {digest[:12]}: {e.strerror}") from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise StoreError(f"object {digest} is corrupt (its content does not match its name)")
        return data

    def has_blob(self, digest: str) -> bool:
        return self._object_path(digest).exists()

    def put_value(self, value: Any) -> str:
        try:
            data = encode(value)
        except (CodecError, TypeError, OverflowError) as e:
            raise StoreError(f"cannot encode {type(value).__name__}: {e}") from None
        return self.put_blob(data)

    def get_value(self, digest: str) -> Any:
        data = self.get_blob(digest)
        try:
            return decode(data)
        except (CodecError, ValueError) as e:
            raise StoreError(f"object {digest[:12]} does not decode: {e}") from None

    # -- harnesses -----------------------------------------------------------------------------
    def put_harness(
        self,
        h: Harness,
        *,
        parent: str | None = None,
        edit: HarnessEdit | None = None,
        rationale: str = "",
        run_id: str | None = None,
        val_gain: float | None = None,
    ) -> str:
        """Record `h` (idempotent: re-putting an existing harness keeps the first record)."""
        if not isinstance(h, Harness):
            raise StoreError(f"put_harness takes a Harness, not {type(h).__name__}")
        if edit is not None and not isinstance(edit, HarnessEdit):
            raise StoreError(f"edit must be a HarnessEdit, not {type(edit).__name__}")
        hid = h.id
        parent_id = None
        if parent is not None:
            prec = self.get_record(self._resolve_id(parent))
            parent_id = prec.id
            if parent_id == hid:
                raise StoreError(f"harness {hid[:12]} cannot be its own parent")
            if prec.family != h.family:
                raise StoreError(
                    f"parent {parent_id[:12]} is family {prec.family!r}, the harness is {h.family!r}"
                )
        elif edit is not None:
            raise StoreError("an edit needs the parent it was applied to")
        blob = self.put_value(h)
        edit_bytes = encode(edit) if edit is not None else None
        gain = None if val_gain is None else float(val_gain)
        row = (hid, h.family, blob, parent_id, edit_bytes, rationale, run_id, gain, time.time())
        self._write(
            lambda c: c.execute(
                "INSERT OR IGNORE INTO harnesses"
                "(id, family, blob, parent, edit, rationale, run_id, val_gain, created)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                row,
            )
        )
        return hid

    def _resolve_id(self, ref: str) -> str:
        """A full id, an alias or a unique id prefix (>= 6 hex characters) -> the full id."""
        if not isinstance(ref, str) or not ref:
            raise StoreError(f"harness reference must be a non-empty string, got {ref!r}")
        if _HEX64.fullmatch(ref):
            if self._read("SELECT 1 FROM harnesses WHERE id = ?", (ref,)):
                return ref
            raise StoreError(f"unknown harness {ref!r}")
        rows = self._read("SELECT harness_id FROM aliases WHERE name = ?", (ref,))
        if rows:
            return str(rows[0][0])
        if _HEX.fullmatch(ref):
            if len(ref) < MIN_PREFIX:
                raise StoreError(
                    f"harness prefix {ref!r} is too short (use at least {MIN_PREFIX} characters)"
                )
            rows = self._read("SELECT id FROM harnesses WHERE id GLOB ? ORDER BY id LIMIT 3", (ref + "*",))
            if len(rows) == 1:
                return str(rows[0][0])
            if len(rows) > 1:
                shown = ", ".join(r[0][:12] for r in rows[:2])
                raise StoreError(f"harness prefix {ref!r} is ambiguous (matches {shown}, ...)")
        raise StoreError(f"unknown harness {ref!r}")

    def get_harness(self, ref: str) -> Harness:
        hid = self._resolve_id(ref)
        rows = self._read("SELECT blob FROM harnesses WHERE id = ?", (hid,))
        if not rows:
            raise StoreError(f"unknown harness {ref!r}")
        value = self.get_value(rows[0][0])
        if not isinstance(value, Harness):
            raise StoreError(f"object for harness {hid[:12]} holds a {type(value).__name__}")
        return value

    def resolve_harness(self, ref: str, family: str) -> Harness:
        """Like `get_harness`, for one family: `baseline` (or any bare alias name `x`) means alias
        `<family>:x`; the harness must belong to `family`."""
        candidates = [ref]
        if isinstance(ref, str) and ref and ":" not in ref:
            candidates = [f"{family}:{ref}", ref] if ref == "baseline" else [ref, f"{family}:{ref}"]
        hid = None
        ambiguous: StoreError | None = None
        for cand in candidates:
            try:
                hid = self._resolve_id(cand)
                break
            except StoreError as e:
                if "ambiguous" in str(e):
                    ambiguous = e
        if hid is None:
            if ambiguous is not None:
                raise StoreError(f"{ambiguous} for family {family!r}")
            raise StoreError(f"unknown harness {ref!r} for family {family!r}")
        h = self.get_harness(hid)
        if h.family != family:
            raise StoreError(f"harness {ref!r} ({hid[:12]}) belongs to family {h.family!r}, not {family!r}")
        return h

    def set_alias(self, name: str, harness_id: str) -> None:
        """Point the global alias `name` (e.g. `iot:baseline`) at a harness; an alias may move."""
        if not isinstance(name, str) or not _ALIAS.fullmatch(name):
            raise StoreError(f"alias {name!r} must be a word of letters, digits and _.:/@+-")
        if _HEX.fullmatch(name):
            raise StoreError(
                f"alias {name!r} looks like a harness id prefix; pick a name with a non-hex letter"
            )
        hid = self._resolve_id(harness_id)
        self._write(
            lambda c: c.execute(
                "INSERT INTO aliases(name, harness_id, updated) VALUES (?, ?, ?)"
                " ON CONFLICT(name) DO UPDATE SET harness_id = excluded.harness_id, updated = excluded.updated",
                (name, hid, time.time()),
            )
        )

    def aliases(self, harness_id: str | None = None) -> dict[str, str]:
        """Alias name -> harness id (only those pointing at `harness_id` if given)."""
        if harness_id is None:
            rows = self._read("SELECT name, harness_id FROM aliases ORDER BY name")
        else:
            rows = self._read(
                "SELECT name, harness_id FROM aliases WHERE harness_id = ? ORDER BY name",
                (self._resolve_id(harness_id),),
            )
        return {str(n): str(h) for n, h in rows}

    _RECORD_COLS = "id, family, parent, edit, rationale, run_id, val_gain, created"

    def _record(self, row: Sequence[Any]) -> HarnessRecord:
        hid, family, parent, edit_bytes, rationale, run_id, val_gain, created = row
        edit = None
        if edit_bytes is not None:
            try:
                edit = decode(edit_bytes)
            except (CodecError, ValueError) as e:
                raise StoreError(f"edit of harness {hid[:12]} does not decode: {e}") from None
        return HarnessRecord(hid, family, parent, edit, rationale, run_id, val_gain, created)

    def get_record(self, harness_id: str) -> HarnessRecord:
        hid = self._resolve_id(harness_id)
        rows = self._read(f"SELECT {self._RECORD_COLS} FROM harnesses WHERE id = ?", (hid,))
        if not rows:
            raise StoreError(f"unknown harness {harness_id!r}")
        return self._record(rows[0])

    def list_harnesses(self, family: str | None = None) -> list[HarnessRecord]:
        if family is None:
            rows = self._read(f"SELECT {self._RECORD_COLS} FROM harnesses ORDER BY created, rowid")
        else:
            rows = self._read(
                f"SELECT {self._RECORD_COLS} FROM harnesses WHERE family = ? ORDER BY created, rowid",
                (family,),
            )
        return [self._record(r) for r in rows]

    def lineage(self, harness_id: str) -> list[HarnessRecord]:
        """The chain of records from the root ancestor down to `harness_id`."""
        chain = [self.get_record(harness_id)]
        seen = {chain[0].id}
        while chain[-1].parent is not None:
            rec = self.get_record(chain[-1].parent)
            if rec.id in seen:  # cannot happen through put_harness; guard a hand-edited db
                raise StoreError(f"harness lineage of {harness_id!r} has a cycle at {rec.id[:12]}")
            seen.add(rec.id)
            chain.append(rec)
        return chain[::-1]

    def children(self, harness_id: str) -> list[HarnessRecord]:
        hid = self._resolve_id(harness_id)
        rows = self._read(
            f"SELECT {self._RECORD_COLS} FROM harnesses WHERE parent = ? ORDER BY created, rowid", (hid,)
        )
        return [self._record(r) for r in rows]

    # -- runs ----------------------------------------------------------------------------------
    def create_run(self, kind: str, config: dict[str, Any], run_id: str | None = None) -> str:
        """Open a run record (status `running`); the id is `<kind>-<UTC yyyymmdd-hhmmss>-<6 hex>`."""
        if not isinstance(kind, str) or not kind:
            raise StoreError("run kind must be a non-empty string")
        if run_id is not None and (not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id)):
            raise StoreError(f"run id {run_id!r} must be a word of letters, digits and _.:-")
        config_json = _dumps(config, "config")
        result_json = _dumps({}, "result")
        for _ in range(8):
            rid = run_id or _new_run_id(kind)

            def insert(c: sqlite3.Connection, rid: str = rid) -> bool:
                try:
                    c.execute(
                        "INSERT INTO runs(run_id, kind, config, status, result, created, finished)"
                        " VALUES (?, ?, ?, 'running', ?, ?, NULL)",
                        (rid, kind, config_json, result_json, time.time()),
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
        self, run_id: str, status: str | None = None, result: dict[str, Any] | None = None
    ) -> None:
        """Set the status and/or replace the result of a run."""
        sets: list[str] = []
        params: list[Any] = []
        if status is not None:
            sets.append("status = ?")
            params.append(_status(status))
        if result is not None:
            sets.append("result = ?")
            params.append(_dumps(result, "result"))
        if not sets:
            self.get_run(run_id)  # still reports an unknown run
            return
        self._update_run(run_id, ", ".join(sets), params)

    def finish_run(self, run_id: str, status: str, result: dict[str, Any]) -> None:
        self._update_run(
            run_id,
            "status = ?, result = ?, finished = ?",
            [_status(status), _dumps(result, "result"), time.time()],
        )

    def _update_run(self, run_id: str, sets: str, params: list[Any]) -> None:
        n = self._write(
            lambda c: c.execute(f"UPDATE runs SET {sets} WHERE run_id = ?", (*params, run_id)).rowcount
        )
        if n == 0:
            raise StoreError(f"unknown run {run_id!r}")

    _RUN_COLS = "run_id, kind, config, status, result, created, finished"

    @staticmethod
    def _run(row: Sequence[Any]) -> RunRecord:
        rid, kind, config, status, result, created, finished = row
        return RunRecord(rid, kind, json.loads(config), status, json.loads(result), created, finished)

    def get_run(self, run_id: str) -> RunRecord:
        rows = self._read(f"SELECT {self._RUN_COLS} FROM runs WHERE run_id = ?", (run_id,))
        if not rows:
            raise StoreError(f"unknown run {run_id!r}")
        return self._run(rows[0])

    def list_runs(self, kind: str | None = None) -> list[RunRecord]:
        if kind is None:
            rows = self._read(f"SELECT {self._RUN_COLS} FROM runs ORDER BY created, rowid")
        else:
            rows = self._read(
                f"SELECT {self._RUN_COLS} FROM runs WHERE kind = ? ORDER BY created, rowid", (kind,)
            )
        return [self._run(r) for r in rows]

    def _require_run(self, run_id: str) -> None:
        if not self._read("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)):
            raise StoreError(f"unknown run {run_id!r}")

    # -- trajectories --------------------------------------------------------------------------
    def put_trajectories(self, run_id: str, trajectories: Sequence[Trajectory], batch: str = "main") -> str:
        """Store one batch as one blob. Re-putting identical content is a no-op; a batch name is
        never overwritten with different content."""
        if not isinstance(batch, str) or not batch:
            raise StoreError("batch name must be a non-empty string")
        trajs = tuple(trajectories)
        for t in trajs:
            if not isinstance(t, Trajectory):
                raise StoreError(f"put_trajectories takes Trajectory values, not {type(t).__name__}")
        self._require_run(run_id)
        digest = self.put_value(trajs)

        def insert(c: sqlite3.Connection) -> str | None:
            row = c.execute(
                "SELECT blob FROM trajectory_batches WHERE run_id = ? AND batch = ?", (run_id, batch)
            ).fetchone()
            if row is not None:
                return str(row[0])
            c.execute(
                "INSERT INTO trajectory_batches(run_id, batch, blob, count, created) VALUES (?, ?, ?, ?, ?)",
                (run_id, batch, digest, len(trajs), time.time()),
            )
            return None

        existing = self._write(insert)
        if existing is not None and existing != digest:
            raise StoreError(f"run {run_id!r} already has a different trajectory batch {batch!r}")
        return digest

    def trajectory_batches(self, run_id: str) -> list[tuple[str, str, int]]:
        """(batch name, blob digest, count) per batch, in insertion order."""
        self._require_run(run_id)
        rows = self._read(
            "SELECT batch, blob, count FROM trajectory_batches WHERE run_id = ? ORDER BY seq", (run_id,)
        )
        return [(str(b), str(d), int(n)) for b, d, n in rows]

    def get_trajectories(self, run_id: str, batch: str | None = None) -> list[Trajectory]:
        batches = self.trajectory_batches(run_id)
        if batch is not None:
            batches = [b for b in batches if b[0] == batch]
            if not batches:
                raise StoreError(f"run {run_id!r} has no trajectory batch {batch!r}")
        out: list[Trajectory] = []
        for _, digest, _ in batches:
            value = self.get_value(digest)
            if not isinstance(value, list) or not all(isinstance(t, Trajectory) for t in value):
                raise StoreError(f"object {digest[:12]} is not a trajectory batch")
            out.extend(value)
        return out

    # -- events --------------------------------------------------------------------------------
    def append_event(self, run_id: str, kind: str, payload: dict[str, Any]) -> int:
        """Append to the journal; the returned seq grows monotonically across the whole store."""
        if not isinstance(kind, str) or not kind:
            raise StoreError("event kind must be a non-empty string")
        payload_json = _dumps(payload, "payload")

        def insert(c: sqlite3.Connection) -> int:
            if c.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone() is None:
                raise StoreError(f"unknown run {run_id!r}")
            cur = c.execute(
                "INSERT INTO events(run_id, kind, payload, created) VALUES (?, ?, ?, ?)",
                (run_id, kind, payload_json, time.time()),
            )
            return int(cur.lastrowid or 0)

        return self._write(insert)

    def events(self, run_id: str, kind: str | None = None, *, after: int = 0) -> list[Event]:
        """Events of a run in seq order (only those with seq > `after`, for tailing a journal)."""
        sql = "SELECT seq, run_id, kind, payload, created FROM events WHERE run_id = ? AND seq > ?"
        params: list[Any] = [run_id, after]
        if kind is not None:
            sql += " AND kind = ?"
            params.append(kind)
        rows = self._read(sql + " ORDER BY seq", params)
        return [Event(int(s), r, k, json.loads(p), c) for s, r, k, p, c in rows]

    # -- adapters ------------------------------------------------------------------------------
    def put_adapter(self, ref: AdapterRef) -> None:
        """Record an adapter; putting the same id again replaces it (e.g. with new metrics)."""
        if not isinstance(ref, AdapterRef):
            raise StoreError(f"put_adapter takes an AdapterRef, not {type(ref).__name__}")
        if not ref.id:
            raise StoreError("adapter id must be non-empty")
        try:
            data = encode(ref)
        except (CodecError, TypeError, OverflowError) as e:
            raise StoreError(f"cannot encode adapter {ref.id!r}: {e}") from None
        self._write(
            lambda c: c.execute(
                "INSERT INTO adapters(id, value, created) VALUES (?, ?, ?)"
                " ON CONFLICT(id) DO UPDATE SET value = excluded.value",
                (ref.id, data, time.time()),
            )
        )

    def get_adapter(self, id: str) -> AdapterRef:
        rows = self._read("SELECT value FROM adapters WHERE id = ?", (id,))
        if not rows:
            raise StoreError(f"unknown adapter {id!r}")
        return self._adapter(rows[0][0])

    def list_adapters(self) -> list[AdapterRef]:
        return [self._adapter(r[0]) for r in self._read("SELECT value FROM adapters ORDER BY created, rowid")]

    @staticmethod
    def _adapter(data: bytes) -> AdapterRef:
        value = decode(data)
        if not isinstance(value, AdapterRef):
            raise StoreError(f"adapter record holds a {type(value).__name__}")
        return value

    # -- maintenance ---------------------------------------------------------------------------
    def integrity_check(self) -> str:
        """sqlite's `PRAGMA integrity_check` ('ok' when the database is sound)."""
        rows = self._read("PRAGMA integrity_check")
        return "; ".join(str(r[0]) for r in rows)


# ------------------------------------------------------------------------------------- helpers
@contextmanager
def _sqlite_errors() -> Iterator[None]:
    try:
        yield
    except sqlite3.DatabaseError as e:
        raise StoreError(f"store database error: {e}") from None


def _ensure_wal(conn: sqlite3.Connection) -> None:
    if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        conn.execute("PRAGMA journal_mode = WAL").fetchone()


def _dumps(obj: Any, what: str) -> str:
    if not isinstance(obj, dict):
        raise StoreError(f"{what} must be a dict, not {type(obj).__name__}")
    try:
        return json.dumps(obj, sort_keys=True)
    except (TypeError, ValueError) as e:
        raise StoreError(f"{what} is not JSON-serialisable: {e}") from None


def _status(status: str) -> str:
    if not isinstance(status, str) or not status:
        raise StoreError("run status must be a non-empty string")
    return status


def _new_run_id(kind: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", kind.lower()).strip("-") or "run"
    return f"{slug}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(3)}"
