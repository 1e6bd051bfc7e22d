"""The persistent store: round trips, lineage, references, refusals and concurrent writers."""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import pickle
import re
import sqlite3
from pathlib import Path

import pytest

from coevolve.edits import apply_edit
from coevolve.store.store import SCHEMA_VERSION, Event, HarnessRecord, HarnessStore, RunRecord, StoreError
from coevolve.values import (
    AdapterRef,
    AddRecipe,
    AppendSection,
    ContextPolicy,
    Harness,
    HarnessEdit,
    HookSpec,
    Outcome,
    PromptSection,
    Recipe,
    SetContextPolicy,
    SetMaxTurns,
    SetSection,
    TaskInstance,
    ToolSpec,
    Trajectory,
    TurnRecord,
)

SCHEMA = {"type": "object", "properties": {"zeta": {"type": "string"}, "alpha": {"type": "integer"}}}
BASE = Harness(
    family="iot",
    system_prompt=(PromptSection("role", "You audit IoT sensors."), PromptSection("rules", "Be exact.")),
    tools=(
        ToolSpec("read_sensor", "Read a sensor.", SCHEMA, "iot.read_sensor"),
        ToolSpec("finish", "Finish.", {"type": "object", "properties": {}}, "finish"),
    ),
    hooks=(HookSpec("before_call", "validate_args", {"tools": ["read_sensor"]}),),
    recipes=(Recipe("units", "Celsius."),),
)


def variant(i: int, family: str = "iot") -> Harness:
    return dataclasses.replace(
        BASE, family=family, system_prompt=(*BASE.system_prompt, PromptSection("v", f"variant {i}"))
    )


def trajectory(i: int, passed: bool = True) -> Trajectory:
    inst = TaskInstance("iot", f"iot-{i}", "val", i, f"find anomaly {i}", {"n_sensors": i})
    turn = TurnRecord(
        0, ({"id": "c0", "name": "read_sensor", "arguments": {"sensor": "s1"}},), ("ok",), 10, 5, 0.1
    )
    return Trajectory(
        instance=inst,
        harness_id=BASE.id,
        model="synthetic/weak",
        seed=i,
        messages=({"role": "system", "content": "x"}, {"role": "user", "content": inst.instruction}),
        turns=(turn,),
        outcome=Outcome(passed, 1.0 if passed else 0.0, {"checked": i}),
    )


def listing(root: Path) -> dict[str, bytes | None]:
    """Every path under root with its bytes (None for directories)."""
    out: dict[str, bytes | None] = {}
    for p in sorted(root.rglob("*")):
        out[str(p.relative_to(root))] = None if p.is_dir() else p.read_bytes()
    return out


# ------------------------------------------------------------------------------------- blobs, values
def test_blob_and_value_round_trip(store: HarnessStore):
    d = store.put_blob(b"hello")
    assert re.fullmatch(r"[0-9a-f]{64}", d)
    assert store.put_blob(b"hello") == d  # idempotent
    assert store.get_blob(d) == b"hello"
    path = store.root / "objects" / d[:2] / d
    assert path.read_bytes() == b"hello"
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".tmp")]
    assert store.get_value(store.put_value(BASE)) == BASE
    t = trajectory(1)
    assert store.get_value(store.put_value(t)) == t
    assert store.get_value(store.put_value({"a": (1, 2)})) == {"a": [1, 2]}


def test_corrupt_or_missing_blob_is_a_store_error(store: HarnessStore):
    d = store.put_blob(b"payload")
    (store.root / "objects" / d[:2] / d).write_bytes(b"tampered")
    with pytest.raises(StoreError, match="corrupt"):
        store.get_blob(d)
    with pytest.raises(StoreError, match="no object"):
        store.get_blob("0" * 64)
    with pytest.raises(StoreError, match="not a sha256"):
        store.get_blob("../../etc/passwd")


# ------------------------------------------------------------------------------------- harnesses
def test_harness_round_trip_keeps_schema_order(store: HarnessStore):
    hid = store.put_harness(BASE, rationale="baseline", run_id="manual")
    assert hid == BASE.id
    back = store.get_harness(hid)
    assert back == BASE
    assert list(back.tool("read_sensor").parameters["properties"]) == ["zeta", "alpha"]
    rec = store.get_record(hid)
    assert isinstance(rec, HarnessRecord)
    assert (rec.id, rec.family, rec.parent, rec.edit, rec.rationale, rec.run_id, rec.val_gain) == (
        hid,
        "iot",
        None,
        None,
        "baseline",
        "manual",
        None,
    )
    assert rec.created > 0


