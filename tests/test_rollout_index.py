"""The store's rollout index (schema 4): every stored batch indexes its rollouts by key in the
transaction that stores it; a run's spend is its distinct stored rollouts; a schema-3 store is
indexed when opened; `store check` finds an index that lost or misnames rollouts, and repair adds
the missing rows."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

import pytest

from coevolve.store.store import SCHEMA_VERSION, HarnessStore, StoreError, rollout_key, trajectory_key
from tests.test_store import BASE, trajectory


def costly(i: int, usd: float = 0.25):
    return dataclasses.replace(trajectory(i), cost_usd=usd)


def kinds(report) -> dict[str, int]:
    out: dict[str, int] = {}
    for p in report.problems:
        out[p.kind] = out.get(p.kind, 0) + 1
    return out


def sql(root: Path, *stmts: str) -> None:
    with sqlite3.connect(root / "store.db") as c:
        c.execute("PRAGMA foreign_keys = OFF")
        for stmt in stmts:
            c.execute(stmt)
    c.close()


def test_spend_counts_each_stored_rollout_once_and_the_cache_returns_the_first_stored(store: HarnessStore):
    store.put_harness(BASE)
    rid, other = store.create_run("evolve", {}), store.create_run("eval", {})
    assert store.rollout_spend([rid]) == (0, 0.0)
    store.put_trajectories(rid, [costly(0), costly(1)], batch="a")
    again = dataclasses.replace(costly(1), error_detail="a second sample of the same key")
    store.put_trajectories(rid, [again, costly(2)], batch="b")
    store.put_trajectories(other, [again], batch="c")
    assert store.rollout_spend([rid]) == (3, 0.75)  # key 1 counts once
    assert store.rollout_spend([rid, other]) == (4, 1.0)  # per run
    assert store.rollout_spend([rid, rid]) == (3, 0.75)
    keys = [trajectory_key(costly(i)) for i in (0, 1, 2, 7)]
    got = store.stored_rollouts([rid], keys)
    assert set(got) == set(keys[:3]) and got[keys[1]] == costly(1)  # the first stored rollout of a key
    assert store.stored_rollouts([other, rid], keys[1:2])[keys[1]] == again  # the first run named wins
    t = costly(5)
    assert trajectory_key(t) == rollout_key(t.instance, BASE.id, "synthetic/weak", 5)
    assert rollout_key(t.instance, BASE.id, "synthetic/weak@a1", 5) != trajectory_key(t)
    many = [costly(100 + i, 0.0) for i in range(900)]  # more keys than one query binds
    store.put_trajectories(rid, many, batch="many")
    assert len(store.stored_rollouts([rid], [trajectory_key(x) for x in many])) == 900


def test_a_batch_and_its_index_are_one_transaction(store: HarnessStore):
    store.put_harness(BASE)
    rid = store.create_run("eval", {})
    sql(store.root, "CREATE TRIGGER full BEFORE INSERT ON rollouts BEGIN SELECT RAISE(FAIL, 'database or disk is full'); END")
    with pytest.raises(StoreError, match="disk is full"):
        store.put_trajectories(rid, [costly(0)], batch="a")
    assert store.trajectory_batches(rid) == [] and store.rollout_spend([rid]) == (0, 0.0)  # neither without the other
    sql(store.root, "DROP TRIGGER full")
    store.put_trajectories(rid, [costly(0)], batch="a")
    assert store.rollout_spend([rid]) == (1, 0.25)


def test_a_schema_3_store_is_indexed_when_opened(tmp_path: Path):
    root = tmp_path / "s"
    with HarnessStore(root) as s:
        s.put_harness(BASE)
        rid = s.create_run("evolve", {})
        s.put_trajectories(rid, [costly(i) for i in range(4)], batch="a")
        s.put_trajectories(rid, [costly(3), costly(4)], batch="b")
        lost = s.put_trajectories(rid, [costly(9)], batch="lost")
    (root / "objects" / lost[:2] / lost).unlink()  # a batch whose object is gone stays unindexed
    sql(root, "DROP TABLE rollouts", "UPDATE meta SET value = '3' WHERE key = 'schema'")
    again = HarnessStore(root, create=False)
    assert again.rollout_spend([rid]) == (5, 1.25)
    assert set(again.stored_rollouts([rid], [trajectory_key(costly(i)) for i in range(5)])) == {
        trajectory_key(costly(i)) for i in range(5)
    }
    with sqlite3.connect(root / "store.db") as c:
        assert c.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone() == (str(SCHEMA_VERSION),)
    c.close()
    assert kinds(again.check()) == {"missing_object": 1}


def test_check_finds_an_index_that_lost_or_misnames_rollouts_and_repair_adds_what_is_missing(store: HarnessStore):
    store.put_harness(BASE)
    rid = store.create_run("eval", {})
    store.put_trajectories(rid, [costly(i) for i in range(3)], batch="a")
    store.put_trajectories(rid, [costly(3)], batch="b")
    assert store.check().ok and store.check().checked["indexed_rollouts"] == 4
    gone, moved = trajectory_key(costly(1)), trajectory_key(costly(2))
    sql(store.root, f"DELETE FROM rollouts WHERE key IN ('{gone}', '{trajectory_key(costly(3))}')",
        f"UPDATE rollouts SET idx = 0 WHERE key = '{moved}'")
    report = store.check()
    assert kinds(report) == {"bad_rollout_index": 3}  # batch a and batch b lost rows; one row names another rollout
    by_subject = {p.subject: p.detail for p in report.problems}
    assert "1 stored rollouts are not in the index" in by_subject[f"{rid}/a"]
    assert "holds another rollout" in by_subject[f"{rid}/{moved[:12]}"]
    assert store.rollout_spend([rid]) == (2, 0.5)
    fixed = store.check(repair=True)
    assert sorted(p.subject for p in fixed.problems if p.repaired) == [f"{rid}/a", f"{rid}/b"]
    assert store.rollout_spend([rid]) == (4, 1.0)
    assert kinds(store.check()) == {"bad_rollout_index": 1}  # the misnamed row is named, never guessed at
