"""The persistent, content-addressed harness store and the training datasets kept in it (docs/ARCHITECTURE.md §2-3).

`HarnessStore` (coevolve.store.store) is the one class callers use; its parts live in the modules
beside it. Imports only the standard library and the project's values and codec, never ray or a model
backend.
"""

from __future__ import annotations

from coevolve.store.datasets import (
    DatasetError,
    DatasetRecord,
    list_datasets,
    read_manifest,
    read_rows,
    write_dataset,
)
from coevolve.store.store import (
    PROBLEM_KINDS,
    CheckReport,
    Event,
    HarnessRecord,
    HarnessStore,
    Lease,
    Problem,
    RunRecord,
    StoreError,
    is_fresh_store_dir,
    rollout_key,
    trajectory_key,
)

__all__ = [
    "PROBLEM_KINDS",
    "CheckReport",
    "DatasetError",
    "DatasetRecord",
    "Event",
    "HarnessRecord",
    "HarnessStore",
    "Lease",
    "Problem",
    "RunRecord",
    "StoreError",
    "is_fresh_store_dir",
    "list_datasets",
    "read_manifest",
    "read_rows",
    "rollout_key",
    "trajectory_key",
    "write_dataset",
]