def test_put_harness_is_idempotent(store: HarnessStore):
    store.put_harness(BASE, rationale="first")
    assert store.put_harness(BASE, rationale="second", val_gain=0.5) == BASE.id
    recs = store.list_harnesses()
    assert len(recs) == 1
    assert recs[0].rationale == "first" and recs[0].val_gain is None


def test_lineage_of_a_three_deep_chain(store: HarnessStore):
    e1 = HarnessEdit(
        (AppendSection("rules", "Check units."),), rationale="units", targets="implicit-knowledge"
    )
    e2 = HarnessEdit((SetContextPolicy(ContextPolicy("truncate-middle", 8000, 4)),), rationale="long logs")
    e3 = HarnessEdit(
        (AddRecipe(Recipe("drift", "2%/h")), SetMaxTurns(30)), rationale="drift", targets="traj-9"
    )
    h0 = BASE
    h1 = apply_edit(h0, e1)
    h2 = apply_edit(h1, e2)
    h3 = apply_edit(h2, e3)
    e_sib = HarnessEdit((SetSection("style", "Be brief."),))
    sibling = apply_edit(h0, e_sib)
    store.put_harness(h0, rationale="baseline")
    store.put_harness(h1, parent=h0.id, edit=e1, rationale=e1.rationale, run_id="evolve-1", val_gain=0.1)
    store.put_harness(h2, parent=h1.id[:10], edit=e2, rationale=e2.rationale, val_gain=-0.02)
    store.put_harness(h3, parent=h2.id, edit=e3, rationale=e3.rationale, val_gain=0.25)
    store.put_harness(sibling, parent=h0.id, edit=e_sib)

    chain = store.lineage(h3.id)
    assert [r.id for r in chain] == [h0.id, h1.id, h2.id, h3.id]
    assert [r.parent for r in chain] == [None, h0.id, h1.id, h2.id]
    assert [r.edit for r in chain] == [None, e1, e2, e3]
    assert [r.rationale for r in chain] == ["baseline", "units", "long logs", "drift"]
    assert [r.val_gain for r in chain] == [None, 0.1, -0.02, 0.25]
    assert chain[1].run_id == "evolve-1"
    # replaying the recorded edits from the root rebuilds the harness
    h = store.get_harness(chain[0].id)
    for rec in chain[1:]:
        h = apply_edit(h, rec.edit)
    assert h == h3
    assert [r.id for r in store.lineage(h0.id)] == [h0.id]
    assert [r.id for r in store.children(h0.id)] == [h1.id, sibling.id]
    assert store.children(h3.id) == []
    assert [r.id for r in store.list_harnesses("iot")] == [h0.id, h1.id, h2.id, h3.id, sibling.id]
    assert store.list_harnesses("payroll") == []


def test_put_harness_refusals_write_nothing(store: HarnessStore):
    store.put_harness(BASE)
    before = listing(store.root / "objects")
    child = variant(1)
    with pytest.raises(StoreError, match="unknown harness"):
        store.put_harness(child, parent="f" * 64)
    with pytest.raises(StoreError, match="needs the parent"):
        store.put_harness(child, edit=HarnessEdit((SetMaxTurns(3),)))
    with pytest.raises(StoreError, match="family 'iot', the harness is 'payroll'"):
        store.put_harness(variant(1, family="payroll"), parent=BASE.id)
    with pytest.raises(StoreError, match="own parent"):
        store.put_harness(BASE, parent=BASE.id)
    assert listing(store.root / "objects") == before
    assert [r.id for r in store.list_harnesses()] == [BASE.id]


def test_prefix_and_alias_resolution(store: HarnessStore):
    store.put_harness(BASE)
    v = variant(7)
    store.put_harness(v, parent=BASE.id)
    store.set_alias("iot:baseline", BASE.id[:8])
    store.set_alias("iot:best", v.id)
    assert store.get_harness(BASE.id) == BASE
    assert store.get_harness(BASE.id[:6]) == BASE
    assert store.get_harness(v.id[:12]) == v
    assert store.get_harness("iot:baseline") == BASE
    assert store.get_record("iot:best").id == v.id
    assert store.resolve_harness("baseline", "iot") == BASE
    assert store.resolve_harness("best", "iot") == v  # bare names are family aliases
    assert store.resolve_harness("iot:best", "iot") == v
    assert store.resolve_harness(v.id[:9], "iot") == v
    assert store.aliases() == {"iot:baseline": BASE.id, "iot:best": v.id}
    store.set_alias("iot:best", BASE.id)  # aliases move
    assert store.get_harness("iot:best") == BASE
    assert store.aliases(BASE.id) == {"iot:baseline": BASE.id, "iot:best": BASE.id}


