"""The small-model level and the families' helper tools (docs/results/real-weights-design.md).

- `size=0` is every covered family's small-model level; `LEVELS` is the ladder the selection rule reads
  from the lowest up.
- `optional_tools(family)` is a family's catalogue of helper tools: domain computation over data the
  base tools expose, offered by the environment but left out of the baseline harness. The proposer can
  show it; `add_tool_ops(family)` gives the `add_tool` edit ops (as `coevolve harness apply` and the
  proposer's JSON take them) that add them.
- `selection_harnesses(family)` are the two harnesses of the selection rule: `baseline` (the family's
  baseline harness, sampling at `SAMPLING`, free tool calls) and `oracle` (`oracle_edit`: every fact and
  constraint stated in the catalogue's wording, one recipe each, every helper tool, constrained tool
  calls). The oracle reads the fact list, so it is a yardstick for choosing a level, never a role's input.
- `footprint(family, params)` measures a level: the reference plan's observations and the instruction,
  with any counter (characters by default, a tokenizer's count for token figures).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coevolve.edits import apply_edit
from coevolve.errors import BadInput
from coevolve.tasks.base import TaskFamily
from coevolve.values import (
    AddRecipe,
    AddTool,
    DecodingPolicy,
    Harness,
    HarnessEdit,
    Recipe,
    SetDecoding,
    ToolSpec,
)

SMALL: dict[str, int] = {"size": 0}
# the ladder of levels, lowest first (name -> params); L3 is the families' default
LEVELS: dict[str, dict[str, int]] = {
    "L0": {"size": 0, "difficulty": 1},
    "L1": {"size": 0, "difficulty": 2},
    "L2": {"size": 1, "difficulty": 1},
    "L3": {"size": 1, "difficulty": 2},
}
# SmolLM2's sampling in every cell of the selection rule and the experiment (the rollout seed seeds it)
SAMPLING = {"temperature": 0.7, "max_tokens": 512}  # 512 >= the largest reference call at any level (430)
BASELINE_DECODING = DecodingPolicy("free", **SAMPLING)
ORACLE_DECODING = DecodingPolicy("constrained", **SAMPLING)
# the families with a small level and helper tools (refactor and the tau2 families have neither)
SMALL_LEVEL_FAMILIES = ("iot", "payroll", "budget", "stock", "website", "browser")


def _family(family: str | TaskFamily) -> TaskFamily:
    from coevolve.tasks import get_family

    return get_family(family) if isinstance(family, str) else family


def helper_specs(family: str | TaskFamily) -> tuple[ToolSpec, ...]:
    """The family's helper tools as ToolSpecs (none for a family without a catalogue)."""
    fam = _family(family)
    offer = getattr(fam, "optional_tools", None)
    return tuple(offer()) if callable(offer) else ()


def optional_tools(family: str | TaskFamily) -> list[dict[str, Any]]:
    """The family's helper-tool catalogue: one {name, description, parameters, impl} per tool."""
    return [{"name": t.name, "description": t.description, "parameters": t.parameters, "impl": t.impl}
            for t in helper_specs(family)]  # fmt: skip


def add_tool_ops(family: str | TaskFamily, names: list[str] | tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """`add_tool` edit ops (proposer JSON) for the named helper tools, all of them when `names` is None."""
    catalogue = {t["name"]: t for t in optional_tools(family)}
    wanted = list(catalogue) if names is None else list(names)
    unknown = [n for n in wanted if n not in catalogue]
    if unknown:
        raise BadInput(f"no helper tools {unknown} in {_family(family).name} (helper tools: {', '.join(catalogue) or 'none'})")
    return [{"op": "add_tool", **catalogue[n]} for n in wanted]


def oracle_edit(family: str | TaskFamily, decoding: DecodingPolicy | None = ORACLE_DECODING) -> HarnessEdit:
    """Every fact and constraint stated (one recipe each, catalogue wording), every helper tool added and,
    unless `decoding` is None, the decoding policy set (constrained calls at `SAMPLING`)."""
    fam = _family(family)
    ops: list[Any] = [AddRecipe(Recipe(i.id, i.statement)) for i in (*fam.facts, *fam.constraints)]
    ops += [AddTool(t) for t in helper_specs(fam)]
    if decoding is not None:
        ops.append(SetDecoding(decoding))
    return HarnessEdit(tuple(ops), rationale="oracle: every rule stated, every helper tool", targets="level selection")


def selection_harnesses(family: str | TaskFamily) -> dict[str, Harness]:
    """The selection rule's harnesses: `baseline` (the family's baseline harness sampling at `SAMPLING`
    with free tool calls: its text and tools unchanged) and `oracle` (`oracle_edit` on that baseline)."""
    fam = _family(family)
    base = apply_edit(fam.baseline_harness(), HarnessEdit((SetDecoding(BASELINE_DECODING),), rationale="sampling"))
    return {"baseline": base, "oracle": apply_edit(base, oracle_edit(fam))}


def footprint(
    family: str | TaskFamily, params: dict[str, Any], split: str = "val", n: int | None = None,
    count: Callable[[str], int] = len,
) -> list[dict[str, Any]]:
    """Per instance of `split` at `params`: the reference plan's observations (largest, total), the
    instruction's size, the number of plan steps, all measured by `count`, and whether the plan passed."""
    fam = _family(family)
    out = []
    for inst in fam.generate(split, n, **params):
        env = fam.make_env(inst)
        impl = {t.name: t.impl for t in env.tool_specs()}
        sizes = [count(env.call(impl.get(s.tool, s.tool), dict(s.args)).content)
                 for s in fam.plan(inst, fam.full_knowledge())]  # fmt: skip
        out.append({
            "id": inst.id,
            "largest_observation": max(sizes),
            "observations": sum(sizes),
            "instruction": count(inst.instruction),
            "steps": len(sizes),
            "passed": fam.check(env).passed,
        })
    return out
