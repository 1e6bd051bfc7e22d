"""The actor lifecycle every pool shares: `ActorPool`, actors of one worker class started with their
placement resources and waited for until ready; an actor lost (its node died, it was killed, Ray's memory
monitor took it) is replaced by a new one kept off the node it was lost with, the lost one is killed
(one merely unreachable may still run), and the work it had is re-run. The rollout pool (`rollouts.py`)
and the role pools (`roles.py`) say only what differs: the worker, its arguments, what counts as lost.
"""

from __future__ import annotations

import itertools
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, ClassVar

import ray
import structlog
from ray.exceptions import ActorDiedError, ActorUnavailableError, OutOfMemoryError, RayActorError

from coevolve.errors import BadInput
from coevolve.services.secrets import SECRET_BEARING_VARIABLES, put_worker_secrets
from coevolve.settings import SECRET_BEARING, environment, variable

log = structlog.get_logger(role="pool")
_SECRET_NAME = re.compile(r"(?i)(key|token|secret|password|credential)")  # a LITELLM_* setting kept out of runtime_env
# What a call raises when its actor is lost. Ray's memory monitor kills the worker of an actor whose call
# runs when the node runs low on memory: the call fails with OutOfMemoryError and the actor is gone.
ACTOR_LOST = (RayActorError, ActorDiedError, ActorUnavailableError, OutOfMemoryError)
SCHEDULING = ("SPREAD", "DEFAULT")  # Ray scheduling strategies the pools accept by name
NODE_ID_LABEL = "ray.io/node-id"  # the label Ray gives every node: its node id
READY_TIMEOUT_ENV = variable("actor_ready_timeout_s")
DEFAULT_READY_TIMEOUT_S = 180.0


class ActorsNotReady(BadInput):
    """Actors the cluster cannot place (or start) in time: one line naming what was asked and what
    the cluster has (a ValueError, so the CLI reports it as bad input)."""


def ready_timeout(explicit: float | None = None) -> float:
    if explicit is not None:
        return explicit
    raw = environment().actor_ready_timeout_s
    try:
        return float(raw) if raw else DEFAULT_READY_TIMEOUT_S
    except ValueError:
        raise BadInput(f"${READY_TIMEOUT_ENV} must be a number of seconds, got {raw!r}") from None


def wait_ready(actors: list[Any], what: str, cpus_each: float, timeout_s: float | None = None,
               resources: dict[str, float] | None = None) -> None:
    """Wait until every actor answers `ready()`; if some do not within the timeout (the cluster cannot
    schedule them, or they are slow or hang starting), kill them all and raise `ActorsNotReady`, whose
    message says which of the two it was. `resources`: the custom resources each actor needs."""
    timeout = ready_timeout(timeout_s)
    refs = [a.ready.remote() for a in actors]
    done, pending = ray.wait(refs, num_returns=len(refs), timeout=timeout)
    if pending:
        cluster = ray.cluster_resources()
        total = cluster.get("CPU", 0.0)
        free = ray.available_resources().get("CPU", 0.0)
        for a in actors:
            ray.kill(a)
        asked = len(actors) * cpus_each
        if asked > total or any(cluster.get(k, 0.0) < v * len(actors) for k, v in (resources or {}).items()):
            hint = "Use fewer workers, or more time for a cluster that is still scaling up"
        else:  # room for them: placed, then slow to start (each imports the model libraries) or hung
            hint = ("The cluster has the CPUs for them: they started too slowly (a loaded machine) or hung "
                    "starting (Ray's worker logs say which); give them more time")
        raise ActorsNotReady(
            f"{len(pending)} of {len(actors)} {what} actors did not start within {timeout:g}s: asked for "
            f"{len(actors)} x {cpus_each:g} CPU = {asked:g} CPUs; the cluster has {total:g} CPUs, "
            f"{free:g} free. {hint} (${READY_TIMEOUT_ENV})"
        )
    ray.get(done)  # an actor whose constructor failed raises here


