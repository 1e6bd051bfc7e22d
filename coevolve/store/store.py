"""The persistent, content-addressed harness store (DESIGN §2-§4).

One directory holds everything the system records:

```
<root>/store.db            sqlite (WAL): harness records, aliases, runs, trajectory batches and the
                           rollout index, events, adapters, the counterfactual cache, schema version
<root>/objects/ab/<sha256> immutable blobs named by the sha256 of their bytes (encoded values,
                           trajectory batches), written atomically (tmp file + fsync + os.replace)
<root>/quarantine/         corrupt objects moved aside by `check(repair=True)`
```

Several processes may write at once: every write is one short `BEGIN IMMEDIATE` transaction, sqlite
waits up to 30 s for the lock (`busy_timeout`) and a write that still meets `database is locked` is
retried with backoff. Blobs are content-addressed, so two processes writing the same blob write the
same bytes and either rename wins. A blob is verified on every read (`get_blob` names a corrupt one)
and before `put_blob` skips an existing file, so re-putting the same content repairs a corrupt object.

Harness ids are `Harness.id` (sha256 of the canonical encoding); the blob that stores a harness is
named by the sha256 of its plain encoding, which keeps dict insertion order (tool schemas) intact.
A harness record's `parent`, `edit` and `rationale` live here, never in the value.

Runs record their owner (pid, host, process start time) when created or claimed. `claim_run` gives
one process at a time a `Lease` on a run (a `done` run is refused; a claim whose owner is gone is
taken over); `check()` verifies every record and object and finds runs whose owner died.

Every stored trajectory batch indexes its rollouts, in the transaction that stores it: one row per
rollout key (`rollout_key`: the instance, harness, model and seed it samples) and run, naming the
batch and position that hold it and its cost. The index is the run's spend journal (`rollout_spend`:
a run's distinct stored rollouts and their dollars, so spend counts exactly the work the store kept)
and its rollout cache (`stored_rollouts`: a resumed run, or a re-run eval, takes what it stored before
instead of paying for it again).

The counterfactual cache holds the testbed's counterfactual answer key of a failed synthetic
rollout (deviations, decisive turn), keyed by trajectory id and harness id: analysis code computes it
lazily (`coevolve.testbed.counterfactual`) and keeps it here, so it is computed once per trajectory.

A directory without store.db opens as a new store when it is empty or holds only the project's own
subfolders (`STORE_SUBFOLDERS`: models/, adapters/, datasets/, train_runs/), so that
`coevolve models make-tiny .coevolve/models/tiny` before the first store command works; anything else
in it is refused (it is somebody else's folder).

A store whose directory (or store.db, or objects/) is not writable opens read-only: reads work and the
first write raises `StoreError`.

Nothing here imports ray.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import re
import secrets
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self, TypeVar

from coevolve.codec import CodecError, content_id, decode, encode
from coevolve.values import AdapterRef, Harness, HarnessEdit, TaskInstance, Trajectory

SCHEMA_VERSION = 4  # 2: runs record their owner (pid, host), updated time and lease; 3: counterfactual cache;
# 4: the rollout index (spend journal and rollout cache)
DB_NAME = "store.db"
OBJECTS = "objects"
QUARANTINE = "quarantine"
MIN_PREFIX = 6
BUSY_TIMEOUT_MS = 30_000
WRITE_DEADLINE_S = 120.0
LEASE_BEAT_S = 30.0  # a lease's heartbeat period
LEASE_TTL_S = 180.0  # a lease not renewed for this long is abandoned (owner on another host)
TMP_MAX_AGE_S = 3600.0  # a temp object file this old is left over even if its writer's pid is alive
HOST = socket.gethostname()

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
    finished REAL,
    updated  REAL,
    pid      INTEGER,
    host     TEXT,
    pstart   TEXT,
    lease    TEXT,
    beat     REAL
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
CREATE TABLE IF NOT EXISTS counterfactuals (
    trajectory_id TEXT NOT NULL,
    harness_id    TEXT NOT NULL,
    value         TEXT NOT NULL,
    created       REAL NOT NULL,
    PRIMARY KEY (trajectory_id, harness_id)
);
CREATE TABLE IF NOT EXISTS rollouts (
    run_id   TEXT NOT NULL REFERENCES runs(run_id),
    key      TEXT NOT NULL,
    batch    INTEGER NOT NULL REFERENCES trajectory_batches(seq),
    idx      INTEGER NOT NULL,
    cost_usd REAL NOT NULL,
    PRIMARY KEY (run_id, key)
);
"""


def _create_statement(table: str) -> str:
    start = _SCHEMA.index(f"CREATE TABLE IF NOT EXISTS {table} (")
    return _SCHEMA[start : _SCHEMA.index(");", start) + 2]


