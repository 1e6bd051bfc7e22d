"""The testbed's counterfactual answer key, computed when analysis needs it, and cached (docs/ARCHITECTURE.md §5).

A failed synthetic rollout records, turn by turn, what its counterfactual needs: the oracle model that
knows the turn's fully informed action and the cause the model recorded (`ground_truth["turns"]`);
the harness is in the store by id; the trajectory names the instance, the model and the seed. Its
*deviations* (turns whose calls differ from the oracle's) and its *decisive turn* (the earliest turn
whose replacement by the oracle's action makes the rollout pass) cost an oracle call per turn plus
replay rollouts (`Executor.counterfactual`), so no rollout computes them: the analysis that reads
them (judge accuracy, failure composition, reports) calls `with_counterfactuals`, the one entry
point, which takes what the store has cached, computes only what is missing, and caches that.

Trajectories recorded before the counterfactual moved here carry it inline; those are used as they
are. A counterfactual whose search met an unavailable model (`counterfactual_error`) is returned but
not cached, so the next reader tries again.

Analysis code only: the answer key never reaches a role (they get `Trajectory.public_view()`).
Nothing here imports ray.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from coevolve.agents.executor import Executor
from coevolve.llm.contract import ModelClient
from coevolve.values import Harness, Trajectory

COUNTERFACTUAL_KEYS = ("deviations", "decisive_turn", "counterfactual_error")
# Bumped when the computation changes: a cached value of another version counts as missing.
COUNTERFACTUAL_VERSION = 1
DEFAULT_CONCURRENCY = 16
Progress = Callable[[int, int], None]  # (computed so far, to compute)
Key = tuple[str, str]  # (trajectory id, harness id)
Harnesses = Harness | Mapping[str, Harness] | Callable[[str], Harness]  # one, by id, or a lookup by id


class CounterfactualCache(Protocol):
    """What `HarnessStore` offers: counterfactuals by (trajectory id, harness id)."""

    read_only: str | None

    def get_counterfactuals(self, keys: Sequence[Key]) -> dict[Key, dict[str, Any]]: ...

    def put_counterfactuals(self, values: dict[Key, dict[str, Any]]) -> None: ...


def needs_counterfactual(t: Trajectory) -> bool:
    """A failed testbed rollout with per-turn records (passes, infra errors and rollouts of models
    that record nothing, i.e. real ones, have no counterfactual)."""
    return not t.passed and t.error != "infra" and any(t.ground_truth.get("turns") or ())


def inline_counterfactual(t: Trajectory) -> dict[str, Any] | None:
    """The counterfactual a trajectory already carries in its ground truth (recorded inline by code
    before this module, or merged by `with_counterfactuals`), else None."""
    gt = t.ground_truth
    if "deviations" not in gt and "decisive_turn" not in gt:
        return None
    return {k: gt[k] for k in COUNTERFACTUAL_KEYS if k in gt}


def _harness_lookup(harnesses: Harnesses) -> Callable[[str], Harness]:
    if isinstance(harnesses, Harness):
        return {harnesses.id: harnesses}.__getitem__
    if isinstance(harnesses, Mapping):
        return harnesses.__getitem__
    return harnesses


async def acounterfactuals(
    trajectories: Sequence[Trajectory],
    harnesses: Harnesses,
    executor: Executor,
    *,
    cache: CounterfactualCache | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
    progress: Progress | None = None,
) -> dict[str, dict[str, Any]]:
    """The counterfactual of every trajectory that has one (`needs_counterfactual`), by trajectory id:
    inline ones as they are, cached ones from `cache`, the rest computed (at most `concurrency` at a
    time) by `executor` under the harness `harnesses` gives for the trajectory's harness id, then
    cached (unless the search met an unavailable model, or the cache is read-only)."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be positive, got {concurrency}")
    harness_for = _harness_lookup(harnesses)
    found: dict[str, dict[str, Any]] = {}
    missing: dict[str, Trajectory] = {}
    for t in trajectories:
        if not needs_counterfactual(t):
            continue
        inline = inline_counterfactual(t)
        tid = t.id
        if inline is not None:
            found[tid] = inline
        else:
            missing.setdefault(tid, t)
    if cache is not None and missing:
        cached = cache.get_counterfactuals([(tid, t.harness_id) for tid, t in missing.items()])
        for (tid, _), value in cached.items():
            if value.get("version") == COUNTERFACTUAL_VERSION and tid in missing:
                found[tid] = {k: value[k] for k in COUNTERFACTUAL_KEYS if k in value}
                del missing[tid]
    if not missing:
        return found
    harness_of = {t.harness_id: harness_for(t.harness_id) for t in missing.values()}
    gate = asyncio.Semaphore(concurrency)
    done = 0

    async def one(t: Trajectory) -> dict[str, Any]:
        nonlocal done
        async with gate:
            value = await executor.counterfactual(t, harness_of[t.harness_id])
        done += 1
        if progress:
            progress(done, len(missing))
        return value

    computed = await asyncio.gather(*(one(t) for t in missing.values()))
    fresh = dict(zip(missing, computed, strict=True))
    found.update(fresh)
    keep = {(tid, missing[tid].harness_id): {"version": COUNTERFACTUAL_VERSION, **v}
            for tid, v in fresh.items() if "counterfactual_error" not in v}
    if cache is not None and keep and cache.read_only is None:
        cache.put_counterfactuals(keep)
    return found


def with_counterfactuals(
    trajectories: Sequence[Trajectory],
    harnesses: Harnesses | None = None,
    *,
    store: CounterfactualCache | None = None,
    client: ModelClient | None = None,
    executor: Executor | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
    progress: Progress | None = None,
) -> list[Trajectory]:
    """The one entry point for analysis that reads decisive turns or deviations: `trajectories` with
    each failed testbed rollout's counterfactual merged into its ground truth (as rollouts once
    carried it), taken from `store`'s cache or computed and cached there (`acounterfactuals`).
    Harnesses come from `harnesses` (one, a mapping by id, or a lookup), default the store's own;
    the computation runs on `executor`, else on a fresh one over `client`.
    Called from synchronous code (it runs on the in-process roles' event loop, `coevolve.agents.local`)."""
    if harnesses is None:
        if store is None or not hasattr(store, "get_harness"):
            raise ValueError("with_counterfactuals needs the harnesses, or a store that holds them")
        harnesses = store.get_harness  # type: ignore[attr-defined]
    own = executor is None
    if executor is None:
        if client is None:
            raise ValueError("with_counterfactuals needs an executor, or a model client to run one on")
        executor = Executor(client)
    from coevolve.agents.local import (
        _loop,  # the in-process roles' one event loop (the gateway's client lives there)
    )

    try:
        found = _loop().run(acounterfactuals(
            trajectories, harnesses, executor, cache=store, concurrency=concurrency, progress=progress
        ))
    finally:
        if own:
            executor.close()
    return merge_counterfactuals(trajectories, found)


def merge_counterfactuals(
    trajectories: Sequence[Trajectory], found: Mapping[str, dict[str, Any]]
) -> list[Trajectory]:
    """Each trajectory with its counterfactual (by trajectory id, from `acounterfactuals`) merged
    into its ground truth; the others unchanged."""
    out = []
    for t in trajectories:
        value = found.get(t.id) if needs_counterfactual(t) and inline_counterfactual(t) is None else None
        out.append(t if value is None else replace(t, ground_truth={**t.ground_truth, **value}))
    return out