def test_reference_errors(store: HarnessStore):
    store.put_harness(BASE)
    payroll = variant(1, family="payroll")
    store.put_harness(payroll)
    store.set_alias("payroll:baseline", payroll.id)
    with pytest.raises(StoreError, match=r"^unknown harness 'nope'$"):
        store.get_harness("nope")
    with pytest.raises(StoreError, match=r"^unknown harness 'x' for family 'iot'$"):
        store.resolve_harness("x", "iot")
    with pytest.raises(StoreError, match=r"^unknown harness 'baseline' for family 'iot'$"):
        store.resolve_harness("baseline", "iot")  # only payroll has one
    with pytest.raises(StoreError, match="belongs to family 'payroll', not 'iot'"):
        store.resolve_harness(payroll.id[:8], "iot")
    with pytest.raises(StoreError, match="too short"):
        store.get_harness(BASE.id[:5])
    with pytest.raises(StoreError, match="unknown harness"):
        store.get_harness("0" * 64)
    with pytest.raises(StoreError, match="unknown harness"):
        store.set_alias("iot:baseline", "abcdef12")
    with pytest.raises(StoreError, match="looks like a harness id prefix"):
        store.set_alias("abcdef", BASE.id)
    with pytest.raises(StoreError, match="must be a word"):
        store.set_alias("has space", BASE.id)
    assert store.aliases() == {"payroll:baseline": payroll.id}
    assert issubclass(StoreError, ValueError)


def test_ambiguous_prefix(store: HarnessStore):
    other, h = variant(3017), variant(7209)  # found by the birthday search below
    if other.id[:6] != h.id[:6]:  # pragma: no cover - only if the encoding ever changes
        seen: dict[str, Harness] = {}
        for i in range(200_000):  # two ids sharing 6 hex characters (~5000 tries)
            h = variant(i)
            other = seen.setdefault(h.id[:6], h)
            if other is not h:
                break
    assert other.id[:6] == h.id[:6] and other != h
    store.put_harness(other)
    store.put_harness(h)
    common = os.path.commonprefix([h.id, other.id])
    with pytest.raises(StoreError, match=f"harness prefix '{common}' is ambiguous"):
        store.get_harness(common)
    with pytest.raises(StoreError, match="ambiguous .* for family 'iot'"):
        store.resolve_harness(common, "iot")
    assert store.get_harness(h.id[: len(common) + 1]) == h


# ------------------------------------------------------------------------------------- runs
def test_run_round_trip(store: HarnessStore):
    rid = store.create_run("eval", {"family": "iot", "n": 50, "models": ["synthetic/weak"]})
    assert re.fullmatch(r"eval-[0-9a-f]{12}", rid), rid  # random: nothing in a run id comes from the clock
    rec = store.get_run(rid)
    assert isinstance(rec, RunRecord)
    assert (rec.kind, rec.config, rec.status, rec.result, rec.finished) == (
        "eval",
        {"family": "iot", "n": 50, "models": ["synthetic/weak"]},
        "running",
        {},
        None,
    )
    store.update_run(rid, result={"done": 10})
    assert store.get_run(rid).result == {"done": 10} and store.get_run(rid).status == "running"
    store.update_run(rid, status="paused")
    assert store.get_run(rid).status == "paused" and store.get_run(rid).result == {"done": 10}
    store.finish_run(rid, "ok", {"pass_rate": 0.78})
    done = store.get_run(rid)
    assert (done.status, done.result) == ("ok", {"pass_rate": 0.78})
    assert done.finished is not None and done.finished >= done.created

    other = store.create_run("evolve", {}, run_id="evolve-custom")
    assert other == "evolve-custom"
    assert [r.run_id for r in store.list_runs()] == [rid, other]
    assert [r.run_id for r in store.list_runs("evolve")] == [other]
    assert len({store.create_run("eval", {}) for _ in range(20)}) == 20


