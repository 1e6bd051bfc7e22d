"""Store reliability: corrupt objects detected and repaired, `check()`, run ownership (claims, leases,
stale runs), `store check` / `runs list|show`, refusals to open bad stores, and processes killed with
SIGKILL in the middle of writes."""

from __future__ import annotations

import ctypes
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coevolve.store.store import (
    PROBLEM_KINDS,
    SCHEMA_VERSION,
    CheckReport,
    HarnessStore,
    Lease,
    StoreError,
)
from coevolve.values import AdapterRef, HarnessEdit, SetSection
from tests.test_store import BASE, listing, trajectory, variant

REPO = Path(__file__).resolve().parent.parent


def cli(*args: object):
    from coevolve.cli.app import app

    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


def error_line(result) -> str:
    """The one `error:` line of a failed command (and nothing else on stderr)."""
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def child(code: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def object_path(store: HarnessStore, digest: str) -> Path:
    return store.root / "objects" / digest[:2] / digest


def harness_blob(store: HarnessStore, hid: str) -> str:
    with sqlite3.connect(store.db_path) as c:
        return c.execute("SELECT blob FROM harnesses WHERE id = ?", (hid,)).fetchone()[0]


def raw_sql(store: HarnessStore, *stmts: tuple) -> None:
    """Hand-edit the database (foreign keys off), as a buggy tool or a person might."""
    c = sqlite3.connect(store.db_path, isolation_level=None)
    c.execute("PRAGMA foreign_keys = OFF")
    for stmt in stmts:
        c.execute(*stmt)
    c.close()


def kinds(report: CheckReport, *, remaining: bool = False) -> dict[str, int]:
    out: dict[str, int] = {}
    for p in report.remaining if remaining else report.problems:
        out[p.kind] = out.get(p.kind, 0) + 1
    return out


# ------------------------------------------------------------------------------------- corrupt objects
@pytest.mark.parametrize("damage", ["same-size", "truncated", "empty"])
def test_corrupt_object_is_named_on_read_and_rewritten_by_the_next_put(store: HarnessStore, damage: str):
    data = b"the payload of an object" * 10
    d = store.put_blob(data)
    path = object_path(store, d)
    path.write_bytes({"same-size": b"x" * len(data), "truncated": data[:7], "empty": b""}[damage])
    with pytest.raises(StoreError, match=f"object {d} is corrupt") as info:
        store.get_blob(d)
    assert "\n" not in str(info.value) and str(path) in str(info.value)
    assert store.put_blob(data) == d  # the same content again repairs it
    assert path.read_bytes() == data and store.get_blob(d) == data
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".tmp")]


def test_corrupt_harness_blob_is_reported_and_repaired_by_putting_it_again(store: HarnessStore):
    store.put_harness(BASE)
    blob = harness_blob(store, BASE.id)
    object_path(store, blob).write_bytes(b"\x00" * 50)
    with pytest.raises(StoreError, match=f"object {blob} is corrupt"):
        store.get_harness(BASE.id)
    assert kinds(store.check()) == {"corrupt_object": 1}
    store.put_harness(BASE)  # idempotent record, but the blob is rewritten
    assert store.get_harness(BASE.id) == BASE
    assert store.check().ok


