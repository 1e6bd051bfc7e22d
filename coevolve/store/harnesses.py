"""Harness records of a store: the harness value as a blob, its record (family, parent, edit,
rationale, run, validation gain) in the database, lineage and global aliases.

Harness ids are `Harness.id` (sha256 of the canonical encoding); the blob that stores a harness is
named by the sha256 of its plain encoding, which keeps dict insertion order (tool schemas) intact.
A harness record's `parent`, `edit` and `rationale` live here, never in the value.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from coevolve.codec import CodecError, decode, encode
from coevolve.store.blobs import _HEX64, Blobs
from coevolve.store.db import StoreError
from coevolve.values import Harness, HarnessEdit

MIN_PREFIX = 6
_HEX = re.compile(r"[0-9a-f]+")
_ALIAS = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/@+-]*")


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


class Harnesses(Blobs):
    """The harness part of `HarnessStore`: records, lineage and aliases."""

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
