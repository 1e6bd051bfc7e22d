"""`check()`: verify a whole store and repair what can be repaired (`coevolve store check`).

Kinds of problem are `PROBLEM_KINDS`; a check reads one consistent snapshot, so it is safe beside
running writers.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coevolve.codec import CodecError, decode
from coevolve.store.blobs import _HEX64, Blobs, _file_sha256
from coevolve.store.db import DB_NAME, QUARANTINE, StoreError
from coevolve.store.runs import _owner_alive, _pid_alive
from coevolve.store.trajectories import _index_rows, trajectory_key
from coevolve.values import AdapterRef, Harness, HarnessEdit, Trajectory

TMP_MAX_AGE_S = 3600.0  # a temp object file this old is left over even if its writer's pid is alive
_ADAPTER_FILES = ("adapter_config.json", "synthetic_adapter.json")


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


class Checks(Blobs):
    """The check part of `HarnessStore`."""

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
        status = {digest: self._verify_object(digest) for digest in referrers}  # ok/missing/corrupt/unreadable
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
            refs = referrers.get(digest)
            where = f"of {', '.join(refs[:3])}{' ...' if len(refs) > 3 else ''}" if refs else "unreferenced"
            if st == "missing":
                problem("missing_object", digest, f"object {where} is absent")
            elif st in ("corrupt", "unreadable"):
                what = "does not hash to its name" if st == "corrupt" else "cannot be read"
                moved = self._quarantine(digest) if repair else None
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
        if repair and unindexed:  # add the missing index rows
            self._write(lambda c: c.executemany(
                "INSERT OR IGNORE INTO rollouts(run_id, key, batch, idx, cost_usd) VALUES (?, ?, ?, ?, ?)",
                [row for _, rows in unindexed for row in rows],
            ))
        for subject, rows in unindexed:
            problem("bad_rollout_index", subject, f"{len(rows)} stored rollouts are not in the index", repair)
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
            places = [Path(ref.path).expanduser()] if ref.path else []
            places.append(self.root / "adapters" / aid)
            if not any((p / f).is_file() for p in places for f in _ADAPTER_FILES):
                problem(
                    "missing_adapter", aid, f"no {' or '.join(_ADAPTER_FILES)} in {ref.path or places[-1]}"
                )
        checked["adapters"] = len(adapters)

        # runs whose owner is gone
        unknown = 0
        for rid, st, pid, host, pstart, leased, beat in runs:
            if st != "running" and not leased:
                continue
            alive = _owner_alive(pid, host, pstart, bool(leased), beat)
            unknown += alive is None
            if alive is None or alive:
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
        path.unlink(missing_ok=True)
    except OSError:
        return False
    return True