def test_run_errors(store: HarnessStore):
    store.create_run("eval", {}, run_id="r1")
    with pytest.raises(StoreError, match="already exists"):
        store.create_run("eval", {}, run_id="r1")
    with pytest.raises(StoreError, match="unknown run 'r2'"):
        store.get_run("r2")
    with pytest.raises(StoreError, match="unknown run 'r2'"):
        store.finish_run("r2", "ok", {})
    with pytest.raises(StoreError, match="unknown run 'r2'"):
        store.update_run("r2", status="x")
    with pytest.raises(StoreError, match="not JSON-serialisable"):
        store.create_run("eval", {"bad": object()})
    assert [r.run_id for r in store.list_runs()] == ["r1"]


# ------------------------------------------------------------------------------------- trajectories
def test_trajectory_batches(store: HarnessStore):
    rid = store.create_run("eval", {})
    first = [trajectory(i) for i in range(3)]
    second = [trajectory(i, passed=False) for i in range(3, 5)]
    d1 = store.put_trajectories(rid, first)
    d2 = store.put_trajectories(rid, second, batch="retry")
    assert store.trajectory_batches(rid) == [("main", d1, 3), ("retry", d2, 2)]
    assert store.get_trajectories(rid) == first + second
    assert store.get_trajectories(rid, batch="retry") == second
    assert all(isinstance(t, Trajectory) for t in store.get_trajectories(rid))
    assert store.put_trajectories(rid, first) == d1  # identical re-put is a no-op
    assert len(store.trajectory_batches(rid)) == 2
    with pytest.raises(StoreError, match="already has a different trajectory batch 'main'"):
        store.put_trajectories(rid, second)
    with pytest.raises(StoreError, match="no trajectory batch 'nope'"):
        store.get_trajectories(rid, batch="nope")
    with pytest.raises(StoreError, match="unknown run"):
        store.put_trajectories("nope", first)
    empty = store.create_run("eval", {})
    assert store.get_trajectories(empty) == []


# ------------------------------------------------------------------------------------- events
def test_events(store: HarnessStore):
    a = store.create_run("evolve", {})
    b = store.create_run("evolve", {})
    s1 = store.append_event(a, "propose", {"edit": 1})
    s2 = store.append_event(b, "propose", {"edit": 2})
    s3 = store.append_event(a, "accept", {"gain": 0.1, "ids": ["x"]})
    assert s1 < s2 < s3
    evs = store.events(a)
    assert all(isinstance(e, Event) for e in evs)
    assert [(e.seq, e.run_id, e.kind, e.payload) for e in evs] == [
        (s1, a, "propose", {"edit": 1}),
        (s3, a, "accept", {"gain": 0.1, "ids": ["x"]}),
    ]
    assert [e.seq for e in store.events(a, "accept")] == [s3]
    assert [e.seq for e in store.events(a, after=s1)] == [s3]
    assert store.events(b, "accept") == []
    with pytest.raises(StoreError, match="unknown run"):
        store.append_event("nope", "x", {})
    assert [e.seq for e in store.events(a)] == [s1, s3]


# ------------------------------------------------------------------------------------- adapters
def test_adapters(store: HarnessStore):
    a = AdapterRef("adapter-1", "qwen-tiny", "/models/a1", "d" * 64, {"lr": 1e-4, "epochs": 2})
    b = AdapterRef("adapter-2", "qwen-tiny", "/models/a2", "e" * 64, {"lr": 2e-4}, {"val": 0.5})
    store.put_adapter(a)
    store.put_adapter(b)
    assert store.get_adapter("adapter-1") == a
    assert store.list_adapters() == [a, b]
    a2 = dataclasses.replace(a, metrics={"val": 0.7})
    store.put_adapter(a2)
    assert store.get_adapter("adapter-1") == a2
    assert store.list_adapters() == [a2, b]
    with pytest.raises(StoreError, match="unknown adapter 'adapter-9'"):
        store.get_adapter("adapter-9")