class Load:
    """A pool's work as `coevolve monitor` shows it: per actor, the calls in flight and those finished
    (with their rate since the pool started), and the jobs queued in the pool, not yet sent to any actor."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._in_flight: Counter[str] = Counter()
        self._done: Counter[str] = Counter()
        self.queued = 0
        self._started = time.monotonic()

    def enqueue(self, n: int) -> None:
        with self._lock:
            self.queued += n

    def send(self, actor: Any, *, from_queue: bool = False) -> None:
        with self._lock:
            self._in_flight[actor_id(actor)] += 1
            self.queued -= from_queue

    def back(self, actor: Any, *, ok: bool = True) -> None:
        with self._lock:
            key = actor_id(actor)
            self._in_flight[key] -= 1
            self._done[key] += ok

    @contextmanager
    def working(self, actor: Any) -> Iterator[None]:
        """One call on `actor`: in flight inside the block, finished if the block returns."""
        self.send(actor)
        ok = False
        try:
            yield
            ok = True
        finally:
            self.back(actor, ok=ok)

    def as_json(self, actors: Sequence[Any]) -> dict[str, Any]:
        with self._lock:
            elapsed = max(time.monotonic() - self._started, 1e-9)
            per_actor = {
                key: {"in_flight": self._in_flight[key], "done": self._done[key], "per_s": round(self._done[key] / elapsed, 3)}
                for key in map(actor_id, actors)
            }
            return {"queued": self.queued, "actors": per_actor}


def actor_id(actor: Any) -> str:
    """The hex id Ray's actor table lists an actor handle under."""
    return actor._actor_id.hex()


