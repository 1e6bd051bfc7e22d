"""Trajectory batches of a store and their rollout index.

Every stored trajectory batch indexes its rollouts, in the transaction that stores it: one row per
rollout key (`rollout_key`: the instance, harness, model and seed it samples) and run, naming the
batch and position that hold it and its cost. The index is the run's spend journal (`rollout_spend`)
and its rollout cache (`stored_rollouts`).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator, Sequence

from coevolve.codec import content_id
from coevolve.store.blobs import Blobs
from coevolve.store.db import _KEYS_PER_QUERY, BatchKeys, StoreError
from coevolve.store.runs import Runs
from coevolve.values import TaskInstance, Trajectory


class Trajectories(Runs, Blobs):
    """The trajectory part of `HarnessStore`: batches, the rollout index, spend and the rollout cache."""

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

    def _batch_keys(self, digest: str) -> BatchKeys | None:
        """The index rows of a stored batch (the schema-4 migration indexes old batches), or None when its
        object is missing or unreadable (`store check` names it)."""
        try:
            return _index_rows(self._batch(digest))
        except StoreError:
            return None


def rollout_key(instance: TaskInstance, harness_id: str, model: str, seed: int) -> str:
    """What a rollout samples: the task instance (its content), the harness, the model ref and the seed.
    Within a run a key is stored once; a resumed run, or a re-run of an eval, reuses its rollout."""
    return content_id(("rollout", content_id(instance), harness_id, model, int(seed)))


def trajectory_key(t: Trajectory) -> str:
    return rollout_key(t.instance, t.harness_id, t.model, t.seed)


def _index_rows(trajs: Sequence[Trajectory]) -> BatchKeys:
    """(key, position, cost) of each rollout of a batch, the first of a repeated key only."""
    rows, seen = [], set()
    for i, t in enumerate(trajs):
        key = trajectory_key(t)
        if key not in seen:
            seen.add(key)
            rows.append((key, i, float(t.cost_usd)))
    return rows
