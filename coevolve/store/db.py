"""The store's sqlite database: opening (read-only where it must), the schema and its migrations,
short `BEGIN IMMEDIATE` transactions retried while the database is locked, and consistent reads.

`Database` is the base every part of `HarnessStore` stands on (coevolve.store.store): one connection
per process (a forked child opens its own), guarded by one lock.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self, TypeVar

from coevolve.errors import BadInput

SCHEMA_VERSION = 4  # 2: runs record their owner (pid, host), updated time and lease; 3: counterfactual cache;
# 4: the rollout index (spend journal and rollout cache)
DB_NAME = "store.db"
OBJECTS = "objects"
QUARANTINE = "quarantine"
BUSY_TIMEOUT_MS = 30_000
WRITE_DEADLINE_S = 120.0
NO_STORE_HINT = "a command that runs something (coevolve eval, evolve, run) creates one; --store names another"

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


class StoreError(BadInput):
    """The store cannot do what was asked; the message is one line that says why."""


BatchKeys = list[tuple[str, int, float]]  # a batch's rollout index rows: (key, position, cost)


class Database:
    """The connection, schema and transactions of a store directory (module docstring)."""

    # The index rows of a stored batch, or None when its object is missing or unreadable: the schema-4
    # migration indexes old batches with it (the trajectory part, `Trajectories._batch_keys`, supplies it).
    _batch_keys: Callable[[str], BatchKeys | None]

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
                    what = f"holds only {', '.join(own)}" if own else "an empty directory"
                    raise StoreError(f"no harness store at {str(root)!r} ({what}; {NO_STORE_HINT})")
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
                raise StoreError(f"no harness store at {str(root)!r} (no such directory; {NO_STORE_HINT})")
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
                    raise StoreError(f"{str(self.db_path)!r} holds no harness store (an empty database; {NO_STORE_HINT})")
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

    def integrity_check(self) -> str:
        """sqlite's `PRAGMA integrity_check` ('ok' when the database is sound)."""
        return "; ".join(str(r[0]) for r in self._read("PRAGMA integrity_check"))


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


def _migrate(c: sqlite3.Connection, batch_keys: Callable[[str], BatchKeys | None]) -> None:
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
        c.execute(_create_statement("counterfactuals"))
    if version <= 3:
        c.execute(_create_statement("rollouts"))
        for seq, run_id, blob in c.execute(
            "SELECT seq, run_id, blob FROM trajectory_batches ORDER BY seq"
        ).fetchall():
            rows = batch_keys(str(blob)) or []
            c.executemany(
                "INSERT OR IGNORE INTO rollouts(run_id, key, batch, idx, cost_usd) VALUES (?, ?, ?, ?, ?)",
                [(run_id, key, seq, i, cost) for key, i, cost in rows],
            )
    c.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (str(SCHEMA_VERSION),))


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
    if entries <= set(STORE_SUBFOLDERS) and all((root / name).is_dir() for name in entries):
        return [f"{name}/" for name in sorted(entries)]
    return None
