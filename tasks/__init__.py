"""The enterprise task families. `get_family(name)` returns a (cached) family instance."""

from __future__ import annotations

from functools import cache
from importlib import import_module

from tasks.base import TaskFamily

# family name -> "module:Class"; each family is self-contained in its module.
FAMILY_CLASSES: dict[str, str] = {
    "payroll": "tasks.payroll:PayrollFamily",
    "budget": "tasks.budget:BudgetFamily",
    "stock": "tasks.stock:StockFamily",
    "iot": "tasks.iot:IotFamily",
    "browser": "tasks.browser:BrowserFamily",
    "website": "tasks.website:WebsiteFamily",
    "refactor": "tasks.refactor:RefactorFamily",
}


def family_names() -> list[str]:
    """Families whose module is present (the suite grows one module at a time)."""
    from importlib.util import find_spec

    return [n for n, path in FAMILY_CLASSES.items() if find_spec(path.split(":")[0]) is not None]


@cache
def get_family(name: str) -> TaskFamily:
    if name not in family_names():
        raise ValueError(f"unknown task family {name!r} (families: {', '.join(family_names())})")
    module, cls = FAMILY_CLASSES[name].split(":")
    return getattr(import_module(module), cls)()


__all__ = ["TaskFamily", "family_names", "get_family"]