_COUNTERFACTUALS_TABLE = _create_statement("counterfactuals")  # what migrations create
_ROLLOUTS_TABLE = _create_statement("rollouts")
_TABLES_V2 = frozenset({"meta", "harnesses", "aliases", "runs", "trajectory_batches", "events", "adapters"})
_TABLES_V3 = _TABLES_V2 | {"counterfactuals"}  # schema 3 added the counterfactual cache
_TABLES = _TABLES_V3 | {"rollouts"}  # schema 4 added the rollout index
_KEYS_PER_QUERY = 400  # sqlite's bound parameters per statement stay well under its limit
# Folders the project keeps inside a store (`coevolve models make-tiny .coevolve/models/tiny`, adapters,
# datasets, training checkpoints). A directory without store.db that holds only these is a fresh store,
# not a stranger's folder: it is initialised like an empty one.
STORE_SUBFOLDERS = ("models", "adapters", "datasets", "train_runs")
# columns schema 2 added to `runs` (a schema-1 store is migrated when opened writable)
_RUN_V2_COLUMNS = (
    ("updated", "REAL"),
    ("pid", "INTEGER"),
    ("host", "TEXT"),
    ("pstart", "TEXT"),
    ("lease", "TEXT"),
    ("beat", "REAL"),
)


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
    updated: float | None = None  # last change to the run, its events or its trajectories
    pid: int | None = None  # the process that created or last claimed the run
    host: str | None = None
    owner_start: str | None = None  # that process's start time (tells a reused pid apart)
    claimed: bool = False  # a `Lease` is held on the run
    beat: float | None = None  # the lease's last heartbeat

    def owner_alive(self) -> bool | None:
        """Is the owning process alive? None when it runs on another host and holds no lease."""
        return _owner_alive(self.pid, self.host, self.owner_start, self.claimed, self.beat)


@dataclass(frozen=True)
class Event:
    seq: int
    run_id: str
    kind: str
    payload: dict[str, Any]
    created: float


@dataclass(frozen=True)
class Problem:
    """One thing `check()` found wrong; `repaired` when `check(repair=True)` fixed it."""

    kind: str  # one of PROBLEM_KINDS
    subject: str  # the object digest, harness id, alias, run id ... it is about
    detail: str
    repaired: bool = False


PROBLEM_KINDS: dict[str, str] = {
    "db_integrity": "sqlite's integrity check failed",
    "missing_object": "a referenced object file is absent",
    "corrupt_object": "an object's bytes do not hash to its name (repair moves it to quarantine/)",
    "bad_harness": "a harness blob or edit does not decode to the record's harness",
    "bad_lineage": "a parent is missing, of another family, or the lineage has a cycle",
    "bad_alias": "an alias points at a missing harness",
    "bad_batch": "a trajectory batch does not decode, has the wrong count, or its run is missing",
    "bad_rollout_index": "the rollout index misses a stored rollout (repair adds it) or names one that is not there",
    "orphan_event": "events of a run that does not exist",
    "bad_adapter": "an adapter record does not decode to an adapter of its id",
    "missing_adapter": "an adapter's files (adapter_config.json or synthetic_adapter.json) are absent",
    "stale_run": "a run left `running` (or claimed) by a process that is gone (repair: `interrupted`)",
    "temp_file": "a temp object file left by a killed writer (repair deletes it)",
}


