"""Adapter records and the counterfactual cache of a store.

The counterfactual cache holds the testbed's counterfactual answer key of a failed synthetic
rollout (deviations, decisive turn), keyed by trajectory id and harness id: analysis code computes it
lazily (`coevolve.testbed.counterfactual`) and keeps it here, so it is computed once per trajectory.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from typing import Any

from coevolve.codec import CodecError, decode, encode
from coevolve.store.db import _KEYS_PER_QUERY, Database, StoreError, _dumps
from coevolve.values import AdapterRef


class Adapters(Database):
    """The adapter and counterfactual-cache part of `HarnessStore`."""

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
