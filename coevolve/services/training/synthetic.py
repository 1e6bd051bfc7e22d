"""The synthetic training backend: `coevolve.testbed.policy.learn_adapter(rows, base_model)` learns a
synthetic adapter (docs/ARCHITECTURE.md §5) from the rows, written as `synthetic_adapter.json` in the adapter folder."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from coevolve.services.training.loop import TrainConfig
from coevolve.services.training.rows import trained_under
from coevolve.values import AdapterRef, TrainingRow

SYNTHETIC_ADAPTER_FILE = "synthetic_adapter.json"


def train_synthetic(
    rows: Sequence[TrainingRow], base: str, adapter_id: str, cfg: TrainConfig, out: Path, digest: str
) -> AdapterRef:
    """Learn the adapter into the new folder `out`; the record to register (`digest`: the rows' hash)."""
    from coevolve.testbed.policy import learn_adapter

    learned = learn_adapter(rows, base_model=base)
    out.mkdir(parents=True)
    (out / SYNTHETIC_ADAPTER_FILE).write_text(json.dumps(learned, indent=2, sort_keys=True, default=str))
    return AdapterRef(
        id=adapter_id,
        base_model=base,
        path=str(out),
        dataset_hash=digest,
        train_config={"backend": "synthetic", **cfg.model_dump()},
        metrics={"rows": len(rows)},
        trained_under=trained_under(rows),
    )
