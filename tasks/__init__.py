"""The enterprise task families. `get_family(name)` returns a (cached) family instance."""

from __future__ import annotations

from functools import cache
from importlib import import_module

from tasks.base import TaskFamily

# family name -> "module:Class"; each family is self-contained in its module.
FAMILY_CLASSES: dict[str, str] = {
    "iot": "tasks.iot:IotFamily",
}


def family_names() -> list[str]:
    return list(FAMILY_CLASSES)


@cache
def get_family(name: str) -> TaskFamily:
    try:
        module, cls = FAMILY_CLASSES[name].split(":")
    except KeyError:
        raise ValueError(f"unknown task family {name!r} (families: {', '.join(FAMILY_CLASSES)})") from None
    return getattr(import_module(module), cls)()


__all__ = ["TaskFamily", "family_names", "get_family"]