# ------------------------------------------------------------------------------------- counterfactual cache
def test_counterfactual_cache_round_trip_replace_and_reopen(tmp_path: Path):
    root = tmp_path / "s"
    a, b = ("t" * 64, BASE.id), ("u" * 64, BASE.id)
    other_harness = ("t" * 64, variant(1).id)
    with HarnessStore(root) as s:
        assert s.get_counterfactuals([a]) == {}
        s.put_counterfactuals({
            a: {"version": 1, "deviations": [{"turn": 1, "category": "planning"}], "decisive_turn": 1},
            b: {"version": 1, "deviations": [], "decisive_turn": None},
        })
        assert s.get_counterfactuals([a])[a]["decisive_turn"] == 1
        assert s.get_counterfactuals([other_harness]) == {}  # keyed by the harness too
        s.put_counterfactuals({b: {"version": 1, "deviations": [], "decisive_turn": 0}})  # replaces
        s.put_counterfactuals({})  # nothing to write is no write
        for bad_key in (("only-one",), ("", BASE.id), "t" * 64):
            with pytest.raises(StoreError, match="keyed by"):
                s.put_counterfactuals({bad_key: {}})  # type: ignore[dict-item]
        with pytest.raises(StoreError, match="is a dict"):
            s.put_counterfactuals({a: [1]})  # type: ignore[dict-item]
    again = HarnessStore(root, create=False)
    got = again.get_counterfactuals([a, b, other_harness])
    assert set(got) == {a, b} and got[b]["decisive_turn"] == 0
    assert got[a]["deviations"][0]["category"] == "planning"
    many = {(f"{i:064x}", BASE.id): {"decisive_turn": i} for i in range(1000)}  # more than one query binds
    again.put_counterfactuals(many)
    assert again.get_counterfactuals(list(many)) == many


def test_a_schema_2_store_gains_the_counterfactual_cache_when_opened(tmp_path: Path):
    root = tmp_path / "s"
    with HarnessStore(root) as s:
        s.put_harness(BASE)
        rid = s.create_run("eval", {})
        s.put_trajectories(rid, [trajectory(0)])
    with sqlite3.connect(root / "store.db") as c:  # as a schema-2 store was: no cache table
        c.executescript("DROP TABLE counterfactuals; UPDATE meta SET value = '2' WHERE key = 'schema';")
    c.close()
    again = HarnessStore(root, create=False)
    assert again.get_trajectories(rid) == [trajectory(0)]
    key = ("t" * 64, BASE.id)
    again.put_counterfactuals({key: {"decisive_turn": 2}})
    assert again.get_counterfactuals([key]) == {key: {"decisive_turn": 2}}
    with sqlite3.connect(root / "store.db") as c:
        assert c.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone() == (str(SCHEMA_VERSION),)
    c.close()


def test_a_store_of_a_newer_schema_is_refused(tmp_path: Path):
    root = tmp_path / "s"
    HarnessStore(root).close()
    with sqlite3.connect(root / "store.db") as c:
        c.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (str(SCHEMA_VERSION + 1),))
    c.close()
    with pytest.raises(StoreError, match=f"schema version {SCHEMA_VERSION + 1}; this code reads {SCHEMA_VERSION}"):
        HarnessStore(root, create=False)


# ------------------------------------------------------------------------------------- persistence
def test_reopen_and_pickle_see_everything(tmp_path: Path):
    root = tmp_path / "s"
    with HarnessStore(root) as s:
        s.put_harness(BASE)
        s.set_alias("iot:baseline", BASE.id)
        rid = s.create_run("eval", {"k": 1})
        s.put_trajectories(rid, [trajectory(0)])
        s.append_event(rid, "start", {})
    again = HarnessStore(root, create=False)
    assert again.resolve_harness("baseline", "iot") == BASE
    assert again.get_trajectories(rid) == [trajectory(0)]
    assert [e.kind for e in again.events(rid)] == ["start"]
    clone = pickle.loads(pickle.dumps(again))
    assert clone.get_run(rid).config == {"k": 1}
    with sqlite3.connect(root / "store.db") as c:
        assert c.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


# ------------------------------------------------------------------------------------- refusals to open
def test_store_path_is_a_file(tmp_path: Path):
    f = tmp_path / "store"
    f.write_bytes(b"not a store")
    before = listing(tmp_path)
    with pytest.raises(StoreError, match="exists and is not a directory"):
        HarnessStore(f)
    assert listing(tmp_path) == before


def test_corrupt_db(tmp_path: Path):
    root = tmp_path / "store"
    root.mkdir()
    (root / "store.db").write_bytes(b"this is not sqlite at all" * 100)
    before = listing(tmp_path)
    with pytest.raises(StoreError, match="not a readable harness store") as info:
        HarnessStore(root)
    assert "\n" not in str(info.value)
    assert listing(tmp_path) == before


