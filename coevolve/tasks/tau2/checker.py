"""Scoring a tau2 conversation with tau2's own evaluator, reported as a grader would.

The reward is tau2's (`tau2.evaluator.evaluator.evaluate_simulation` with `EvaluationType.ALL`), built
from the pieces that function uses, so that the gold side is computed once per task instead of on every
rollout: a run that neither side stopped scores 0; otherwise the product, over the task's reward basis,
of the database check (the conversation's tool calls replayed by `Environment.set_state` on a fresh
database, hashed, and compared with the hash after tau2's gold actions), the environment assertions,
the communicate check (`CommunicateEvaluator`) and, where the basis names it, the action check
(`ActionEvaluator`). `tests/test_tau2.py` checks that it agrees with `evaluate_simulation` itself.
A task's initial state (telecom's: `initialization_data`, `initialization_actions`) is applied to both
databases first, as tau2's `EnvironmentEvaluator` does; the hashes cover the user's database too.

`passed` is tau2's success (a reward within 1e-6 of 1, `is_successful`), and the score is the reward; a conversation that ended any other
way than by the user or the agent (tau2's step limit, its error limit, a user that could not be reached)
scores 0, as in tau2. Whether the agent ever said something to the customer (`answered_customer`, this
project's earlier extra requirement: tau2 scores a silent run by the database alone) is reported beside
the reward in `detail["tau2"]`, never inside `passed`; so is the conversation's `protocol` ("tau2", or
"tool" for the earlier message_user/finish variant, not comparable with tau2's numbers).

Reasons name what differs (records and fields of the final database, with the agent's value), never the
gold actions or the expected values.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass
from functools import cache
from typing import Any

from coevolve.tasks.base import Requirement, graded
from coevolve.tasks.tau2.data import new_environment, paused_gc, task_model, tau2
from coevolve.tasks.tau2.users import GREETING, STOP
from coevolve.values import Outcome

SHOWN = 6
TOLERANCE = 1e-6  # tau2's is_successful: 1 - 1e-6 <= reward <= 1 + 1e-6


def is_successful(reward: float) -> bool:
    """tau2's success (`tau2.metrics.agent_metrics.is_successful`): a reward within 1e-6 of 1."""
    return (1 - TOLERANCE) <= reward <= (1 + TOLERANCE)


@dataclass(frozen=True)
class Score:
    reward: float
    requirements: tuple[Requirement, ...]
    termination: str
    db_match: bool | None
    answered_customer: bool


# ------------------------------------------------------------------------------------- gold side
@cache
def _pristine_records(domain: str) -> dict[tuple[str, str], Any]:
    return _records(new_environment(domain).tools.db)


def _records(db: Any) -> dict[tuple[str, str], Any]:
    """Every record of a tau2 database, by (table, key): its dict-valued fields are the tables."""
    out = {}
    for table, value in db.__dict__.items():
        if isinstance(value, dict):
            out.update({(table, str(k)): v for k, v in value.items()})
    return out


def _delta(domain: str, db: Any) -> dict[tuple[str, str], Any]:
    """Records that differ from the shipped database (None: the record is gone)."""
    base, now = _pristine_records(domain), _records(db)
    out = {k: v for k, v in now.items() if base.get(k) != v}
    out.update({k: None for k in base if k not in now})
    return out


@dataclass(frozen=True)
class GoldState:
    db_hash: str | None
    user_db_hash: str | None
    delta: dict[tuple[str, str], Any]


def initial_state(task: Any) -> tuple[Any, Any, list[Any]]:
    """The task's (initialization_data, initialization_actions, message_history), as tau2's evaluator reads
    them (None, None, [] for a task without an initial state: airline, retail)."""
    init = task.initial_state
    if init is None:
        return None, None, []
    return init.initialization_data, init.initialization_actions, list(init.message_history or [])