def test_failed_object_write_leaves_neither_a_partial_object_nor_a_temp_file(
    store: HarnessStore, monkeypatch: pytest.MonkeyPatch
):
    def no_rename(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", no_rename)
    with pytest.raises(StoreError, match="cannot write object .*No space left on device"):
        store.put_blob(b"big")
    monkeypatch.undo()
    assert [p for p in (store.root / "objects").rglob("*") if p.is_file()] == []
    d = store.put_blob(b"big")
    assert store.get_blob(d) == b"big"


# ------------------------------------------------------------------------------------- check()
def full_store(root: Path) -> tuple[HarnessStore, str]:
    s = HarnessStore(root)
    s.put_harness(BASE, rationale="baseline")
    e = HarnessEdit((SetSection("v", "variant 1"),), rationale="v1")
    s.put_harness(variant(1), parent=BASE.id, edit=e, rationale="v1")
    s.put_harness(variant(2), parent=variant(1).id)
    s.set_alias("iot:baseline", BASE.id)
    rid = s.create_run("eval", {"n": 3})
    s.put_trajectories(rid, [trajectory(i) for i in range(3)])
    s.put_trajectories(rid, [trajectory(9)], batch="retry")
    s.append_event(rid, "start", {})
    s.finish_run(rid, "done", {"passed": 3})
    adir = root / "adapters" / "a1"
    adir.mkdir(parents=True)
    (adir / "synthetic_adapter.json").write_text("{}")
    s.put_adapter(AdapterRef("a1", "synthetic/weak", str(adir), "d" * 64, {"backend": "synthetic"}))
    return s, rid


def test_check_of_a_sound_store(tmp_path: Path):
    s, _ = full_store(tmp_path / "s")
    report = s.check()
    assert report.ok and report.problems == () and report.remaining == []
    assert report.checked["objects"] == 5  # 3 harnesses, 2 batches
    assert {
        k: report.checked[k] for k in ("harnesses", "lineage_edges", "aliases", "trajectory_batches")
    } == {
        "harnesses": 3,
        "lineage_edges": 2,
        "aliases": 1,
        "trajectory_batches": 2,
    }
    assert (report.checked["events"], report.checked["adapters"], report.checked["runs"]) == (1, 1, 1)
    assert report.as_json()["ok"] is True


def test_check_finds_every_kind_of_problem_and_repairs_what_it_can(tmp_path: Path):
    s, _ = full_store(tmp_path / "s")
    pay = variant(5, family="payroll")
    s.put_harness(pay)
    v1, v2 = variant(1).id, variant(2).id
    # missing and corrupt objects
    object_path(s, harness_blob(s, v2)).unlink()
    object_path(s, harness_blob(s, v1)).write_bytes(b"rot")
    stray = s.put_blob(b"unreferenced")
    object_path(s, stray).write_bytes(b"rot too")
    # lineage: a parent of another family, a cycle, a missing parent; a dangling alias; orphan events
    raw_sql(
        s,
        ("UPDATE harnesses SET parent = ? WHERE id = ?", (BASE.id, pay.id)),
        ("UPDATE harnesses SET parent = ? WHERE id = ?", (v2, BASE.id)),
        ("INSERT INTO aliases(name, harness_id, updated) VALUES ('iot:gone', ?, 0)", ("f" * 64,)),
        ("INSERT INTO events(run_id, kind, payload, created) VALUES ('ghost', 'x', '{}', 0)",),
        ("UPDATE trajectory_batches SET count = 7 WHERE batch = 'retry'",),
    )
    # adapters: files gone, a record that does not decode
    s.put_adapter(AdapterRef("a2", "synthetic/weak", str(tmp_path / "nowhere"), "", {}))
    raw_sql(s, ("INSERT INTO adapters(id, value, created) VALUES ('a3', x'c1', 0)",))
    # a run whose process died, a temp file of a killed writer
    gone = dead_pid()
    stale = s.create_run("evolve", {})
    raw_sql(s, ("UPDATE runs SET pid = ?, pstart = NULL WHERE run_id = ?", (gone, stale)))
    tmp = object_path(s, stray).parent / f".tmp-{stray[:12]}-{gone}-abcd1234"
    tmp.write_bytes(b"half")
    live = s.create_run("eval", {})  # running, owned by this live process: not a problem

    report = s.check()
    assert kinds(report) == {
        "missing_object": 1,
        "corrupt_object": 2,
        "bad_lineage": 2,  # payroll -> iot parent; the cycle BASE -> v2 -> v1 -> BASE
        "bad_alias": 1,
        "orphan_event": 1,
        "bad_batch": 1,
        "missing_adapter": 1,
        "bad_adapter": 1,
        "stale_run": 1,
        "temp_file": 1,
    }
    assert set(kinds(report)) <= set(PROBLEM_KINDS)
    by_subject = {(p.kind, p.subject): p.detail for p in report.problems}
    assert "lineage cycle through 3 harnesses" in by_subject[("bad_lineage", BASE.id)]
    assert "is family 'iot', not 'payroll'" in by_subject[("bad_lineage", pay.id)]
    assert f"pid {gone}" in by_subject[("stale_run", stale)]
    assert s.get_run(stale).status == "running" and tmp.exists()  # check alone writes nothing

    fixed = s.check(repair=True)
    assert kinds(fixed) == kinds(report)
    repaired = {(p.kind, p.subject) for p in fixed.problems if p.repaired}
    assert repaired == {
        ("stale_run", stale),
        ("temp_file", f"{stray[:2]}/{tmp.name}"),
        ("corrupt_object", stray),
    }
    assert s.get_run(stale).status == "interrupted" and s.get_run(live).status == "running"
    assert [e.kind for e in s.events(stale)] == ["interrupted"]
    assert not tmp.exists() and not object_path(s, stray).exists()
    assert len(list((s.root / "quarantine").iterdir())) == 2  # both corrupt objects, kept as evidence
    again = s.check()
    assert "stale_run" not in kinds(again) and "temp_file" not in kinds(again)
    assert kinds(again)["missing_object"] == 2  # v2 lost, v1 quarantined: content gone until re-put
    s.put_harness(variant(1))
    s.put_harness(variant(2))
    assert "missing_object" not in kinds(s.check())


# ------------------------------------------------------------------------------------- claims
def test_claim_refuses_done_and_held_runs_and_takes_over_dead_owners(store: HarnessStore):
    rid = store.create_run("evolve", {})
    store.finish_run(rid, "done", {"x": 1})
    with pytest.raises(StoreError, match=f"run '{rid}' is done .*start a new run"):
        store.claim_run(rid)
    assert store.get_run(rid).status == "done" and store.get_run(rid).result == {"x": 1}

    with pytest.raises(StoreError, match="unknown run 'nope'"):
        store.claim_run("nope")

    other = store.create_run("evolve", {})
    store.update_run(other, status="interrupted")
    lease = store.claim_run(other, heartbeat_s=0.05)
    assert isinstance(lease, Lease) and lease.held
    rec = store.get_run(other)
    assert (rec.status, rec.pid, rec.claimed, rec.owner_alive()) == ("running", os.getpid(), True, True)
    beat = rec.beat
    with pytest.raises(StoreError, match="already claimed by this process"):
        store.claim_run(other)
    time.sleep(0.3)
    assert store.get_run(other).beat > beat  # the heartbeat renews the lease
    lease.release()
    lease.release()  # idempotent
    rec = store.get_run(other)
    assert (rec.status, rec.claimed) == ("interrupted", False)  # released while running: interrupted

    # a dead owner's claim (status running, lease held) is taken over
    raw_sql(
        store,
        (
            "UPDATE runs SET status = 'running', lease = 'x', pid = ?, pstart = NULL WHERE run_id = ?",
            (dead_pid(), other),
        ),
    )
    with store.claim_run(other):
        assert store.get_run(other).pid == os.getpid()
    # another host: a stale lease is taken over, a fresh one or an owner without a lease is not
    raw_sql(
        store,
        (
            "UPDATE runs SET status = 'running', host = 'elsewhere', lease = 'x', beat = 0 WHERE run_id = ?",
            (other,),
        ),
    )
    store.claim_run(other, heartbeat_s=None).release()
    raw_sql(
        store,
        (
            "UPDATE runs SET status = 'running', host = 'elsewhere', lease = 'x', beat = ? WHERE run_id = ?",
            (time.time(), other),
        ),
    )
    with pytest.raises(StoreError, match="in use by pid .* on elsewhere"):
        store.claim_run(other)
    raw_sql(store, ("UPDATE runs SET host = 'elsewhere', lease = NULL WHERE run_id = ?", (other,)))
    with pytest.raises(StoreError, match="cannot be checked from here"):
        store.claim_run(other)


def test_two_processes_cannot_both_own_a_run(store: HarnessStore):
    rid = store.create_run("evolve", {})
    store.update_run(rid, status="interrupted")
    holder = child(f"""
        import time
        from coevolve.store.store import HarnessStore
        lease = HarnessStore({str(store.root)!r}).claim_run({rid!r})
        print("claimed", flush=True)
        time.sleep(60)
    """)
    try:
        assert holder.stdout.readline().strip() == "claimed", holder.stderr.read()
        with pytest.raises(StoreError, match=f"run '{rid}' is in use by pid {holder.pid}") as info:
            store.claim_run(rid)
        assert "\n" not in str(info.value)
        assert store.check().ok  # a live owner is not a problem
    finally:
        holder.kill()
        holder.wait()
    assert kinds(store.check()) == {"stale_run": 1}
    with store.claim_run(rid):  # the dead holder's claim is taken over
        assert store.get_run(rid).pid == os.getpid()


def evolve_run(store: HarnessStore) -> str:
    from coevolve.agents.meta.loop import EvolveConfig

    return store.create_run("evolve", EvolveConfig(family="iot", model="synthetic/weak").to_json())


def test_evolve_resume_of_a_done_run_is_refused_and_changes_nothing(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("COEVOLVE_STORE", str(tmp_path / "s"))  # the command sets it; restored after
    s = HarnessStore(tmp_path / "s")
    rid = evolve_run(s)
    s.finish_run(rid, "done", {"harness_id": "abc", "evolved_val": 0.7})
    before = s.get_run(rid)
    r = cli("evolve", "--resume", rid, "--store", s.root, "--json")
    assert r.exit_code == 2
    assert (
        error_line(r)
        == f"error: run '{rid}' is done (finished at {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(before.finished))}); start a new run instead of resuming it"
    )
    assert s.get_run(rid) == before and s.events(rid) == []


def test_evolve_resume_of_a_run_another_process_owns_is_refused(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("COEVOLVE_STORE", str(tmp_path / "s"))
    s = HarnessStore(tmp_path / "s")
    rid = evolve_run(s)
    s.update_run(rid, status="interrupted")
    holder = child(f"""
        import time
        from coevolve.store.store import HarnessStore
        lease = HarnessStore({str(s.root)!r}).claim_run({rid!r})
        print("claimed", flush=True)
        time.sleep(60)
    """)
    try:
        assert holder.stdout.readline().strip() == "claimed", holder.stderr.read()
        r = cli("evolve", "--resume", rid, "--store", s.root, "--json")
        assert r.exit_code == 2
        assert f"is in use by pid {holder.pid}" in error_line(r)
        rec = s.get_run(rid)
        assert (rec.pid, rec.status, rec.claimed) == (holder.pid, "running", True)
    finally:
        holder.kill()
        holder.wait()


# ------------------------------------------------------------------------------------- CLI
def test_store_check_command(tmp_path: Path):
    s, _ = full_store(tmp_path / "s")
    r = cli("store", "check", "--store", s.root)
    assert r.exit_code == 0, r.output
    assert "checked 5 objects" in r.stdout and "no problems" in r.stdout
    stale = s.create_run("evolve", {})
    raw_sql(s, ("UPDATE runs SET pid = ?, pstart = NULL WHERE run_id = ?", (dead_pid(), stale)))
    r = cli("store", "check", "--store", s.root, "--json")
    assert r.exit_code == 1
    out = json.loads(r.stdout)
    assert (out["ok"], out["remaining"], out["by_kind"]) == (
        False,
        1,
        {"stale_run": {"found": 1, "repaired": 0}},
    )
    r = cli("store", "check", "--store", s.root, "--repair")
    assert (
        r.exit_code == 0
        and "stale_run: 1 found, 1 repaired" in r.stdout
        and "all problems repaired" in r.stdout
    )
    assert s.get_run(stale).status == "interrupted"
    assert cli("store", "check", "--store", s.root).exit_code == 0
    r = cli("store", "check", "--store", tmp_path / "missing")
    assert r.exit_code == 2 and "no harness store" in error_line(r)


def test_runs_list_and_show(tmp_path: Path):
    s, done = full_store(tmp_path / "s")
    running = s.create_run("evolve", {"family": "iot"})
    s.append_event(running, "checkpoint", {"i": 1})
    stale = s.create_run("evolve", {})
    raw_sql(s, ("UPDATE runs SET pid = ?, pstart = NULL WHERE run_id = ?", (dead_pid(), stale)))

    r = cli("runs", "list", "--store", s.root, "--json")
    assert r.exit_code == 0
    rows = json.loads(r.stdout)
    assert [x["run_id"] for x in rows] == [done, running, stale]
    assert set(rows[0]) >= {"run_id", "kind", "status", "created", "updated", "pid", "host"}
    assert [x["owner_alive"] for x in rows[1:]] == [True, False]
    assert rows[1]["pid"] == os.getpid() and rows[1]["updated"] >= rows[1]["created"]
    r = cli("runs", "list", "--store", s.root, "--kind", "evolve", "--status", "running", "--json")
    assert [x["run_id"] for x in json.loads(r.stdout)] == [running, stale]
    r = cli("runs", "list", "--store", s.root, "--status", "done", "--json")
    assert [x["run_id"] for x in json.loads(r.stdout)] == [done]
    r = cli("runs", "list", "--store", s.root)
    assert r.exit_code == 0 and running in r.stdout and "running (owner gone)" in r.stdout

    r = cli("runs", "show", done, "--store", s.root, "--json")
    info = json.loads(r.stdout)
    assert (info["status"], info["result"], info["events"]) == ("done", {"passed": 3}, 1)
    assert [(b["batch"], b["count"]) for b in info["trajectory_batches"]] == [("main", 3), ("retry", 1)]
    r = cli("runs", "show", running, "--store", s.root)
    assert r.exit_code == 0 and "last: checkpoint" in r.stdout and f"pid {os.getpid()}" in r.stdout
    r = cli("runs", "show", "nope", "--store", s.root)
    assert r.exit_code == 2 and error_line(r) == "error: unknown run 'nope'"
    r = cli("runs", "list", "--store", tmp_path / "missing")
    assert r.exit_code == 2 and "no harness store" in error_line(r)


# ------------------------------------------------------------------------------------- bad stores
def test_objects_is_a_file(tmp_path: Path):
    root = tmp_path / "s"
    HarnessStore(root).close()
    (root / "objects").rmdir()
    (root / "objects").write_text("not a directory")
    before = listing(tmp_path)
    with pytest.raises(StoreError, match="objects' is not a directory") as info:
        HarnessStore(root)
    assert "\n" not in str(info.value)
    assert listing(tmp_path) == before
    r = cli("runs", "list", "--store", root)
    assert r.exit_code == 2 and "is not a directory" in error_line(r)
    fresh = tmp_path / "fresh"  # objects/ in the way before the store exists: refused, nothing created
    fresh.mkdir()
    (fresh / "objects").write_text("x")
    with pytest.raises(StoreError, match="not a harness store"):
        HarnessStore(fresh)


def test_store_db_that_is_not_sqlite(tmp_path: Path):
    root = tmp_path / "s"
    root.mkdir()
    (root / "store.db").write_bytes(b"SQLite format 3\x00" + b"garbage" * 500)
    before = listing(tmp_path)
    with pytest.raises(StoreError, match="not a readable harness store") as info:
        HarnessStore(root)
    assert "\n" not in str(info.value)
    assert listing(tmp_path) == before
    for args in (("store", "check"), ("runs", "list")):
        r = cli(*args, "--store", root)
        assert r.exit_code == 2 and "not a readable harness store" in error_line(r)


def _drop_file_capabilities() -> None:  # pragma: no cover - runs in the child
    """Root ignores file permissions through CAP_DAC_OVERRIDE (and friends): drop them so that a
    read-only directory is read-only to the child, as it is to any other user."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2, 3):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP; exec then loses the capability
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


READ_ONLY_CHILD = """
import json, sys
from coevolve.store.store import HarnessStore, StoreError
from tests.test_store import BASE, variant
root, rid = sys.argv[1], sys.argv[2]
s = HarnessStore(root)  # create=True is fine: the store exists
out = {"read_only": s.read_only, "harness": s.get_harness("iot:baseline") == BASE,
       "runs": [r.run_id for r in s.list_runs()], "trajs": len(s.get_trajectories(rid)),
       "check_ok": s.check().ok, "errors": []}
for name, write in [("put_harness", lambda: s.put_harness(variant(9))),
                    ("create_run", lambda: s.create_run("eval", {})),
                    ("append_event", lambda: s.append_event(rid, "x", {})),
                    ("claim_run", lambda: s.claim_run(rid)),
                    ("repair", lambda: s.check(repair=True))]:
    try:
        write()
        out["errors"].append(None)
    except StoreError as e:
        out["errors"].append(str(e))
print(json.dumps(out))
"""


@pytest.mark.parametrize("what", ["root", "objects"])
def test_read_only_store_reads_and_refuses_the_first_write(tmp_path: Path, what: str):
    root = tmp_path / "s"
    s = HarnessStore(root)
    s.put_harness(BASE)
    s.set_alias("iot:baseline", BASE.id)
    rid = s.create_run("eval", {})
    s.put_trajectories(rid, [trajectory(1)])
    s.finish_run(rid, "failed", {})
    s.close()
    locked = root if what == "root" else root / "objects"
    before = listing(root)
    locked.chmod(0o555)
    pre = _drop_file_capabilities if os.geteuid() == 0 else None
    try:
        r = subprocess.run(
            [sys.executable, "-c", READ_ONLY_CHILD, str(root), rid],
            cwd=REPO,
            capture_output=True,
            text=True,
            preexec_fn=pre,
            timeout=60,
            check=False,
        )
        assert r.returncode == 0, r.stderr[-2000:]
        out = json.loads(r.stdout)
        cmd = [sys.executable, "-m", "coevolve.cli.app"]
        lst = subprocess.run(
            [*cmd, "runs", "list", "--store", str(root), "--json"],
            cwd=REPO,
            capture_output=True,
            text=True,
            preexec_fn=pre,
            timeout=60,
            check=False,
        )
        rep = subprocess.run(
            [*cmd, "store", "check", "--repair", "--store", str(root)],
            cwd=REPO,
            capture_output=True,
            text=True,
            preexec_fn=pre,
            timeout=60,
            check=False,
        )
    finally:
        locked.chmod(0o755)
    assert "is not writable" in out["read_only"]
    assert out["harness"] and out["runs"] == [rid] and out["trajs"] == 1 and out["check_ok"]
    assert all(e is not None and "read-only" in e and "\n" not in e for e in out["errors"]), out["errors"]
    assert out["errors"][0].startswith("cannot write object") or "cannot write" in out["errors"][0]
    assert lst.returncode == 0 and [x["run_id"] for x in json.loads(lst.stdout)] == [rid]
    assert rep.returncode == 2 and rep.stderr.strip().startswith("error: cannot repair: store")
    assert len(rep.stderr.strip().splitlines()) == 1
    after = listing(root)
    for f in ("store.db-shm", "store.db-wal"):  # sqlite may make its read index where it can
        after.pop(f, None)
        before.pop(f, None)
    assert after == before  # nothing was written


def test_schema_1_store_is_migrated_and_its_running_runs_can_be_resumed(tmp_path: Path):
    root = tmp_path / "s"
    s = HarnessStore(root)
    s.put_harness(BASE)
    rid = s.create_run("evolve", {})
    s.close()
    with sqlite3.connect(root / "store.db") as c:  # rebuild the schema-1 runs table
        c.executescript(
            """
            CREATE TABLE runs1 (run_id TEXT PRIMARY KEY, kind TEXT NOT NULL, config TEXT NOT NULL,
                status TEXT NOT NULL, result TEXT NOT NULL, created REAL NOT NULL, finished REAL);
            INSERT INTO runs1 SELECT run_id, kind, config, status, result, created, finished FROM runs;
            PRAGMA foreign_keys = OFF;
            DROP TABLE runs;
            ALTER TABLE runs1 RENAME TO runs;
            UPDATE meta SET value = '1' WHERE key = 'schema';
            """
        )
    c.close()
    again = HarnessStore(root, create=False)
    rec = again.get_run(rid)
    assert (rec.status, rec.pid, rec.updated) == ("running", None, rec.created)
    assert kinds(again.check()) == {"stale_run": 1}  # a pre-schema-2 run has no live owner
    with again.claim_run(rid):
        assert again.get_run(rid).pid == os.getpid()
    with sqlite3.connect(root / "store.db") as c:
        assert c.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone() == (str(SCHEMA_VERSION),)  # 1 -> 2 -> 3 -> 4
    c.close()


# ------------------------------------------------------------------------------------- crash safety
CRASH_WRITER = """
import sys
from coevolve.store.store import HarnessStore
from tests.test_store import BASE, trajectory, variant
root, rnd = sys.argv[1], int(sys.argv[2])
s = HarnessStore(root)
s.put_harness(BASE)
rid = s.create_run("crash", {"round": rnd})
print("R", rid, flush=True)
i = 0
while True:
    k = rnd * 100_000 + i
    s.put_harness(variant(k), parent=BASE.id, run_id=rid)
    print("H", k, flush=True)
    s.put_trajectories(rid, [trajectory(k * 10 + j) for j in range(20)], batch=f"b{i}")
    print("T", i, flush=True)
    seq = s.append_event(rid, "step", {"i": i})
    print("E", seq, i, flush=True)
    i += 1
"""
CRASH_ROUNDS = 10


def test_sigkill_in_the_middle_of_writes_never_corrupts_the_store(tmp_path: Path):
    root = tmp_path / "s"
    HarnessStore(root).close()
    rng = random.Random(20240611)
    committed: list[tuple[str, list[str]]] = []
    for rnd in range(CRASH_ROUNDS):
        p = subprocess.Popen(
            [sys.executable, "-c", CRASH_WRITER, str(root), str(rnd)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        first = p.stdout.readline()
        assert first.startswith("R "), p.stderr.read()
        time.sleep(rng.uniform(0.05, 0.4))
        os.kill(p.pid, signal.SIGKILL)
        rest, _ = p.communicate(timeout=30)
        assert p.returncode == -signal.SIGKILL
        lines = [ln for ln in rest.split("\n")[:-1]]  # a torn last line (no newline) is not a commit
        committed.append((first.split()[1], lines))

    s = HarnessStore(root, create=False)
    assert s.integrity_check() == "ok"
    report = s.check()
    assert set(kinds(report)) <= {"stale_run", "temp_file"}, report.problems
    assert kinds(report)["stale_run"] == CRASH_ROUNDS  # every killed writer's run
    checked = 0
    for rid, lines in committed:
        events = {e.seq: e.payload for e in s.events(rid)}
        batches = {b for b, _, _ in s.trajectory_batches(rid)}
        for line in lines:
            tag, *vals = line.split()
            if tag == "H":
                k = int(vals[0])
                assert s.get_harness(variant(k).id) == variant(k)
                assert s.get_record(variant(k).id).parent == BASE.id
            elif tag == "T":
                i = int(vals[0])
                assert f"b{i}" in batches
                assert len(s.get_trajectories(rid, batch=f"b{i}")) == 20
            else:
                assert events[int(vals[0])] == {"i": int(vals[1])}
            checked += 1
    assert checked >= CRASH_ROUNDS  # at least one committed record per round, on average
    fixed = s.check(repair=True)
    assert all(p.repaired for p in fixed.problems)
    final = s.check()
    assert final.ok and final.problems == ()
    assert {r.status for r in s.list_runs("crash")} == {"interrupted"}
    print(f"crash rounds {CRASH_ROUNDS}, committed records checked {checked}, problems found {kinds(report)}")


CONCURRENT_WRITER = """
import os, sys, time
from coevolve.store.store import HarnessStore
from tests.test_store import BASE, trajectory, variant
root, w, go, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
while not os.path.exists(go):
    time.sleep(0.005)
s = HarnessStore(root)  # every writer races to create the store
s.put_harness(BASE)
rid = s.create_run("writer", {"w": w})
blobs = []
for i in range(n):
    k = w * 1000 + i
    s.put_harness(variant(k), parent=BASE.id, run_id=rid)
    s.append_event(rid, "step", {"i": i})
    blobs.append(s.put_blob(f"blob {w} {i}".encode() * (i + 1)))
    if i % 5 == 4:
        s.put_trajectories(rid, [trajectory(k)], batch=f"b{i}")
s.finish_run(rid, "done", {"blobs": blobs})
"""
N_WRITERS, N_ITEMS = 8, 20


def test_eight_concurrent_writers_lose_nothing(tmp_path: Path):
    root, go = tmp_path / "s", tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CONCURRENT_WRITER, str(root), str(w), str(go), str(N_ITEMS)],
            cwd=REPO,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(N_WRITERS)
    ]
    time.sleep(0.5)
    go.touch()
    errs = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * N_WRITERS, errs

    s = HarnessStore(root, create=False)
    runs = s.list_runs("writer")
    assert len(runs) == N_WRITERS and {r.status for r in runs} == {"done"}
    assert len(s.list_harnesses("iot")) == 1 + N_WRITERS * N_ITEMS
    for run in runs:
        w = run.config["w"]
        assert [e.payload["i"] for e in s.events(run.run_id)] == list(range(N_ITEMS))
        for i in range(N_ITEMS):
            assert s.get_harness(variant(w * 1000 + i).id) == variant(w * 1000 + i)
        for i, d in enumerate(run.result["blobs"]):
            assert s.get_blob(d) == f"blob {w} {i}".encode() * (i + 1)
        assert s.get_trajectories(run.run_id) == [trajectory(w * 1000 + i) for i in range(4, N_ITEMS, 5)]
    report = s.check()
    assert report.ok and report.problems == (), report.problems


def test_read_only_store_left_by_a_killed_writer_shows_its_commits(tmp_path: Path):
    """A SIGKILLed writer leaves its commits in store.db-wal; a read-only opener still sees them."""
    root = tmp_path / "s"
    writer = child(f"""
        import time
        from coevolve.store.store import HarnessStore
        s = HarnessStore({str(root)!r})
        s.append_event(s.create_run("eval", {{}}, run_id="r1"), "x", {{}})
        print("ok", flush=True)
        time.sleep(60)
    """)
    assert writer.stdout.readline().strip() == "ok", writer.stderr.read()
    writer.kill()
    writer.wait()
    assert (root / "store.db-wal").stat().st_size > 0
    root.chmod(0o555)
    pre = _drop_file_capabilities if os.geteuid() == 0 else None
    code = (
        f"from coevolve.store.store import HarnessStore; s = HarnessStore({str(root)!r});"
        " print(bool(s.read_only), [r.run_id for r in s.list_runs()], len(s.events('r1')),"
        " sorted(p.kind for p in s.check().problems))"
    )
    try:
        r = subprocess.run(
            [sys.executable, "-c", code],
            cwd=REPO,
            capture_output=True,
            text=True,
            preexec_fn=pre,
            timeout=60,
            check=False,
        )
    finally:
        root.chmod(0o755)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split("\n")[0] == "True ['r1'] 1 ['stale_run']"
