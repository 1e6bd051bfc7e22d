"""The role pools' actor lifecycle (`coevolve.services.pools.base.ActorPool`, as the rollout pool's): an
actor lost mid-call is replaced by one asked to avoid its node, the lost one is killed (one merely
unreachable may still run), and the call is re-run: it returns what the role answers in-process."""

from __future__ import annotations

import pytest
import ray
from ray.exceptions import ActorUnavailableError, RayActorError

from coevolve.agents.judge import Judge
from coevolve.codec import decode, encode
from coevolve.services.pools import base
from coevolve.services.pools.roles import RolePool
from coevolve.tasks import get_family
from tests.rollouts import FunctionClient, proposer_complete, rollout_all

FAM = get_family("iot")


def test_a_role_actor_lost_mid_call_is_replaced_off_its_node_killed_and_its_call_re_run(ray_session, monkeypatch):
    failed = next(t for t in rollout_all(FAM.generate("val", 8), FAM.baseline_harness(), "synthetic/weak") if not t.passed)
    pool = RolePool("judge", "synthetic/judge", 2)
    try:
        victim = pool.actors[0]  # the first call goes to it
        victim_node = ray.get(victim.node_id.remote())
        ray.get([a.node_id.remote() for a in pool.actors])  # every actor has said where it runs

        placements: list[dict] = []  # the placement options of each replacement
        kills: list[tuple[object, dict]] = []
        avoiding, kill, get, unreachable = base.avoiding, ray.kill, ray.get, [True]

        def placement(node_id):
            placements.append(avoiding(node_id))
            return placements[-1]

        def recorded_kill(actor, **kw):
            kills.append((actor, kw))
            return kill(actor, **kw)

        def get_once_unreachable(refs, **kw):  # the victim alive but out of reach, once
            if unreachable:
                unreachable.clear()
                raise ActorUnavailableError("unreachable (test)", victim._actor_id.binary())
            return get(refs, **kw)

        monkeypatch.setattr(base, "avoiding", placement)
        monkeypatch.setattr(ray, "kill", recorded_kill)
        monkeypatch.setattr(ray, "get", get_once_unreachable)
        locus, _ = pool.call("locate", encode(failed))
        monkeypatch.setattr(ray, "get", get)
        actors = list(pool.actors)
        ray.get([a.ready.remote() for a in actors])  # the replacement is up
    finally:
        pool.shutdown()

    assert pool.replacements == 1 and len(actors) == 2 and victim not in actors
    assert placements == [{"label_selector": {"ray.io/node-id": f"!{victim_node}"}, "fallback_strategy": [{"label_selector": {}}]}]
    assert (victim, {"no_restart": True}) in kills  # killed by the pool: it was still running
    with pytest.raises(RayActorError):
        ray.get(victim.ready.remote(), timeout=60)
    assert decode(locus) == Judge("synthetic/judge", FunctionClient(proposer_complete)).locate(failed)