@cache
def gold_state(domain: str, task_id: str) -> GoldState:
    """The database after tau2's gold actions (tau2's `EnvironmentEvaluator`: the initial state, then the
    gold actions, going on past a failing one, with no `sync_tools` after them)."""
    task = task_model(domain, task_id)
    gold = new_environment(domain)
    data, actions, history = initial_state(task)
    with paused_gc():
        gold.set_state(initialization_data=data, initialization_actions=actions, message_history=history)
        for action in task.evaluation_criteria.actions or []:
            # as tau2's EnvironmentEvaluator: a failing gold action is skipped
            with contextlib.suppress(Exception):
                gold.make_tool_call(tool_name=action.name, requestor=action.requestor, **copy.deepcopy(action.arguments))
        return GoldState(gold.get_db_hash(), gold.get_user_db_hash(), _delta(domain, gold.tools.db))


# ------------------------------------------------------------------------------------- the score
def score(env: Any) -> Score:
    t = tau2()
    R = t.tasks.RewardType
    task, messages = env.task, env.messages
    termination = env.termination_reason()
    stopped = termination in (t.simulation.TerminationReason.AGENT_STOP, t.simulation.TerminationReason.USER_STOP)
    reqs = [Requirement("conversation_ended", stopped, "" if stopped else _unfinished(termination, env))]
    spoke = sum(
        1 for m in messages[1:]
        if isinstance(m, t.message.AssistantMessage) and m.has_text_content() and not m.is_tool_call()
        and m.content not in (GREETING, STOP)
    )
    crit = task.evaluation_criteria
    if crit is None:  # tau2: no criteria -> reward 1
        return _finish(reqs, 1.0 if stopped else 0.0, termination, None, spoke > 0)
    basis = set(crit.reward_basis)
    unsupported = basis - {R.DB, R.ENV_ASSERTION, R.COMMUNICATE, R.ACTION}
    if unsupported:
        raise ValueError(f"tau2 task {task.id}: reward basis {sorted(unsupported)} needs an LLM judge; not supported")
    reward = 1.0
    db_match = None
    if basis & {R.DB, R.ENV_ASSERTION}:
        db_match, db_req, assertion_reqs = _database(env)
        if R.DB in basis:
            reqs.append(db_req)
            reward *= float(db_match)
        if R.ENV_ASSERTION in basis:
            reqs += assertion_reqs
            reward *= float(all(r.passed for r in assertion_reqs))
    evaluators = (  # basis, tau2's evaluator, its checks and their pass flag, the requirement, what a miss is
        (R.COMMUNICATE, t.evaluator_communicate.CommunicateEvaluator, "communicate_checks", "met",
         "communicated_required_info",
         "pieces of information the customer had to be told never appear in a message to the customer"),
        (R.ACTION, t.evaluator_action.ActionEvaluator, "action_checks", "action_match",
         "required_actions_taken", "required tool calls were not made with the required arguments"),
    )
    for kind, evaluator, checks_field, passed, name, missed in evaluators:
        if kind in basis:
            info = evaluator.calculate_reward(task=task, full_trajectory=messages)
            checks = getattr(info, checks_field) or []
            missing = sum(not getattr(c, passed) for c in checks)
            reqs.append(Requirement(name, info.reward == 1.0, f"{missing} of the {len(checks)} {missed}" if missing else ""))
            reward *= info.reward
    return _finish(reqs, reward if stopped else 0.0, termination, db_match, spoke > 0)


def _finish(reqs: list[Requirement], reward: float, termination: Any, db_match: bool | None, spoke: bool) -> Score:
    return Score(reward, tuple(reqs), str(getattr(termination, "value", termination)), db_match, spoke)


def _unfinished(termination: Any, env: Any) -> str:
    why = {
        "max_steps": "tau2's step limit was reached before the customer ended the conversation",
        "too_many_errors": "the conversation was stopped after too many failed tool calls",
        "agent_error": "the agent stopped before the conversation ended (its model failed or its turn limit came first)",
        "user_error": f"the customer could not be reached: {env.user_error}",
    }.get(getattr(termination, "value", str(termination)), f"the conversation ended with {termination}")
    return f"{why} (tau2 scores such a run 0)"