def worker_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The runtime_env variables of project actors (Ray writes them to its logs, so none may hold a key):
    the project's settings (COEVOLVE_*) but those that may hold a key, which are put in the cluster's
    key-value store and only their key is passed (`coevolve.services.secrets.put_worker_secrets`; the
    actor's gateway loads them), and litellm's settings (LITELLM_*) but those whose name says key, token,
    secret, password or credential (an actor reads those from the secrets file). `extra` comes on top;
    Ray must be initialised when a setting that may hold a key is set."""
    env = {k: v for k, v in os.environ.items()
           if (k.startswith("COEVOLVE_") and k not in SECRET_BEARING_VARIABLES)
           or (k.startswith("LITELLM_") and not _SECRET_NAME.search(k))}
    env.update(extra or {})
    now = environment()
    secret = {f: getattr(now, f) for f in SECRET_BEARING if getattr(now, f)}
    secret.update({f: env.pop(variable(f)) for f in SECRET_BEARING if variable(f) in env})
    if secret:
        env[variable("worker_secrets")] = put_worker_secrets(secret)
    return env


def avoiding(node_id: str | None) -> dict[str, Any]:
    """Actor options that keep a replacement off the node its predecessor was lost with: until Ray's
    health check declares that node dead (seconds), Ray still offers it, and an actor placed there would
    die in turn. Soft: where no other node qualifies (one node, or the others full) the fallback
    places it anywhere, that node included."""
    if not node_id:
        return {}
    return {"label_selector": {NODE_ID_LABEL: f"!{node_id}"}, "fallback_strategy": [{"label_selector": {}}]}


def placement_resources(resources: dict[str, float] | None) -> dict[str, float]:
    """Custom resources an actor asks for (CPUs and GPUs have their own options)."""
    out = {str(k): float(v) for k, v in (resources or {}).items()}
    bad = [k for k, v in out.items() if k in ("CPU", "GPU") or v < 0]
    if bad:
        raise BadInput(f"resources must be custom resources with amounts >= 0 (use num_cpus for CPUs): {', '.join(bad)}")
    return out


def scheduling_strategy(name: str) -> str:
    if name not in SCHEDULING:
        raise BadInput(f"scheduling must be one of {', '.join(SCHEDULING)}, got {name!r}")
    return name


def describe(what: str, resources: dict[str, float]) -> str:
    """`what` for `wait_ready`'s message, naming the custom resources each actor needs."""
    if not resources:
        return what
    return f"{what} ({', '.join(f'{k}={v:g}' for k, v in resources.items())} each)"


class Worker:
    """What every pool actor answers besides its work (a plain class; the pool makes it an actor)."""

    def ready(self) -> int:
        return os.getpid()

    def node_id(self) -> str:
        """The Ray node this actor runs on (a replacement for it, if it is lost, avoids that node)."""
        return ray.get_runtime_context().get_node_id()


class ActorPool:
    """`workers` actors of the class's `worker`, called `what` in messages. `call` runs a method on the
    next actor (round robin) and re-runs it on a replacement when the actor is lost (any of `lost`), up
    to `max_replacements` in the pool's life. `resources`: custom Ray resources each actor needs besides
    its CPUs (e.g. `{"roles": 1}` to run only on nodes that advertise `roles`); `scheduling`: "SPREAD"
    (actors spread over the nodes that qualify) or "DEFAULT" (Ray packs them). Neither pins a node: a
    replacement goes to another node that qualifies (see `avoiding`)."""

    worker: ClassVar[type[Worker]]
    lost: ClassVar[tuple[type[BaseException], ...]] = ACTOR_LOST

    def __init__(self, what: str, workers: int, *, args: tuple[Any, ...] = (), num_cpus: float, max_concurrency: int,
                 env: dict[str, str] | None = None, resources: dict[str, float] | None = None,
                 scheduling: str = "DEFAULT", max_replacements: int = 8, ready_timeout_s: float | None = None):
        if workers < 1:
            raise BadInput("workers must be >= 1")
        self.what = what
        self._args = args
        self.resources = placement_resources(resources)
        self.scheduling = scheduling_strategy(scheduling)
        self.num_cpus = num_cpus
        self.max_concurrency = max_concurrency
        self._env = worker_env(env)
        self.max_replacements = max_replacements
        self.replacements = 0
        self._turn = itertools.count()
        self._lock = threading.RLock()
        self._nodes: dict[Any, Any] = {}  # actor -> ref to its node id
        self.load = Load()
        self.actors = [self._spawn() for _ in range(workers)]
        wait_ready(self.actors, describe(what, self.resources), num_cpus, ready_timeout_s, self.resources)

    def actor_name(self) -> str | None:
        """The name a new actor shows under in Ray's actor table (None: unnamed)."""
        return None

    def _spawn(self, avoid_node: str | None = None) -> Any:
        actor = ray.remote(self.worker).options(
            name=self.actor_name(),
            num_cpus=self.num_cpus,
            max_concurrency=self.max_concurrency,
            runtime_env={"env_vars": self._env},
            scheduling_strategy=self.scheduling,
            **({"resources": self.resources} if self.resources else {}),
            **avoiding(avoid_node),
        ).remote(*self._args)
        self._nodes[actor] = actor.node_id.remote()
        return actor

    @staticmethod
    def put(value: bytes) -> Any:
        """`value` in Ray's object store: a reference any number of calls can take as an argument (Ray
        hands each actor the value), so it is sent once however many calls read it."""
        return ray.put(value)

    def call(self, method: str, *args: Any) -> Any:
        """`method(*args)` on the next actor, re-run on a replacement while the actor it ran on is lost."""
        while True:
            with self._lock:
                actor = self.actors[next(self._turn) % len(self.actors)]
            try:
                with self.load.working(actor):
                    return ray.get(getattr(actor, method).remote(*args))
            except self.lost as e:
                self._replace(actor, e)

    def _replace(self, actor: Any, error: Exception) -> None:
        with self._lock:
            if actor not in self.actors:
                return  # already replaced (several calls in flight on it report the same loss)
            self.replacements += 1
            if self.replacements > self.max_replacements:
                raise RuntimeError(f"{self.what} actors keep dying ({self.replacements} replaced): {error}") from error
            log.warning("actor lost; re-running its work on a new actor", pool=self.what, error=str(error)[:200])
            self.actors[self.actors.index(actor)] = self._spawn(avoid_node=self._node_of(actor))
            _kill_quietly(actor)  # one merely unreachable may still run: it must not linger beside its replacement

    def _node_of(self, actor: Any) -> str | None:
        """The node a lost actor ran on, if it said so before it was lost."""
        ref = self._nodes.pop(actor, None)
        if ref is None:
            return None
        try:
            return ray.get(ref, timeout=0)
        except Exception:  # noqa: BLE001 - lost before it answered: the replacement may go anywhere
            return None

    def shutdown(self) -> None:
        for a in self.actors:
            ray.kill(a)
        self.actors = []
        self._nodes.clear()


def start_pools(*makers: Callable[[], ActorPool | None]) -> list[Any]:
    """The pools the makers build (None where a maker builds none), started at once: each pool's actors
    start while the others' do (each actor imports the model libraries), instead of one pool after
    another. If any fails to start, the ones that started are shut down and its error is raised."""
    with ThreadPoolExecutor(len(makers)) as ex:
        futures = [ex.submit(make) for make in makers]
    pools, errors = [], []
    for f in futures:
        try:
            pools.append(f.result())
        except BaseException as e:  # noqa: BLE001 - raised below, once the others are shut down
            errors.append(e)
    if errors:
        for pool in pools:
            if pool is not None:
                pool.shutdown()
        raise errors[0]
    return pools


def _kill_quietly(actor: Any) -> None:
    try:
        ray.kill(actor, no_restart=True)
    except Exception as e:  # noqa: BLE001 - already dead or its node gone: nothing left to stop
        log.debug("lost actor could not be killed", error=str(e)[:200])
