"""The Ray rollout pool: order, equivalence with in-process rollouts, and actor loss."""

from __future__ import annotations

import threading
import time

import pytest
import ray

from coevolve.services.pools import base
from coevolve.services.pools.rollouts import RolloutJob, RolloutPool
from coevolve.tasks import get_family
from tests.rollouts import rollout_all

FAM = get_family("iot")


def test_pool_results_in_submission_order_and_equal_to_in_process(ray_session):
    insts = FAM.generate("val", 12, seed=5)
    h = FAM.baseline_harness()
    pool = RolloutPool(2)
    try:
        trajs = pool.run([RolloutJob(i, h, "synthetic/weak", 3) for i in insts])
    finally:
        pool.shutdown()
    assert [t.instance.id for t in trajs] == [i.id for i in insts]
    local = rollout_all(insts, h, "synthetic/weak", seed=3)
    assert [t.messages for t in trajs] == [t.messages for t in local]
    assert [t.passed for t in trajs] == [t.passed for t in local]


def test_the_pools_load_counts_queued_in_flight_and_finished_rollouts_per_actor(ray_session):
    insts = FAM.generate("val", 16)
    h = FAM.baseline_harness()
    pool = RolloutPool(2, env={"COEVOLVE_SYNTHETIC_LATENCY_MS": "20"}, max_in_flight=4)  # the pool's cap, not the run's
    seen = []
    try:
        pool.run([RolloutJob(i, h, "synthetic/weak", 0) for i in insts],
                 on_result=lambda i, t: seen.append(pool.load.as_json(pool.actors)))
        final = pool.load.as_json(pool.actors)
        # two batches at once (two families of a run) share the cap: at most 4 in flight between them
        side_by_side: dict[int, list] = {}
        threads = [threading.Thread(target=lambda n=n: side_by_side.update({n: pool.run(
            [RolloutJob(i, h, "synthetic/weak", n) for i in insts[:8]], on_result=lambda i, t: seen.append(pool.load.as_json(pool.actors)))}))
            for n in (1, 2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        pool.shutdown()
    first = seen[0]  # one came back: three still out, 12 queued, one sent in its place
    assert first["queued"] == 11 and sum(w["in_flight"] for w in first["actors"].values()) == 4
    assert final["queued"] == 0 and all(w["in_flight"] == 0 for w in final["actors"].values())
    assert sorted(w["done"] for w in final["actors"].values()) == [8, 8] and all(w["per_s"] > 0 for w in final["actors"].values())
    assert len(seen) == 32 and max(sum(w["in_flight"] for w in s["actors"].values()) for s in seen[16:]) <= 4
    assert {n: [t.seed for t in trajs] for n, trajs in side_by_side.items()} == {1: [1] * 8, 2: [2] * 8}


def test_a_batch_waiting_for_a_slot_gets_the_next_one_before_a_batch_that_holds_slots():
    from coevolve.services.pools.rollouts import _Slots

    slots = _Slots(1)
    assert slots.take(wait=False) and not slots.take(wait=False)  # batch A holds the one slot
    waiter = threading.Thread(target=slots.take, kwargs={"wait": True})  # batch B has none in flight: it waits
    waiter.start()
    while slots.waiting == 0:
        time.sleep(0.01)
    slots.give(1)  # A's rollout came back
    assert not slots.take(wait=False)  # A does not take it back while B waits
    waiter.join(timeout=10)
    assert not waiter.is_alive() and slots.free == 0 and slots.waiting == 0


def test_a_pool_refuses_a_cap_below_one_rollout_in_flight():
    with pytest.raises(ValueError, match="max_in_flight must be >= 1"):
        RolloutPool(2, max_in_flight=0)


def test_killing_an_actor_mid_batch_loses_no_rollout(ray_session):
    insts = FAM.generate("val", 30)
    h = FAM.baseline_harness()
    # a simulated 50 ms per model call keeps every rollout in flight long enough to be hit
    pool = RolloutPool(2, env={"COEVOLVE_SYNTHETIC_LATENCY_MS": "50"})
    killed = threading.Event()
    victim = pool.actors[0]

    def on_result(i, traj):
        if not killed.is_set():
            ray.kill(victim, no_restart=True)
            killed.set()

    try:
        trajs = pool.run([RolloutJob(i, h, "synthetic/expert", 0) for i in insts], on_result=on_result)
    finally:
        pool.shutdown()
    assert killed.is_set() and pool.replacements >= 1
    assert [t.instance.id for t in trajs] == [i.id for i in insts]
    assert all(t.error == "none" for t in trajs)
    local = rollout_all(insts, h, "synthetic/expert", seed=0)
    assert [t.passed for t in trajs] == [t.passed for t in local]  # the re-run rollouts are the same rollouts


def test_a_rollout_whose_result_ray_s_memory_monitor_took_is_re_run_on_a_replacement(ray_session, monkeypatch):
    """Ray's memory monitor kills an actor whose call runs when its node is low on memory: the result is an
    OutOfMemoryError, re-run on a replacement like a rollout whose actor died."""
    insts = FAM.generate("val", 8)
    h = FAM.baseline_harness()
    pool = RolloutPool(2)
    get, hit = ray.get, []

    def out_of_memory_once(refs, **kw):
        if not hit:
            hit.append(refs)
            raise ray.exceptions.OutOfMemoryError("Task was killed due to the node running low on memory (test)")
        return get(refs, **kw)

    try:
        monkeypatch.setattr(ray, "get", out_of_memory_once)
        trajs = pool.run([RolloutJob(i, h, "synthetic/expert", 0) for i in insts])
        monkeypatch.setattr(ray, "get", get)
    finally:
        pool.shutdown()
    assert hit and pool.replacements == 1
    assert [t.instance.id for t in trajs] == [i.id for i in insts] and all(t.error == "none" for t in trajs)
    local = rollout_all(insts, h, "synthetic/expert", seed=0)
    assert [t.passed for t in trajs] == [t.passed for t in local]


def test_actors_with_room_that_start_too_slowly_are_told_apart_from_actors_the_cluster_cannot_place(ray_session):
    class SlowToStart(base.Worker):  # defined here: Ray ships it by value (no worker imports this module)
        def __init__(self) -> None:
            time.sleep(60)

    class _SlowPool(base.ActorPool):
        worker = SlowToStart

    free = ray.available_resources().get("CPU", 0)
    with pytest.raises(base.ActorsNotReady, match=r"asked for 1 x 0.25 CPU = 0.25 CPUs; .* The cluster has the CPUs "
                                                  r"for them: they started too slowly"):
        _SlowPool("slow", 1, num_cpus=0.25, max_concurrency=1, ready_timeout_s=3)
    with pytest.raises(base.ActorsNotReady, match=r"Use fewer workers"):  # a resource no node has
        _SlowPool("slow", 1, num_cpus=0.25, max_concurrency=1, ready_timeout_s=3, resources={"nowhere": 1})
    deadline = time.monotonic() + 30
    while ray.available_resources().get("CPU", 0) < free and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray.available_resources().get("CPU", 0) >= free  # both were killed


class _Started:
    def __init__(self, barrier: threading.Barrier | None = None):
        if barrier is not None:
            barrier.wait()  # returns only once every maker is in here: the pools start at once
        self.shut = False

    def shutdown(self) -> None:
        self.shut = True


def test_start_pools_starts_every_pool_at_once():
    barrier = threading.Barrier(3, timeout=10)  # one after another, the first maker would wait here alone
    pools = base.start_pools(*(lambda: _Started(barrier) for _ in range(3)), lambda: None)
    assert len(pools) == 4 and pools[3] is None and not any(p.shut for p in pools[:3])


def test_start_pools_shuts_down_the_started_pools_when_one_fails():
    started = []

    def ok():
        started.append(_Started())
        return started[-1]

    def fails():
        raise base.ActorsNotReady("1 of 1 judge actors did not start")

    with pytest.raises(base.ActorsNotReady, match="judge actors did not start"):
        base.start_pools(ok, fails, lambda: None, ok)
    assert len(started) == 2 and all(p.shut for p in started)