def test_foreign_sqlite_db(tmp_path: Path):
    root = tmp_path / "store"
    root.mkdir()
    with sqlite3.connect(root / "store.db") as c:
        c.execute("CREATE TABLE songs (title TEXT)")
    c.close()
    before = listing(tmp_path)
    with pytest.raises(StoreError, match="not a harness store"):
        HarnessStore(root)
    assert listing(tmp_path) == before


def test_create_false_on_missing_or_empty_dir(tmp_path: Path):
    with pytest.raises(StoreError, match="no harness store"):
        HarnessStore(tmp_path / "missing" / "store", create=False)
    assert listing(tmp_path) == {}
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreError, match="no harness store"):
        HarnessStore(tmp_path / "empty", create=False)
    assert listing(tmp_path) == {"empty": None}


def test_non_empty_dir_without_db(tmp_path: Path):
    root = tmp_path / "project"
    root.mkdir()
    (root / "notes.txt").write_text("mine")
    before = listing(tmp_path)
    with pytest.raises(StoreError, match="is not a harness store"):
        HarnessStore(root)
    assert listing(tmp_path) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions")
def test_unreadable_dir(tmp_path: Path):  # pragma: no cover - CI runs as root
    root = tmp_path / "store"
    HarnessStore(root).close()
    root.chmod(0o000)
    try:
        with pytest.raises(StoreError, match="not readable"):
            HarnessStore(root)
    finally:
        root.chmod(0o755)


# ------------------------------------------------------------------------------------- concurrency
N_WRITERS = 4
N_VARIANTS = 50


def _writer(root: str, worker: int, barrier) -> None:
    store = HarnessStore(root)  # every writer also races to create the store
    barrier.wait(timeout=60)
    store.put_harness(BASE)  # the same record and blob from every process at once
    rid = store.create_run("evolve", {"worker": worker})
    for i in range(N_VARIANTS):
        v = variant(worker * 1000 + i)
        edit = HarnessEdit((SetSection("v", f"variant {worker * 1000 + i}"),), rationale=f"w{worker} i{i}")
        store.put_harness(
            v, parent=BASE.id, edit=edit, rationale=edit.rationale, run_id=rid, val_gain=i / 100
        )
        store.append_event(rid, "accept", {"worker": worker, "i": i, "harness": v.id})
    store.put_trajectories(rid, [trajectory(worker)])
    store.set_alias(f"iot:w{worker}", variant(worker * 1000).id)
    store.finish_run(rid, "ok", {"variants": N_VARIANTS})
    store.close()


def test_concurrent_writer_processes(tmp_path: Path):
    root = tmp_path / "store"
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(N_WRITERS)
    procs = [ctx.Process(target=_writer, args=(str(root), w, barrier)) for w in range(N_WRITERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0] * N_WRITERS

    store = HarnessStore(root, create=False)
    recs = {r.id: r for r in store.list_harnesses("iot")}
    assert len(recs) == 1 + N_WRITERS * N_VARIANTS
    runs = store.list_runs("evolve")
    assert len(runs) == N_WRITERS and {r.status for r in runs} == {"ok"}
    seqs: list[int] = []
    for run in runs:
        w = run.config["worker"]
        evs = store.events(run.run_id)
        assert [e.payload["i"] for e in evs] == list(range(N_VARIANTS))
        seqs += [e.seq for e in evs]
        for i, e in enumerate(evs):
            v = variant(w * 1000 + i)
            assert e.payload["harness"] == v.id
            rec = recs[v.id]
            assert (rec.parent, rec.run_id, rec.rationale) == (BASE.id, run.run_id, f"w{w} i{i}")
            assert store.get_harness(v.id[:10]) == v
        assert store.get_trajectories(run.run_id) == [trajectory(w)]
        assert store.get_harness(f"iot:w{w}") == variant(w * 1000)
    assert len(set(seqs)) == N_WRITERS * N_VARIANTS
    assert len(store.children(BASE.id)) == N_WRITERS * N_VARIANTS
    assert store.integrity_check() == "ok"
    with sqlite3.connect(root / "store.db") as c:
        assert c.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    c.close()
    leftovers = [p for p in (root / "objects").rglob(".tmp*")]
    assert leftovers == []
    assert store.get_harness(BASE.id) == BASE  # the blob every writer raced to write is intact