def _database(env: Any) -> tuple[bool, Requirement, list[Requirement]]:
    """tau2's database check: replay the conversation's tool calls on a fresh database, compare hashes."""
    task, domain = env.task, env.domain
    crit = task.evaluation_criteria
    predicted = new_environment(domain)
    data, actions, _ = initial_state(task)
    try:
        with paused_gc():
            predicted.set_state(initialization_data=data, initialization_actions=actions, message_history=list(env.messages))
    except ValueError as e:
        msg = f"the conversation's tool calls do not replay to the same results: {str(e).splitlines()[0]}"
        unchecked = [Requirement(f"env_assertion_{i}", False, "not checked: " + msg) for i, _ in enumerate(crit.env_assertions or [])]
        return False, Requirement("database_matches_gold", False, msg), unchecked
    assertion_reqs = []
    for i, a in enumerate(crit.env_assertions or []):
        ok = predicted.run_env_assertion(a, raise_assertion_error=False)
        assertion_reqs.append(Requirement(f"env_assertion_{i}", ok, "" if ok else (a.message or f"{a.func_name} does not hold")))
    if crit.actions is None and crit.env_assertions is None:
        return True, Requirement("database_matches_gold", True), assertion_reqs
    gold = gold_state(domain, task.id)
    with paused_gc():
        match = predicted.get_db_hash() == gold.db_hash and predicted.get_user_db_hash() == gold.user_db_hash
        reason = "" if match else _differences(domain, predicted.tools.db, gold)
    return match, Requirement("database_matches_gold", match, reason), assertion_reqs


def _differences(domain: str, db: Any, gold: GoldState) -> str:
    """The records and fields where the final database differs from the expected one, with the value
    the agent left (never the expected value)."""
    mine = _delta(domain, db)
    base = _pristine_records(domain)
    lines = []
    for key in sorted(set(mine) | set(gold.delta)):
        have = mine[key] if key in mine else base.get(key)
        want = gold.delta[key] if key in gold.delta else base.get(key)
        if have == want:
            continue
        table, rid = key
        if want is None:
            lines.append(f"{table}[{rid}] exists but the expected final state has no such record")
        elif have is None:
            lines.append(f"{table}[{rid}] is missing from the database")
        else:
            lines.append(f"{table}[{rid}] differs in " + ", ".join(_fields(have, want)))
    if not lines:  # the hashes differ outside the tables (tau2 hashes the whole database)
        return "the final database differs from the expected one"
    shown = "; ".join(lines[:SHOWN]) + (f"; and {len(lines) - SHOWN} more records" if len(lines) > SHOWN else "")
    return f"the final database differs from the expected one in {len(lines)} record(s): {shown}"


def _fields(have: Any, want: Any) -> list[str]:
    h = have.model_dump() if hasattr(have, "model_dump") else have
    w = want.model_dump() if hasattr(want, "model_dump") else want
    if not isinstance(h, dict) or not isinstance(w, dict):
        return [f"its value (now {_short(h)})"]
    out = []
    for f in sorted(set(h) | set(w)):
        if h.get(f) != w.get(f):
            v = h.get(f)
            out.append(f"{f} (now {_short(v)})" if isinstance(v, (str, int, float, bool)) or v is None else f)
    return out or ["its contents"]


def _short(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


def check(env: Any) -> Outcome:
    s = score(env)
    passed = is_successful(s.reward)
    out = graded(list(s.requirements), s.reward)
    user = env.user
    detail = {
        **out.detail,
        "tau2": {
            "domain": env.domain,
            "task_id": env.task_id,
            **{f: getattr(s, f) for f in ("reward", "termination", "db_match", "answered_customer")},
            "protocol": env.protocol or "tool",
            "user": user.kind if user else None,
            "user_model": getattr(user, "model", None),
            "user_cost_usd": round(user.cost_usd if user else 0.0, 8),
        },
    }
    return Outcome(passed, s.reward if passed else round(min(s.reward, 0.99), 4), detail)