@dataclass(frozen=True)
class CheckReport:
    root: str
    checked: dict[str, int]
    problems: tuple[Problem, ...]

    @property
    def remaining(self) -> list[Problem]:
        return [p for p in self.problems if not p.repaired]

    @property
    def ok(self) -> bool:
        return not self.remaining

    def by_kind(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for p in self.problems:
            k = out.setdefault(p.kind, {"found": 0, "repaired": 0})
            k["found"] += 1
            k["repaired"] += p.repaired
        return out

    def as_json(self) -> dict[str, Any]:
        return {
            "store": self.root,
            "ok": self.ok,
            "checked": self.checked,
            "by_kind": self.by_kind(),
            "remaining": len(self.remaining),
            "problems": [dataclasses.asdict(p) for p in self.problems],
        }


class Lease:
    """One process's claim on a run (`HarnessStore.claim_run`); `release()` or leave the `with` block.

    While held, a daemon thread renews the lease every `LEASE_BEAT_S` so that a host that cannot see
    the owner's pid can still tell a live owner from an abandoned lease. Releasing a run still marked
    `running` marks it `interrupted` (nobody runs it any more)."""

    def __init__(self, store: HarnessStore, run_id: str, token: str, heartbeat_s: float | None) -> None:
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
        self.read_only: str | None = None  # why the store is read-only, None when writable
        self._uri: str | None = None  # read-only connections open this URI
        self._v1 = False  # a schema-1 store opened read-only (not migrated): runs have no owner columns
        self._no_counterfactuals = False  # a schema-1/2 store opened read-only: no counterfactual cache
        self._no_rollout_index = False  # a schema-1..3 store opened read-only: rollouts read from batches
        self._open()

    # -- opening -------------------------------------------------------------------------------
    def _open(self) -> None:
        root, create = self.root, self._create
        db_exists = False
        if root.exists() or root.is_symlink():
            if not root.is_dir():
                raise StoreError(f"store path {str(root)!r} exists and is not a directory")
            if not os.access(root, os.R_OK | os.X_OK):
                raise StoreError(f"store directory {str(root)!r} is not readable")
            try:
                entries = {p.name for p in root.iterdir()}
            except OSError as e:
                raise StoreError(f"cannot list store directory {str(root)!r}: {e.strerror}") from None
            db_exists = DB_NAME in entries
            if not db_exists:
                own = _own_subfolders(root, entries)
                if entries and own is None:
                    raise StoreError(f"{str(root)!r} is not a harness store (no {DB_NAME}) and is not empty")
                if not create:
                    what = f"holds only {', '.join(own)}" if own else "empty directory"
                    raise StoreError(f"no harness store at {str(root)!r} ({what}, create=False)")
                if not os.access(root, os.W_OK):
                    raise StoreError(
                        f"cannot create a harness store in {str(root)!r}: the directory is read-only"
                    )
            elif not self.db_path.is_file():
                raise StoreError(f"{str(self.db_path)!r} is not a file")
            elif not os.access(self.db_path, os.R_OK):
                raise StoreError(f"store database {str(self.db_path)!r} is not readable")
        else:
            if not create:
                raise StoreError(f"no harness store at {str(root)!r} (create=False)")
            try:
                root.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise StoreError(f"cannot create store directory {str(root)!r}: {e.strerror}") from None
        if (self.objects.exists() or self.objects.is_symlink()) and not self.objects.is_dir():
            raise StoreError(
                f"{str(self.objects)!r} is not a directory (a harness store keeps its objects there)"
            )
        if db_exists:
            self.read_only = self._why_read_only()
            if self.read_only is not None:
                self._open_read_only()
                return

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
        try:
            self.objects.mkdir(exist_ok=True)
        except OSError as e:
            conn.close()
            self._conn = None
            raise StoreError(f"cannot create {str(self.objects)!r}: {e.strerror or e}") from None

    def _why_read_only(self) -> str | None:
        if not os.access(self.root, os.W_OK):
            return f"directory {str(self.root)!r} is not writable"
        if not os.access(self.db_path, os.W_OK):
            return f"{str(self.db_path)!r} is not writable"
        if self.objects.is_dir() and not os.access(self.objects, os.W_OK | os.X_OK):
            return f"{str(self.objects)!r} is not writable"
        return None

    def _open_read_only(self) -> None:
        """sqlite needs to create `store.db-shm` to read a WAL database; where it cannot, the database
        is read as immutable, which is exact as long as no write-ahead log holds unmerged commits."""
        base = self.db_path.resolve().as_uri() + "?mode=ro"
        self._uri = base
        conn: sqlite3.Connection | None = None
        try:
            conn = self._connect()
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except (StoreError, sqlite3.DatabaseError):
            if conn is not None:
                conn.close()
            wal = self.db_path.with_name(DB_NAME + "-wal")
            if wal.exists() and wal.stat().st_size > 0:
                raise StoreError(
                    f"store {str(self.root)!r} is read-only ({self.read_only}) and its write-ahead log"
                    " holds unmerged commits: open it once with write access"
                ) from None
            self._uri = base + "&immutable=1"
            conn = self._connect()
        try:
            self._check_schema(conn, create=False)
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    def _connect(self) -> sqlite3.Connection:
        target: str | Path = self._uri or self.db_path
        try:
            conn = sqlite3.connect(
                target,
                timeout=BUSY_TIMEOUT_MS / 1000,
                isolation_level=None,
                check_same_thread=False,
                uri=self._uri is not None,
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
            if version not in (1, 2, 3, SCHEMA_VERSION):
                raise StoreError(
                    f"{str(self.db_path)!r} has schema version {version}; this code reads {SCHEMA_VERSION}"
                )
            missing = {4: _TABLES, 3: _TABLES_V3}.get(version, _TABLES_V2) - tables
            if missing:
                raise StoreError(f"{str(self.db_path)!r} lacks tables {sorted(missing)}")
            if version < SCHEMA_VERSION:
                if self.read_only is not None:
                    self._v1 = version == 1
                    self._no_counterfactuals = version < 3
                    self._no_rollout_index = True
                else:
                    self._transact(conn, lambda c: _migrate(c, self._batch_keys))
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{str(self.db_path)!r} is not a readable harness store: {e}") from None

    def _init_schema(self, conn: sqlite3.Connection) -> None:
        def init(c: sqlite3.Connection) -> None:
            for stmt in _SCHEMA.split(";"):
                if stmt.strip():
                    c.execute(stmt)
            c.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('schema', ?)", (str(SCHEMA_VERSION),))

        self._transact(conn, init)

    def _require_writable(self, what: str = "write") -> None:
        if self.read_only is not None:
            raise StoreError(f"cannot {what}: store {str(self.root)!r} is read-only ({self.read_only})")

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
        self._require_writable()
        with self._lock, _sqlite_errors():
            return self._transact(self._connection(), fn)

    def _snapshot(self, queries: Sequence[str]) -> list[list[sqlite3.Row]]:
        """Run several reads in one read transaction: one consistent view of the database."""

        def attempt() -> list[list[sqlite3.Row]]:
            conn.execute("BEGIN")
            try:
                return [conn.execute(q).fetchall() for q in queries]
            finally:
                conn.execute("COMMIT")

        with self._lock, _sqlite_errors():
            conn = self._connection()
            return self._retry(attempt)

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
        """Store bytes under their sha256; an existing file is kept only when it holds these very
        bytes (a corrupt one is rewritten). Written to a temp file, fsynced, renamed into place."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise StoreError(f"put_blob takes bytes, not {type(data).__name__}")
        data = bytes(data)
        digest = hashlib.sha256(data).hexdigest()
        path = self._object_path(digest)
        if _holds(path, data):
            return digest
        self._require_writable(f"write object {digest[:12]}")
        parent = path.parent
        tmp = parent / f".tmp-{digest[:12]}-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            if not parent.is_dir():
                parent.mkdir(parents=True, exist_ok=True)
                _fsync_dir(parent.parent)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            _fsync_dir(parent)
        except OSError as e:
            with suppress(OSError):
                tmp.unlink(missing_ok=True)
            raise StoreError(
                f"cannot write object {digest[:12]} under {str(parent)!r}: {e.strerror or e}"
            ) from None
        return digest

    def get_blob(self, digest: str) -> bytes:
        path = self._object_path(digest)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise StoreError(f"no object {digest}") from None
        except OSError as e:
            raise StoreError(f"cannot read object {digest}: {e.strerror or e}") from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise StoreError(
                f"object {digest} is corrupt (its content does not match its name): {path};"
                " putting the same value again rewrites it (coevolve store check lists all)"
            )
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
        """Open a run record (status `running`, owned by this process); the id is
        `<kind>-<UTC yyyymmdd-hhmmss>-<6 hex>`."""
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
        if kind is not None:
            sql += " AND kind = ?"
            params.append(kind)
        if status is not None:
            sql += " AND status = ?"
            params.append(status)
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

    # -- trajectories --------------------------------------------------------------------------
    def put_trajectories(self, run_id: str, trajectories: Sequence[Trajectory], batch: str = "main") -> str:
        """Store one batch as one blob, and index its rollouts (key, position, cost) in the same
        transaction that records the batch: the run's spend and rollout cache never lag its stored
        work. A key the run already stored keeps its first rollout. Re-putting identical content is a
        no-op; a batch name is never overwritten with different content."""
        if not isinstance(batch, str) or not batch:
            raise StoreError("batch name must be a non-empty string")
        trajs = tuple(trajectories)
        for t in trajs:
            if not isinstance(t, Trajectory):
                raise StoreError(f"put_trajectories takes Trajectory values, not {type(t).__name__}")
        self._require_run(run_id)
        digest = self.put_value(trajs)
        index = _index_rows(trajs)

        def insert(c: sqlite3.Connection) -> str | None:
            row = c.execute(
                "SELECT blob FROM trajectory_batches WHERE run_id = ? AND batch = ?", (run_id, batch)
            ).fetchone()
            if row is not None:
                return str(row[0])
            now = time.time()
            cur = c.execute(
                "INSERT INTO trajectory_batches(run_id, batch, blob, count, created) VALUES (?, ?, ?, ?, ?)",
                (run_id, batch, digest, len(trajs), now),
            )
            c.executemany(
                "INSERT OR IGNORE INTO rollouts(run_id, key, batch, idx, cost_usd) VALUES (?, ?, ?, ?, ?)",
                [(run_id, key, cur.lastrowid, i, cost) for key, i, cost in index],
            )
            c.execute("UPDATE runs SET updated = ? WHERE run_id = ?", (now, run_id))
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
            out.extend(self._batch(digest))
        return out

    def stored_rollouts(self, run_ids: Sequence[str], keys: Sequence[str]) -> dict[str, Trajectory]:
        """The rollouts among `keys` (`rollout_key`) that runs `run_ids` stored, by key (where several
        of those runs hold a key, the first run named wins). Reads each batch that holds one once."""
        wanted = set(keys)
        runs = list(dict.fromkeys(run_ids))
        if not wanted or not runs:
            return {}
        if self._no_rollout_index:
            out: dict[str, Trajectory] = {}
            for rid in runs:
                for key, t in self._scan_rollouts(rid):
                    if key in wanted:
                        out.setdefault(key, t)
            return out
        rank = {rid: i for i, rid in enumerate(runs)}
        found: dict[str, tuple[int, str, int]] = {}  # key -> (run rank, blob, position)
        ordered = sorted(wanted)
        for i in range(0, len(ordered), _KEYS_PER_QUERY):
            chunk = ordered[i : i + _KEYS_PER_QUERY]
            rows = self._read(
                "SELECT r.run_id, r.key, b.blob, r.idx FROM rollouts r JOIN trajectory_batches b ON b.seq = r.batch"
                f" WHERE r.run_id IN ({', '.join('?' * len(runs))}) AND r.key IN ({', '.join('?' * len(chunk))})",
                [*runs, *chunk],
            )
            for rid, key, blob, idx in rows:
                place = (rank[rid], str(blob), int(idx))
                if key not in found or place < found[key]:
                    found[str(key)] = place
        batches: dict[str, list[Trajectory]] = {}
        out = {}
        for key, (_, blob, idx) in found.items():
            if blob not in batches:
                batches[blob] = self._batch(blob)
            if idx >= len(batches[blob]):
                raise StoreError(
                    f"the rollout index points past the end of batch {blob[:12]} (coevolve store check)"
                )
            out[key] = batches[blob][idx]
        return out

    def rollout_spend(self, run_ids: Sequence[str]) -> tuple[int, float]:
        """(rollouts, dollars) the runs `run_ids` stored: distinct rollouts per run, as the index holds
        them (the spend journal: a rollout counts once it is stored, never twice)."""
        runs = list(dict.fromkeys(run_ids))
        if not runs:
            return 0, 0.0
        if self._no_rollout_index:
            n, usd = 0, 0.0
            for rid in runs:
                seen = {key: t.cost_usd for key, t in self._scan_rollouts(rid)}
                n, usd = n + len(seen), usd + sum(seen.values())
            return n, usd
        rows = self._read(
            f"SELECT count(*), total(cost_usd) FROM rollouts WHERE run_id IN ({', '.join('?' * len(runs))})",
            runs,
        )
        return int(rows[0][0]), float(rows[0][1])

    def _batch(self, digest: str) -> list[Trajectory]:
        value = self.get_value(digest)
        if not isinstance(value, list) or not all(isinstance(t, Trajectory) for t in value):
            raise StoreError(f"object {digest[:12]} is not a trajectory batch")
        return value

    def _scan_rollouts(self, run_id: str) -> Iterator[tuple[str, Trajectory]]:
        """(key, rollout) of every stored rollout of a run, first stored first (a store without the index)."""
        for _, digest, _ in self.trajectory_batches(run_id):
            for t in self._batch(digest):
                yield trajectory_key(t), t

    def _batch_keys(self, digest: str) -> list[tuple[str, int, float]] | None:
        """The index rows of a stored batch (the schema-4 migration indexes old batches), or None when its
        object is missing or unreadable (`store check` names it)."""
        try:
            return _index_rows(self._batch(digest))
        except StoreError:
            return None

    # -- events --------------------------------------------------------------------------------
    def append_event(self, run_id: str, kind: str, payload: dict[str, Any]) -> int:
        """Append to the journal; the returned seq grows monotonically across the whole store."""
        if not isinstance(kind, str) or not kind:
            raise StoreError("event kind must be a non-empty string")
        payload_json = _dumps(payload, "payload")

        def insert(c: sqlite3.Connection) -> int:
            if c.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone() is None:
                raise StoreError(f"unknown run {run_id!r}")
            now = time.time()
            cur = c.execute(
                "INSERT INTO events(run_id, kind, payload, created) VALUES (?, ?, ?, ?)",
                (run_id, kind, payload_json, now),
            )
            c.execute("UPDATE runs SET updated = ? WHERE run_id = ?", (now, run_id))
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

    # -- counterfactual cache ------------------------------------------------------------------
    def get_counterfactuals(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], dict[str, Any]]:
        """The cached counterfactual answer keys among `keys` ((trajectory id, harness id) pairs): the
        ones present, by key (a store too old to hold the cache, opened read-only, has none)."""
        wanted = set(keys)
        if not wanted or self._no_counterfactuals:
            return {}
        ids = sorted({tid for tid, _ in wanted})
        out: dict[tuple[str, str], dict[str, Any]] = {}
        for i in range(0, len(ids), _KEYS_PER_QUERY):
            chunk = ids[i : i + _KEYS_PER_QUERY]
            rows = self._read(
                "SELECT trajectory_id, harness_id, value FROM counterfactuals"
                f" WHERE trajectory_id IN ({', '.join('?' * len(chunk))})",
                chunk,
            )
            for tid, hid, value in rows:
                if (tid, hid) in wanted:
                    out[(str(tid), str(hid))] = json.loads(value)
        return out

    def put_counterfactuals(self, values: dict[tuple[str, str], dict[str, Any]]) -> None:
        """Cache counterfactual answer keys by (trajectory id, harness id), in one transaction; putting
        a key again replaces its value."""
        rows = []
        for key, value in values.items():
            if not (isinstance(key, tuple) and len(key) == 2 and all(isinstance(k, str) and k for k in key)):
                raise StoreError(f"a counterfactual is keyed by (trajectory id, harness id), not {key!r}")
            if not isinstance(value, dict):
                raise StoreError(f"a counterfactual is a dict, not {type(value).__name__}")
            rows.append((key[0], key[1], _dumps(value, "counterfactual")))
        if not rows:
            return
        self._require_writable("cache counterfactuals")

        def insert(c: sqlite3.Connection) -> None:
            now = time.time()
            c.executemany(
                "INSERT INTO counterfactuals(trajectory_id, harness_id, value, created) VALUES (?, ?, ?, ?)"
                " ON CONFLICT(trajectory_id, harness_id) DO UPDATE SET value = excluded.value",
                [(*r, now) for r in rows],
            )

        self._write(insert)

    # -- maintenance ---------------------------------------------------------------------------
    def integrity_check(self) -> str:
        """sqlite's `PRAGMA integrity_check` ('ok' when the database is sound)."""
        rows = self._read("PRAGMA integrity_check")
        return "; ".join(str(r[0]) for r in rows)

    def check(self, *, repair: bool = False) -> CheckReport:
        """Verify the whole store (kinds of problem: `PROBLEM_KINDS`): sqlite's integrity; every object
        file hashes to its name; every referenced object is present; harness blobs decode to their
        record's harness; lineage edges point at an existing parent of the same family, without
        cycles; aliases, trajectory batches, events and adapters (with their files) are sound; no run
        is left `running` or claimed by a process that is gone; no temp file of a killed writer is left.

        `repair=True` marks stale runs `interrupted`, deletes leftover temp files and moves corrupt
        objects to `quarantine/` (a referenced one stays a problem: its content is lost until the same
        value is put again). Reads one consistent snapshot, so it is safe beside running writers."""
        if repair:
            self._require_writable("repair")
        problems: list[Problem] = []
        checked: dict[str, int] = {}

        def problem(kind: str, subject: str, detail: str, repaired: bool = False) -> None:
            problems.append(Problem(kind, subject, detail, repaired))

        integrity = self.integrity_check()
        if integrity != "ok":
            problem("db_integrity", DB_NAME, integrity[:500])
        harnesses, aliases, batches, adapters, runs, events, orphans, index = self._snapshot(
            [
                "SELECT id, family, blob, parent, edit FROM harnesses ORDER BY created, rowid",
                "SELECT name, harness_id FROM aliases ORDER BY name",
                "SELECT seq, run_id, batch, blob, count FROM trajectory_batches ORDER BY seq",
                "SELECT id, value FROM adapters ORDER BY created, rowid",
                "SELECT run_id, status, NULL, NULL, NULL, 0, NULL FROM runs"
                if self._v1
                else "SELECT run_id, status, pid, host, pstart, lease IS NOT NULL, beat FROM runs ORDER BY created, rowid",
                "SELECT count(*) FROM events",
                "SELECT run_id, count(*) FROM events WHERE run_id NOT IN (SELECT run_id FROM runs) GROUP BY run_id",
                "SELECT 1 WHERE 0"
                if self._no_rollout_index
                else "SELECT r.run_id, r.key, r.batch, r.idx, b.run_id FROM rollouts r"
                " LEFT JOIN trajectory_batches b ON b.seq = r.batch ORDER BY r.batch, r.idx",
            ]
        )

        # objects: referenced ones first (a row is committed only after its blob is written)
        referrers: dict[str, list[str]] = {}
        for hid, _, blob, _, _ in harnesses:
            referrers.setdefault(blob, []).append(f"harness {hid[:12]}")
        for _, rid, batch, blob, _ in batches:
            referrers.setdefault(blob, []).append(f"trajectory batch {rid}/{batch}")
        status: dict[str, str] = {}  # digest -> ok / missing / corrupt / unreadable
        for digest in referrers:
            status[digest] = self._verify_object(digest)
        quarantined: dict[str, str] = {}
        temp_files = 0
        if self.objects.is_dir():
            for sub in sorted(self.objects.iterdir()):
                if not sub.is_dir() or len(sub.name) != 2:
                    continue
                for f in sorted(sub.iterdir()):
                    if f.name.startswith(".tmp-"):
                        temp_files += 1
                        if _leftover_tmp(f):
                            done = repair and _unlink(f)
                            problem(
                                "temp_file", f"{sub.name}/{f.name}", "left by a writer that is gone", done
                            )
                    elif _HEX64.fullmatch(f.name) and f.name.startswith(sub.name) and f.name not in status:
                        status[f.name] = self._verify_object(f.name)
        for digest, st in status.items():
            if st in ("corrupt", "unreadable") and repair:
                moved = self._quarantine(digest)
                if moved:
                    quarantined[digest] = moved
        for digest, st in status.items():
            refs = referrers.get(digest)
            where = f"of {', '.join(refs[:3])}{' ...' if len(refs) > 3 else ''}" if refs else "unreferenced"
            if st == "missing":
                problem("missing_object", digest, f"object {where} is absent")
            elif st in ("corrupt", "unreadable"):
                what = "does not hash to its name" if st == "corrupt" else "cannot be read"
                moved = quarantined.get(digest)
                note = f"; moved to {moved}" if moved else ""
                lost = "; its content is lost until the same value is put again" if refs and moved else ""
                problem(
                    "corrupt_object", digest, f"object {where} {what}{note}{lost}", bool(moved) and not refs
                )
        checked["objects"] = len(status)
        checked["temp_files"] = temp_files

        # harnesses and lineage
        family = {hid: fam for hid, fam, _, _, _ in harnesses}
        parent_of: dict[str, str | None] = {}
        for hid, fam, blob, parent, edit in harnesses:
            parent_of[hid] = parent
            if status.get(blob) == "ok":
                try:
                    h = decode(self.get_blob(blob))
                except (StoreError, CodecError, ValueError) as e:
                    problem("bad_harness", hid, f"blob {blob[:12]} does not decode: {e}")
                else:
                    if not isinstance(h, Harness):
                        problem("bad_harness", hid, f"blob {blob[:12]} holds a {type(h).__name__}")
                    elif h.id != hid or h.family != fam:
                        problem(
                            "bad_harness", hid, f"blob {blob[:12]} holds harness {h.id[:12]} of {h.family!r}"
                        )
            if edit is not None:
                try:
                    if not isinstance(decode(edit), HarnessEdit):
                        problem("bad_harness", hid, "its edit is not a HarnessEdit")
                except (CodecError, ValueError) as e:
                    problem("bad_harness", hid, f"its edit does not decode: {e}")
            if parent is not None:
                if parent not in family:
                    problem("bad_lineage", hid, f"parent {parent[:12]} does not exist")
                elif family[parent] != fam:
                    problem(
                        "bad_lineage", hid, f"parent {parent[:12]} is family {family[parent]!r}, not {fam!r}"
                    )
        done: set[str] = set()  # nodes known to reach a root
        for start in parent_of:
            path: list[str] = []
            on_path: set[str] = set()
            node: str | None = start
            while node is not None and node in parent_of and node not in done:
                if node in on_path:
                    cycle = path[path.index(node) :]
                    problem(
                        "bad_lineage",
                        node,
                        f"lineage cycle through {len(cycle)} harnesses: "
                        + " -> ".join(c[:12] for c in cycle),
                    )
                    break
                on_path.add(node)
                path.append(node)
                node = parent_of[node]
            done.update(path)
        checked["harnesses"] = len(harnesses)
        checked["lineage_edges"] = sum(p is not None for p in parent_of.values())

        for name, hid in aliases:
            if hid not in family:
                problem("bad_alias", name, f"points at missing harness {hid[:12]}")
        checked["aliases"] = len(aliases)

        # trajectory batches, the rollout index and events
        run_ids = {r[0] for r in runs}
        indexed: dict[int, dict[int, str]] = {}  # batch seq -> position -> key, as the index holds them
        for rid, key, seq, idx, batch_run in index:
            if batch_run is None:
                problem(
                    "bad_rollout_index", f"{rid}/{key[:12]}", f"points at batch {seq}, which does not exist"
                )
            elif batch_run != rid:
                problem(
                    "bad_rollout_index", f"{rid}/{key[:12]}", f"points at batch {seq} of run {batch_run!r}"
                )
            else:
                indexed.setdefault(int(seq), {})[int(idx)] = str(key)
        keyed: set[tuple[str, str]] = {(str(r[0]), str(r[1])) for r in index}
        unindexed: list[
            tuple[str, list[tuple[str, str, int, int, float]]]
        ] = []  # batch -> its missing index rows
        for seq, rid, batch, blob, count in batches:
            subject = f"{rid}/{batch}"
            if rid not in run_ids:
                problem("bad_batch", subject, f"run {rid!r} does not exist")
            if status.get(blob) != "ok":
                continue
            try:
                value = decode(self.get_blob(blob))
            except (StoreError, CodecError, ValueError) as e:
                problem("bad_batch", subject, f"blob {blob[:12]} does not decode: {e}")
                continue
            if not isinstance(value, list) or not all(isinstance(t, Trajectory) for t in value):
                problem("bad_batch", subject, f"blob {blob[:12]} is not a list of trajectories")
                continue
            if len(value) != count:
                problem("bad_batch", subject, f"holds {len(value)} trajectories, the record says {count}")
            if self._no_rollout_index or rid not in run_ids:
                continue
            for idx, key in indexed.get(seq, {}).items():
                if idx >= len(value) or trajectory_key(value[idx]) != key:
                    problem(
                        "bad_rollout_index",
                        f"{rid}/{key[:12]}",
                        f"names position {idx} of batch {batch!r}, which holds another rollout or none",
                    )
            missing = [
                (rid, key, seq, idx, cost) for key, idx, cost in _index_rows(value) if (rid, key) not in keyed
            ]
            if missing:
                keyed.update((rid, key) for _, key, _, _, _ in missing)
                unindexed.append((subject, missing))
        fixed = repair and bool(unindexed) and self._reindex([row for _, rows in unindexed for row in rows])
        for subject, rows in unindexed:
            problem("bad_rollout_index", subject, f"{len(rows)} stored rollouts are not in the index", fixed)
        checked["trajectory_batches"] = len(batches)
        checked["indexed_rollouts"] = len(index)
        checked["events"] = int(events[0][0])
        for rid, n in orphans:
            problem("orphan_event", rid, f"{n} events of a run that does not exist")

        # adapters and their files
        for aid, value in adapters:
            try:
                ref = decode(value)
            except (CodecError, ValueError) as e:
                problem("bad_adapter", aid, f"record does not decode: {e}")
                continue
            if not isinstance(ref, AdapterRef) or ref.id != aid:
                problem("bad_adapter", aid, f"record holds {type(ref).__name__} {getattr(ref, 'id', '')!r}")
                continue
            places = (
                [Path(ref.path).expanduser(), self.root / "adapters" / aid]
                if ref.path
                else [self.root / "adapters" / aid]
            )
            if not any((p / f).is_file() for p in places for f in _ADAPTER_FILES):
                problem(
                    "missing_adapter", aid, f"no {' or '.join(_ADAPTER_FILES)} in {ref.path or places[0]}"
                )
        checked["adapters"] = len(adapters)

        # runs whose owner is gone
        unknown = 0
        for rid, st, pid, host, pstart, leased, beat in runs:
            if st != "running" and not leased:
                continue
            alive = _owner_alive(pid, host, pstart, bool(leased), beat)
            if alive is None:
                unknown += 1
                continue
            if alive:
                continue
            owner = f"pid {pid} on {host}" if pid is not None else "an unrecorded process"
            fixed = repair and self._mark_interrupted(rid, pid, host, pstart)
            problem(
                "stale_run",
                rid,
                f"{st}{' and claimed' if leased else ''}, but its owner ({owner}) is gone",
                fixed,
            )
        checked["runs"] = len(runs)
        checked["runs_on_other_hosts"] = unknown
        return CheckReport(str(self.root), checked, tuple(problems))

    def _reindex(self, rows: list[tuple[str, str, int, int, float]]) -> bool:
        """Add index rows a check found missing (run, key, batch seq, position, cost)."""
        self._write(
            lambda c: c.executemany(
                "INSERT OR IGNORE INTO rollouts(run_id, key, batch, idx, cost_usd) VALUES (?, ?, ?, ?, ?)",
                rows,
            )
        )
        return True

    def _verify_object(self, digest: str) -> str:
        try:
            return "ok" if _file_sha256(self._object_path(digest)) == digest else "corrupt"
        except FileNotFoundError:
            return "missing"
        except OSError:
            return "unreadable"

    def _quarantine(self, digest: str) -> str | None:
        """Move a corrupt object aside (never delete evidence); the relative path, or None."""
        src = self._object_path(digest)
        qdir = self.root / QUARANTINE
        dest = qdir / f"{digest}.{int(time.time())}-{secrets.token_hex(2)}"
        try:
            qdir.mkdir(exist_ok=True)
            os.replace(src, dest)
        except OSError:
            return None
        return str(dest.relative_to(self.root))

    def _mark_interrupted(self, run_id: str, pid: int | None, host: str | None, pstart: str | None) -> bool:
        """Mark a stale run interrupted, unless its owner changed since it was seen (a new claim)."""

        def mark(c: sqlite3.Connection) -> bool:
            row = c.execute(
                "SELECT status, pid, host, pstart FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
            if row is None or tuple(row[1:]) != (pid, host, pstart):
                return False
            now = time.time()
            c.execute(
                "UPDATE runs SET status = CASE WHEN status = 'running' THEN 'interrupted' ELSE status END,"
                " lease = NULL, updated = ? WHERE run_id = ?",
                (now, run_id),
            )
            c.execute(
                "INSERT INTO events(run_id, kind, payload, created) VALUES (?, 'interrupted', ?, ?)",
                (
                    run_id,
                    json.dumps(
                        {"reason": "owner process gone", "pid": pid, "host": host, "was": row[0]},
                        sort_keys=True,
                    ),
                    now,
                ),
            )
            return True

        return self._write(mark)


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


def _migrate(c: sqlite3.Connection, batch_keys: Callable[[str], list[tuple[str, int, float]] | None]) -> None:
    """Bring an older schema to `SCHEMA_VERSION`, one step at a time (idempotent under concurrent
    openers: the version is read again inside the write transaction).
    1 -> 2: runs gain owner, lease and updated columns. 2 -> 3: the counterfactual cache table.
    3 -> 4: the rollout index, filled from every stored batch (`batch_keys` decodes one; a batch whose
    object is missing or corrupt stays unindexed, and `store check` names its object)."""
    row = c.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    if row is None or int(row[0]) >= SCHEMA_VERSION:
        return
    version = int(row[0])
    if version == 1:
        have = {r[1] for r in c.execute("PRAGMA table_info(runs)")}
        for name, typ in _RUN_V2_COLUMNS:
            if name not in have:
                c.execute(f"ALTER TABLE runs ADD COLUMN {name} {typ}")
        c.execute("UPDATE runs SET updated = COALESCE(finished, created) WHERE updated IS NULL")
    if version <= 2:
        c.execute(_COUNTERFACTUALS_TABLE)
    if version <= 3:
        c.execute(_ROLLOUTS_TABLE)
        for seq, run_id, blob in c.execute(
            "SELECT seq, run_id, blob FROM trajectory_batches ORDER BY seq"
        ).fetchall():
            rows = batch_keys(str(blob)) or []
            c.executemany(
                "INSERT OR IGNORE INTO rollouts(run_id, key, batch, idx, cost_usd) VALUES (?, ?, ?, ?, ?)",
                [(run_id, key, seq, i, cost) for key, i, cost in rows],
            )
    c.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (str(SCHEMA_VERSION),))


_ADAPTER_FILES = ("adapter_config.json", "synthetic_adapter.json")


def rollout_key(instance: TaskInstance, harness_id: str, model: str, seed: int) -> str:
    """What a rollout samples: the task instance (its content), the harness, the model ref and the seed.
    Within a run a key is stored once; a resumed run, or a re-run of an eval, reuses its rollout."""
    return content_id(("rollout", content_id(instance), harness_id, model, int(seed)))


def trajectory_key(t: Trajectory) -> str:
    return rollout_key(t.instance, t.harness_id, t.model, t.seed)


def _index_rows(trajs: Sequence[Trajectory]) -> list[tuple[str, int, float]]:
    """(key, position, cost) of each rollout of a batch, the first of a repeated key only."""
    rows, seen = [], set()
    for i, t in enumerate(trajs):
        key = trajectory_key(t)
        if key not in seen:
            seen.add(key)
            rows.append((key, i, float(t.cost_usd)))
    return rows


def is_fresh_store_dir(root: str | Path) -> bool:
    """Would `HarnessStore(root)` initialise a new store here? True when `root` is absent, an empty
    directory, or a directory holding only the project's own subfolders (no store.db yet). Callers
    that validate before writing use it to tell "no store yet" from "a store to open"."""
    root = Path(root).expanduser()
    if not (root.exists() or root.is_symlink()):
        return True
    try:
        entries = {p.name for p in root.iterdir()} if root.is_dir() else None
    except OSError:
        return False
    return entries is not None and DB_NAME not in entries and _own_subfolders(root, entries) is not None


def _own_subfolders(root: Path, entries: set[str]) -> list[str] | None:
    """The entries as `name/` when every one is a directory (or a link to one, e.g. models/ on a big
    disk) named in `STORE_SUBFOLDERS`: a fresh store the project has started to fill. Else None."""
    if not entries <= set(STORE_SUBFOLDERS):
        return None
    if not all((root / name).is_dir() for name in entries):
        return None
    return [f"{name}/" for name in sorted(entries)]


def _leftover_tmp(path: Path) -> bool:
    """A temp object file (`.tmp-<digest12>-<pid>-<hex>`) whose writer is gone, or that is very old."""
    try:
        age = time.time() - path.stat().st_mtime
    except OSError:
        return False
    parts = path.name.split("-")
    writer_gone = len(parts) >= 4 and parts[2].isdigit() and not _pid_alive(int(parts[2]))
    return writer_gone or age > TMP_MAX_AGE_S


def _unlink(path: Path) -> bool:
    try:
        path.unlink()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def _holds(path: Path, data: bytes) -> bool:
    """Does the file at `path` hold exactly `data`? (False when absent, unreadable or different.)"""
    try:
        if path.stat().st_size != len(data):
            return False
        return path.read_bytes() == data
    except OSError:
        return False


def _fsync_dir(path: Path) -> None:
    """Make a rename or a new entry in `path` durable (best effort: not every platform allows it)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _file_sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


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
