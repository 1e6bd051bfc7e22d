"""The event journal of a store: per-run events whose seq grows across the whole store."""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from typing import Any

from coevolve.store.db import Database, StoreError, _dumps


@dataclass(frozen=True)
class Event:
    seq: int
    run_id: str
    kind: str
    payload: dict[str, Any]
    created: float


class Events(Database):
    """The event part of `HarnessStore`."""

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
