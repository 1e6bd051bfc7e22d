"""Several Ray nodes on one machine (`ray.cluster_utils.Cluster`): executor actors spread over the nodes
that advertise `executor`, the judge and the expert land only on the node that advertises `roles`, and
removing an executor node mid-batch loses no rollout and the batch finishes.

The scenario runs in a subprocess of its own: the session's single-node Ray (`ray_session`) and this
four-node cluster cannot share one driver, and a subprocess leaves nothing behind for later tests. The
cluster keeps Ray's token authentication on, with a token of its own (owner-only file in the test's tmp
dir, `RAY_AUTH_TOKEN_PATH`) that every node and worker inherits, and binds every node to loopback. The
driver attaches through `coevolve.cluster.runtime.start_ray(address=...)`, the CLI's path to a remote cluster.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FAMILY, SPLIT, MODEL, SEED, ROLLOUTS = "iot", "train", "synthetic/weak", 7, 60
EXECUTOR_NODES = 2
LATENCY_MS = 100  # per model call: every rollout is in flight for a while, so a node loss hits some
REMOVE_AFTER = 8  # results before the executor node goes
STARTUP_TIMEOUT_RC = 75  # the scenario's exit status when a Ray node did not come up in time
SCENARIO_TIMEOUT_S = 480  # guards against a hang; on 2 idle cores the scenario takes ~1.5 min


@pytest.mark.slow  # ~1 min; make test keeps the rollout and role pools' lost-actor tests (test_pool, test_role_pool)
def test_executors_spread_roles_placed_and_a_node_loss_loses_no_rollout(tmp_path):
    from coevolve.codec import decode
    from coevolve.tasks import get_family
    from tests.rollouts import rollout_all

    out = tmp_path / "result.json"
    env = _scenario_env(tmp_path)
    started = time.monotonic()
    rc, log = _run_scenario(out, env)
    if rc == STARTUP_TIMEOUT_RC:  # Ray's fixed 30 s for a node to register ran out: once more, never for more
        print(f"a Ray node did not register in time (busy machine); starting the scenario again:\n{log[-2000:]}")
        rc, log = _run_scenario(out, env)
    assert rc == 0, f"multi-node scenario failed (rc {rc}):\n{log[-8000:]}"
    r = json.loads(out.read_text())
    print(f"multi-node scenario: {time.monotonic() - started:.1f}s; {json.dumps(r['timings'])}")

    # placement follows resources: executors spread over both executor nodes, roles only on the roles node
    assert set(r["executor_nodes"]) == set(r["nodes"]["executor"])
    assert set(r["role_nodes"]) == {r["nodes"]["roles"]}
    assert r["judge_works"]
    # the removed node's actors were replaced, on the surviving executor node only
    assert r["victim"] in r["executor_nodes"]
    # one replacement per lost actor: none was placed on the dead node before Ray declared it dead
    assert r["replacements"] == r["executor_nodes"].count(r["victim"]) >= 1
    assert set(r["final_executor_nodes"]) == set(r["nodes"]["executor"]) - {r["victim"]}
    assert r["results_before_removal"] >= REMOVE_AFTER and r["results_before_removal"] < ROLLOUTS

    # every rollout back, in order, exactly once, equal to the same rollouts run in-process
    fam = get_family(FAMILY)
    insts = fam.generate(SPLIT, ROLLOUTS, seed=SEED)
    trajs = [decode(bytes.fromhex(t)) for t in r["trajectories"]]
    assert sorted(r["reported"]) == list(range(ROLLOUTS))  # on_result once per rollout
    assert [t.instance.id for t in trajs] == [i.id for i in insts]
    assert all(t.error == "none" for t in trajs)
    local = rollout_all(insts, fam.baseline_harness(), MODEL, seed=SEED)
    assert [t.messages for t in trajs] == [t.messages for t in local]
    assert [t.passed for t in trajs] == [t.passed for t in local]


def test_placement_options_are_checked_before_any_actor_starts():


    from coevolve.services.pools.base import avoiding
    from coevolve.services.pools.roles import RolePool
    from coevolve.services.pools.rollouts import RolloutPool

    with pytest.raises(ValueError, match="scheduling"):
        RolloutPool(1, scheduling="PACK")
    with pytest.raises(ValueError, match="num_cpus"):
        RolloutPool(1, resources={"CPU": 1})
    with pytest.raises(ValueError, match="resources"):
        RolePool("judge", "synthetic/judge", 1, resources={"roles": -1})
    assert avoiding(None) == {}
    assert avoiding("ab12")["label_selector"] == {"ray.io/node-id": "!ab12"}


def _run_scenario(out: Path, env: dict[str, str]) -> tuple[int, str]:
    # Ray's own temp dir (sessions, sockets, the "current cluster" address file) apart from any other Ray
    # on this machine, and short: socket paths must stay under ~107 characters
    ray_tmp = tempfile.mkdtemp(prefix="coevolve-mn-", dir="/tmp")
    try:
        proc = subprocess.Popen(
            [sys.executable, __file__, str(out)], cwd=ROOT, env={**env, "RAY_TMPDIR": ray_tmp},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )
        try:
            log, _ = proc.communicate(timeout=SCENARIO_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the driver and every node it started
            log, _ = proc.communicate()
            raise AssertionError(f"multi-node scenario ran past {SCENARIO_TIMEOUT_S}s:\n{log[-8000:]}") from None
        finally:
            _kill_group(proc.pid)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    return proc.returncode, log


def _scenario_env(tmp: Path) -> dict[str, str]:
    token = tmp / "ray_auth_token"
    fd = os.open(token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_ADDRESS", "RAY_AUTH_"))}
    env.update({
        "RAY_AUTH_MODE": "token",  # the nodes started by Cluster check it, and so does the driver
        "RAY_AUTH_TOKEN_PATH": str(token),
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # every node's address resolves to 127.0.0.1
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_DEDUP_LOGS": "0",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p),
    })
    return env


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)  # anything the scenario left running (it normally leaves nothing)
    except (ProcessLookupError, PermissionError):
        pass


# ---------------------------------------------------------------------------------- the scenario
def _node_of(actor) -> str:
    import ray

    ray.get(actor.ready.remote())  # alive, hence placed
    return ray._private.state.actors(actor._actor_id.hex())["Address"]["NodeID"]


def scenario(out: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from ray.cluster_utils import Cluster

    from coevolve.cluster.runtime import LOOPBACK, start_ray, stop_ray
    from coevolve.codec import encode
    from coevolve.services.pools.roles import RolePool
    from coevolve.services.pools.rollouts import RolloutJob, RolloutPool
    from coevolve.tasks import get_family

    t0 = time.monotonic()
    timings: dict[str, float] = {}
    cluster = Cluster()
    try:
        try:
            # the head runs the driver and Ray's control plane, no work
            cluster.add_node(num_cpus=0, include_dashboard=False, node_ip_address=LOOPBACK)
            executor_nodes = [
                cluster.add_node(num_cpus=1, resources={"executor": 4}, node_ip_address=LOOPBACK)
                for _ in range(EXECUTOR_NODES)
            ]
            roles_node = cluster.add_node(num_cpus=1, resources={"roles": 4}, node_ip_address=LOOPBACK)
            cluster.wait_for_nodes()
        except Exception as e:
            # Ray gives a node a fixed 30 s to register with the GCS: too little on a saturated machine
            if "timed out during startup" in str(e):
                print(f"{type(e).__name__}: {e}", flush=True)
                sys.exit(STARTUP_TIMEOUT_RC)
            raise
        start_ray(address=cluster.address, log_to_driver=False)
        timings["cluster_s"] = round(time.monotonic() - t0, 1)

        fam = get_family(FAMILY)
        insts = fam.generate(SPLIT, ROLLOUTS, seed=SEED)
        harness = fam.baseline_harness()
        ready = {"ready_timeout_s": 300.0}  # generous: actors start slowly on a busy 2-core machine
        with ThreadPoolExecutor(3) as ex:  # the three pools start side by side
            pool_f = ex.submit(
                RolloutPool, 2 * EXECUTOR_NODES, num_cpus=0.25, resources={"executor": 1},
                env={"COEVOLVE_SYNTHETIC_LATENCY_MS": str(LATENCY_MS)}, **ready,
            )
            judges_f = ex.submit(RolePool, "judge", "synthetic/judge", 1, resources={"roles": 1}, **ready)
            experts_f = ex.submit(RolePool, "expert", "synthetic/expert", 1, resources={"roles": 1}, **ready)
            pool, judges, experts = pool_f.result(), judges_f.result(), experts_f.result()
        timings["actors_s"] = round(time.monotonic() - t0, 1)
        executor_at = [_node_of(a) for a in pool.actors]
        role_at = [_node_of(a) for a in judges.actors + experts.actors]
        victim = executor_at[0]
        victim_node = next(n for n in executor_nodes if n.node_id == victim)

        reported: list[int] = []
        removed_after: list[int] = []

        def on_result(i: int, traj) -> None:
            reported.append(i)
            if len(reported) == REMOVE_AFTER:
                # as if the machine died: raylet, workers and their in-flight rollouts go at once (SIGKILL)
                cluster.remove_node(victim_node, allow_graceful=False)
                removed_after.append(len(reported))
                timings["removed_at_s"] = round(time.monotonic() - t0, 1)

        trajs = pool.run([RolloutJob(i, harness, MODEL, SEED) for i in insts], on_result=on_result, max_in_flight=24)
        timings["batch_done_s"] = round(time.monotonic() - t0, 1)
        failed = next((t for t in trajs if not t.passed), trajs[0])
        locus, _ = judges.call("locate", encode(failed))
        result = {
            "nodes": {"executor": [n.node_id for n in executor_nodes], "roles": roles_node.node_id},
            "executor_nodes": executor_at,
            "role_nodes": role_at,
            "judge_works": bool(locus),
            "victim": victim,
            "results_before_removal": removed_after[0] if removed_after else -1,
            "replacements": pool.replacements,
            "final_executor_nodes": [_node_of(a) for a in pool.actors],
            "reported": reported,
            "trajectories": [encode(t).hex() for t in trajs],
            "timings": timings,
        }
        for p in (pool, judges, experts):
            p.shutdown()
        out.write_text(json.dumps(result))
    finally:
        stop_ray()
        cluster.shutdown()


if __name__ == "__main__":
    scenario(Path(sys.argv[1]))
