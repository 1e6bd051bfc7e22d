"""Training data for the two weight-adaptation arms (docs/ARCHITECTURE.md §1.3), as pure logic: rollouts, the judge,
the expert and replays come from a `coevolve.agents.backend.Backend`, so the same code runs in-process
(tests) and on Ray actor pools (`coevolve/services/pools/`).

- **correction** (the method): the weak model's own rollouts under a harness on the train split.
  For each failed one: the judge locates the failing turn (a rule-based first guess is its evidence and
  fallback), the expert rewrites only that turn as k candidates, the judge scores them, the best valid
  one is kept, and the weak model's rollout is resumed from the corrected turn (the replay check) to
  record whether it then passes. Row = the weak model's own prefix, unchanged and without loss, plus
  the corrected assistant turn with loss; nothing after it. Instances at the capability boundary (the
  weak model passes some but not all of its samples) add their passing rollouts as self-pass rows.
- **imitation** (the baseline): the expert's passing rollouts under the same harness on the train
  split, loss on every assistant turn, mixed with the student's own passing rollouts.

Both arms write rows in the student's chat and tool-call format (docs/ARCHITECTURE.md §3 `TrainingRow`), so they go
through the same training and evaluation path. Every row carries its provenance; where the judge's or
the expert's prompt was cut to fit its model's context window (`coevolve.agents.fit`), the provenance's
`context_cuts` says what was cut, and the build's usage counts the `fitted` and `failed_calls`.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from coevolve import defaults
from coevolve.agents.backend import Backend, Job
from coevolve.agents.context import apply_policy
from coevolve.agents.executor import openai_tool
from coevolve.agents.expert import corrected_message, prefix_messages
from coevolve.errors import BadInput
from coevolve.tasks import get_family
from coevolve.values import FailureLocus, Harness, TaskInstance, TrainingRow, Trajectory

ARMS = ("correction", "imitation")


@dataclass(frozen=True)
class BuildConfig:
    arm: str
    family: str
    model: str  # the weak model (the student)
    expert: str
    judge: str
    rows: int = defaults.ROWS  # target size; the set may be smaller when the train split does not yield enough
    self_pass_share: float = 0.1
    k: int = defaults.K  # rewrite candidates per failure
    samples: int = defaults.SAMPLES  # rollouts per train instance (seeds seed..seed+samples-1)
    require_verified: bool = False  # keep only corrections whose replay passed
    seed: int = 0
    concurrency: int = 8

    def __post_init__(self) -> None:
        if self.arm not in ARMS:
            raise BadInput(f"unknown arm {self.arm!r} (arms: {', '.join(ARMS)})")
        for name in ("rows", "k", "samples", "concurrency"):
            if getattr(self, name) < 1:
                raise BadInput(f"{name} must be >= 1")
        if not 0 <= self.self_pass_share <= 1:
            raise BadInput("self_pass_share must be in [0, 1]")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class BuildUsage:
    """Model spend per role while building (tokens, dollars, calls)."""

    roles: dict[str, dict[str, float]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(float)))

    def add(self, role: str, delta: dict[str, Any]) -> None:
        for k, v in delta.items():
            if isinstance(v, (int, float)):
                self.roles[role][k] += v

    def as_json(self) -> dict[str, dict[str, float]]:
        return {r: {k: round(v, 6) for k, v in d.items()} for r, d in self.roles.items()}


RecordUnit = Callable[[str, dict[str, Any]], None]  # (kind, payload): called with every finished unit of work


def offered_tools(instance: TaskInstance, harness: Harness) -> list[dict[str, Any]]:
    """The tool schemas a rollout of `instance` under `harness` offered the model: the harness tools its
    environment implements, in the harness's order (what `Executor.rollout` sends with every call; a
    tool whose implementation the environment lacks was never shown to the model)."""
    env = get_family(instance.family).make_env(instance)
    try:
        available = {t.impl for t in env.tool_specs()}
    finally:
        close = getattr(env, "close", None)
        if close is not None:
            close()
    return [openai_tool(t) for t in harness.tools if t.impl in available]


def _provenance(traj: Trajectory, harness: Harness, kind: str) -> dict[str, Any]:
    """Where a row comes from; `decoding` (the harness's policy, when not the default) also decides how
    training renders its loss-bearing turns (`coevolve.services.training`: constrained answers)."""
    decoding = {} if harness.decoding.is_default else {"decoding": asdict(harness.decoding)}
    return {"kind": kind, "trajectory": traj.id, "instance": traj.instance.id, "seed": traj.seed,
            "model": traj.model, "harness_id": traj.harness_id, **decoding}


def _check_harness(traj: Trajectory, harness: Harness) -> None:
    if harness.id != traj.harness_id:
        raise ValueError(f"trajectory {traj.id[:12]} ran under harness {traj.harness_id[:12]}, not {harness.id[:12]}")


def full_row(traj: Trajectory, harness: Harness, kind: str) -> TrainingRow:
    """A whole passing rollout, loss on every assistant turn, with the tools the rollout offered. The
    messages are the whole record: under a context policy that elided something, a later turn's
    context here is fuller than the model's was (correction rows, one turn each, are exact)."""
    _check_harness(traj, harness)
    messages = [{**m, "train": True} if m.get("role") == "assistant" else dict(m) for m in traj.messages]
    return TrainingRow(tuple(messages), tuple(offered_tools(traj.instance, harness)), _provenance(traj, harness, kind))


def correction_prefix(traj: Trajectory, harness: Harness, turn: int) -> list[dict[str, Any]]:
    """What the model was sent before its assistant turn `turn`: the messages so far as the harness's
    context policy let it see them, assistant turns without loss."""
    visible, _ = apply_policy(prefix_messages(traj, turn), harness.context)
    return [{**m, "train": False} if m.get("role") == "assistant" else dict(m) for m in visible]


def correction_row(traj: Trajectory, harness: Harness, locus: FailureLocus, best: dict[str, Any],
                   candidates: list[dict[str, Any]], replay: Trajectory | None,
                   cuts: dict[str, list[str]] | None = None) -> TrainingRow:
    """The weak model's own prefix as it was sent to the model at the failing turn (no loss: the
    messages as the context policy showed them and the tools the rollout offered, so that it renders to
    the very prompt the server rendered) + the corrected turn (loss). Nothing after.
    `cuts`: what the roles' prompts lost to their context windows, per role (kept in the provenance)."""
    _check_harness(traj, harness)
    prefix = correction_prefix(traj, harness, locus.turn_index)
    fixed = {**corrected_message(best, locus.turn_index), "train": True}
    return TrainingRow(
        (*prefix, fixed),
        tuple(offered_tools(traj.instance, harness)),
        {
            **_provenance(traj, harness, "corrected"),
            "locus": {"turn": locus.turn_index, "reason": locus.reason},
            "candidates": candidates,
            "replay_passed": None if replay is None else replay.passed,
            "verified": bool(replay is not None and replay.passed),
            **({"context_cuts": cuts} if cuts else {}),
        },
    )


def row_key(row: TrainingRow) -> str:
    """Content hash for de-duplication (messages and tools; provenance differs between copies)."""
    body = json.dumps({"m": row.messages, "t": row.tools}, sort_keys=True, default=str)
    return hashlib.sha256(body.encode()).hexdigest()


class DatasetBuilder:
    """Builds one arm's rows. `done` maps trajectory ids already handled (from the journal of an
    earlier, interrupted build) to their row (or None), so a resumed build redoes nothing."""

    def __init__(self, cfg: BuildConfig, harness: Harness, train: Sequence[TaskInstance], backend: Backend,
                 journal: RecordUnit | None = None, done: dict[str, dict[str, Any] | None] | None = None,
                 on_progress: Callable[[dict[str, Any]], None] | None = None):
        self.cfg = cfg
        self.harness = harness
        self.train = list(train)
        self.backend = backend
        self.journal = journal or (lambda kind, payload: None)
        self.done = dict(done or {})
        self.on_progress = on_progress
        self.usage = BuildUsage()
        self.cut_failures = 0  # failures corrected here whose judge or expert prompt was cut to fit
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ rollouts
    def jobs(self) -> list[Job]:
        """The rollouts a sample runs: every train instance at seeds seed..seed+samples-1."""
        return [(inst, self.harness, self.cfg.seed + s) for s in range(self.cfg.samples) for inst in self.train]

    def sample(self, model: str) -> list[Trajectory]:
        return self.backend.evaluate(self.jobs(), model)

    def self_pass(self, student: Sequence[Trajectory]) -> list[TrainingRow]:
        """Passing rollouts of instances the student passes sometimes but not always."""
        runs: dict[str, list[Trajectory]] = defaultdict(list)
        for t in student:
            if t.error != "infra":
                runs[t.instance.id].append(t)
        boundary = [ts for ts in runs.values() if 0 < sum(t.passed for t in ts) < len(ts)]
        return [full_row(t, self.harness, "self-pass") for ts in boundary for t in ts if t.passed]

    # ------------------------------------------------------------------ the arms
    def build(self, student: Sequence[Trajectory], expert_runs: Sequence[Trajectory] = ()) -> tuple[list[TrainingRow], dict[str, Any]]:
        n_self = round(self.cfg.rows * self.cfg.self_pass_share)
        self_rows = self._dedup(self.self_pass(student))[:n_self]
        if self.cfg.arm == "imitation":
            expert_rows = self._dedup([full_row(t, self.harness, "expert-full") for t in expert_runs if t.passed])
            main = expert_rows[: self.cfg.rows - len(self_rows)]
        else:
            failures = [t for t in student if not t.passed and t.error != "infra" and t.turns]
            main = self._corrections(failures, self.cfg.rows - len(self_rows))
        rows = self._dedup(main + self_rows)
        return rows, self._stats(rows, student, expert_runs)

    def _corrections(self, failures: list[Trajectory], limit: int) -> list[TrainingRow]:
        """Corrected rows until `limit`, working through the failures in order, `concurrency` at once.

        The failures are taken in fixed chunks and each chunk's rows are assembled in failure order,
        whether a failure was corrected now or found in `done` (a resumed build): a build resumed after
        a crash yields the same rows in the same order, hence the same dataset id, as one that ran
        through."""
        chunk = self.cfg.concurrency * 2
        rows: list[TrainingRow] = []
        with ThreadPoolExecutor(self.cfg.concurrency) as pool:
            for start in range(0, len(failures), chunk):
                if len(self._kept(rows)) >= limit:
                    break
                part = failures[start : start + chunk]
                todo = [t for t in part if t.id not in self.done]
                fresh = dict(zip((t.id for t in todo), pool.map(self._correct, todo), strict=True))
                for t in part:
                    if t.id in fresh:
                        row = fresh[t.id]
                    else:
                        row = TrainingRow.from_json(self.done[t.id]) if self.done[t.id] is not None else None
                    if row is not None:
                        rows.append(row)
                self._progress(len(self._kept(rows)), start + len(part), len(failures))
        return self._kept(rows)[:limit]

    def _kept(self, rows: list[TrainingRow]) -> list[TrainingRow]:
        return self._dedup([r for r in rows if r.provenance.get("verified") or not self.cfg.require_verified])

    def _correct(self, traj: Trajectory) -> TrainingRow | None:
        b = self.backend
        cuts: dict[str, list[str]] = {}

        def use(role: str, used: dict[str, Any]) -> None:
            with self._lock:
                self.usage.add(role, used)
            if used.get("cuts"):
                cuts.setdefault(role, []).extend(used["cuts"])

        locus, used = b.locate(traj)
        use("judge", used)
        candidates, used = b.rewrite(traj, locus, self.cfg.k)
        use("expert", used)
        scored = []
        for c in candidates:
            if "error" in c:
                scored.append({**c, "score": 0.0, "valid": False})
                continue
            verdict, used = b.score(traj, locus, c)
            use("judge", used)
            scored.append({**c, **verdict})
        if cuts:
            with self._lock:
                self.cut_failures += 1
        valid = [c for c in scored if c.get("valid")]
        if not valid:
            self.journal("correction", {"trajectory": traj.id, "row": None, "why": "no valid candidate",
                                        **({"context_cuts": cuts} if cuts else {})})
            return None
        best = max(valid, key=lambda c: c["score"])  # the first of equals
        replay = b.replay(traj, self.harness, locus.turn_index, corrected_message(best, locus.turn_index))
        row = correction_row(traj, self.harness, locus, best, scored, replay, cuts)
        self.journal("correction", {"trajectory": traj.id, "row": row.to_json()})
        return row

    def _progress(self, kept: int, handled: int, total: int) -> None:
        if self.on_progress:
            self.on_progress({"stage": "correct", "rows": kept, "handled": min(handled, total), "failures": total})

    def _dedup(self, rows: list[TrainingRow]) -> list[TrainingRow]:
        seen, out = set(), []
        for r in rows:
            key = row_key(r)
            if key not in seen:
                seen.add(key)
                out.append(r)
        return out

    def _stats(self, rows: list[TrainingRow], student: Sequence[Trajectory], expert_runs: Sequence[Trajectory]) -> dict[str, Any]:
        kinds: dict[str, int] = defaultdict(int)
        for r in rows:
            kinds[r.provenance["kind"]] += 1
        corrected = [r for r in rows if r.provenance["kind"] == "corrected"]
        verified = sum(bool(r.provenance.get("verified")) for r in corrected)
        cut_rows = sum(1 for r in corrected if r.provenance.get("context_cuts"))
        usage = self.usage.as_json()
        # what the expert's tokens bought: its whole rollouts (imitation) or its rewrites (correction)
        expert_tokens = (sum(t.tokens for t in expert_runs) if self.cfg.arm == "imitation"
                         else int(usage.get("expert", {}).get("tokens", 0)))
        return {
            "rows": len(rows),
            "by_kind": dict(kinds),
            **({"rows_with_context_cuts": cut_rows} if cut_rows else {}),
            **({"failures_with_context_cuts": self.cut_failures} if self.cut_failures else {}),
            "verified_share": round(verified / len(corrected), 4) if corrected else None,
            "student_rollouts": len(student),
            "student_pass_rate": round(sum(t.passed for t in student) / len(student), 4) if student else None,
            "expert_rollouts": len(expert_runs),
            "usage": usage,
            "expert_tokens": expert_tokens,
            "expert_tokens_per_row": round(expert_tokens / max(1, len(rows)), 1),
        }

    def manifest(self, run_id: str, stats: dict[str, Any]) -> dict[str, Any]:
        """A built dataset's manifest (`coevolve.store.datasets.write_dataset`): the arm, the build's
        config, the harness and run it came from, and `stats` (`build`'s second value)."""
        return {"arm": self.cfg.arm, "config": self.cfg.to_json(), "harness_id": self.harness.id, "run_id": run_id, **stats}
