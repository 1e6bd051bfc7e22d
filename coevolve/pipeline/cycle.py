"""Co-evolution (docs/ARCHITECTURE.md §1.5): the meta-agent's cycles, per family — the cycle schedule
of the pipeline's steps (`coevolve.pipeline.steps`).

Each cycle: evolve the harness around the current model (the weak model with the current adapter)
-> build the on-policy correction set from that model's own rollouts under the current harness ->
train a candidate adapter (on the base weights, with every correction row gathered so far) -> make it
servable -> evaluate it on validation, paired with the current model on identical instances and seeds
-> keep it only if the sign test accepts -> evolve the harness again around the adapted model. The
family stops at the cycle budget, after `plateau` cycles without any accepted change, or at the run's
budgets (rollouts, dollars, seconds) or a stop request; then the final harness and adapter are
measured against the baseline on the test split.

The families run at once, each in its own thread and with its own seeds, so a family's cells are the
same as when it runs alone; their rollouts share the executor pool, which keeps it busy while one
family waits on its proposer or trainer. The run's budgets are shared: the first family to find one
spent (or a stop request, or another family's failure) stops every family at its next cell.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from coevolve.agents.backend import Backend
from coevolve.agents.meta.loop import Journal
from coevolve.analysis.stats import comparison
from coevolve.pipeline.steps import SEED_TEST, Models, Steps
from coevolve.values import Harness, with_adapter

if TYPE_CHECKING:
    from coevolve.config import RunProfile


class Stopped(Exception):
    pass


class CoEvolution:
    """Runs (or resumes) one `coevolve run` of the profile `profile` in its run `run_id` of `journal`."""

    def __init__(self, profile: RunProfile, journal: Journal, run_id: str, backend: Backend,
                 stop_requested: Callable[[], bool] = lambda: False,
                 on_status: Callable[[dict[str, Any]], None] | None = None):
        self.p = profile
        self.run_id = run_id
        self.stop_requested = stop_requested
        self.on_status = on_status or (lambda d: None)
        self.steps = Steps(journal, run_id, backend,
                           Models(profile.weak.model, profile.expert.model, profile.judge.model, profile.proposer),
                           evolve=profile.evolve, data=profile.data, seed=profile.seed, params=profile.params,
                           alpha=profile.alpha, before_cell=self._before_cell)
        self.status: dict[str, Any] = {"stage": "starting", "families": {}}
        self._status_lock = threading.Lock()
        self._halt: str | None = None  # why every family stops at its next cell

    @property
    def spend(self) -> Any:
        return self.steps.spend

    def _before_cell(self, key: str) -> None:
        """A safe point: budgets, stop requests and another family's stop are honoured between cells."""
        if self._halt is not None:
            raise Stopped(self._halt)
        if self.stop_requested():
            raise Stopped("stop requested")
        b = self.p.budget
        for name, used, limit in (("rollouts", self.spend.rollouts, b.rollouts), ("usd", self.spend.usd, b.usd),
                                  ("seconds", self.spend.seconds, b.seconds)):
            if used >= limit:
                raise Stopped(f"budget:{name}")
        self._set_status(key.split(":")[1], stage=key)

    def _set_status(self, family: str | None, **kw: Any) -> None:
        """`kw` into the run's status (`family`: into that family's), then the status to `on_status`."""
        with self._status_lock:
            (self.status if family is None else self.status["families"].setdefault(family, {})).update(kw)
            if "stage" in kw:
                self.status["stage"] = kw["stage"]
            self.status["spend"] = {"rollouts": self.spend.rollouts, "usd": round(self.spend.usd, 4),
                                    "seconds": round(self.spend.seconds, 1)}
            b = self.p.budget
            self.status["budget"] = {"rollouts": b.rollouts, "usd": b.usd, "seconds": b.seconds, "cycles": b.cycles}
            self.on_status({**self.status, "families": {f: dict(s) for f, s in self.status["families"].items()}})

    # ------------------------------------------------------------------ the run
    def run(self) -> dict[str, Any]:
        with ThreadPoolExecutor(len(self.p.families), thread_name_prefix="coevolve-family") as pool:
            futures = {f: pool.submit(self._family_or_halt, f) for f in self.p.families}
        errors = {f: future.exception() for f, future in futures.items()}
        failed = [e for e in errors.values() if e is not None and not isinstance(e, Stopped)]
        if failed:  # a family's failure is the run's (the others stopped for it)
            raise failed[0]
        results = {f: future.result() for f, future in futures.items() if errors[f] is None}
        reason = self._halt or "done"
        self._set_status(None, stage="finished", stop_reason=reason)
        return {"run_id": self.run_id, "stop_reason": reason, "families": results,
                "spend": self.status["spend"], "cells": len(self.steps.done)}

    def _family_or_halt(self, name: str) -> dict[str, Any]:
        """The family's result; a stop or a failure of it stops the other families at their next cell."""
        try:
            return self._family(name)
        except BaseException as e:
            with self._status_lock:
                self._halt = self._halt or (str(e) if isinstance(e, Stopped) else f"{name} failed")
            raise

    def _family(self, name: str) -> dict[str, Any]:
        from coevolve.tasks import get_family

        steps, weak = self.steps, self.p.weak.model
        family = get_family(name)
        harness = family.baseline_harness()
        steps.journal.put_harness(harness, rationale="family baseline")
        adapter: str | None = None
        quiet = 0
        for cycle in range(self.p.budget.cycles):
            self._set_status(name, cycle=cycle, harness_id=harness.id, adapter=adapter)
            model = with_adapter(weak, adapter)
            key = f"evolve:{name}:{cycle}"
            ev = steps.cell(key, lambda h=harness, m=model, k=key, c=cycle: steps.evolve(family, h, m, k, self.p.seed + c))
            changed_harness = ev["harness_id"] != harness.id
            harness = steps.journal.get_harness(ev["harness_id"])
            self._set_status(name, harness_id=harness.id)
            key = f"data:{name}:{cycle}"
            data = steps.cell(key, lambda h=harness, m=model, k=key: steps.build(family, "correction", h, m, k,
                                                                                 self._rows_so_far(name)))
            accepted = False
            if data["dataset"] is not None:
                adapter_id = f"coevolve-{name}-c{cycle}-{data['dataset'][3:11]}"
                steps.cell(f"adapter:{name}:{cycle}", lambda d=data["dataset"], a=adapter_id: steps.train(d, a))
                key = f"accept:{name}:{cycle}"
                verdict = steps.cell(key, lambda h=harness, a=adapter_id, c=adapter, k=key: steps.accept(
                    family, h, c, a, k, val_n=self.p.evolve.val_n, val_seeds=self.p.evolve.val_seeds))
                if verdict["accepted"]:
                    adapter, accepted = adapter_id, True
                    self._set_status(name, adapter=adapter)
            quiet = 0 if changed_harness or accepted else quiet + 1
            if quiet >= self.p.budget.plateau:
                break
        final = steps.cell(f"final:{name}", lambda h=harness, a=adapter: self._final(family, h, a))
        guards = [f"cycle {k.split(':')[2]}: {c['guard']}" for k, c in sorted(steps.done.items(), key=lambda kv: _cycle_order(kv[0]))
                  if k.startswith(f"evolve:{name}:") and c.get("guard")]
        return {**final, **({"release_guard": guards} if guards else {})}

    def _rows_so_far(self, family: str) -> list[Any]:
        """Every correction row of this family's earlier cycles: each cycle's dataset is cumulative, so
        the latest one holds them all."""
        from coevolve.store.datasets import read_rows

        done = self.steps.done
        cells = [done[k] for k in sorted(done, key=_cycle_order) if k.startswith(f"data:{family}:")]
        with_rows = [c for c in cells if c.get("dataset")]
        return read_rows(self.steps.journal.root, with_rows[-1]["dataset"]) if with_rows else []

    def _final(self, family: Any, harness: Harness, adapter: str | None) -> dict[str, Any]:
        """The baseline harness, the final harness, and the final harness with the final adapter, on the
        whole test split at `repeats` seeds each."""
        instances = family.generate("test", **self.p.params)
        weak = self.p.weak.model
        arms = {"baseline": (family.baseline_harness(), weak), "evolved": (harness, weak)}
        if adapter is not None:
            arms["evolved+adapter"] = (harness, with_adapter(weak, adapter))
        rates = {label: self.steps.measure(instances, h, model, self.p.repeats, self.p.seed + SEED_TEST,
                                           f"final:{family.name}:{label}")
                 for label, (h, model) in arms.items()}
        compared = comparison(rates, "baseline", list(arms)[-1])
        return {"harness_id": harness.id, "adapter": adapter, "test": {k: compared.pop(k) for k in rates}, **compared}


def _cycle_order(key: str) -> tuple[str, int]:
    parts = key.split(":")
    return (parts[1], int(parts[2])) if len(parts) > 2 and parts[2].isdigit() else (parts[-1], -1)
