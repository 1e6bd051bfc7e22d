"""The one training job interface, `train_adapter(rows, base, adapter_id, config, store, backend)`: it
takes the rows in once, picks the backend and registers the adapter in the store.

- Rows enter once: a dataset of the store (a `DatasetRecord`, `coevolve.store.datasets`) is read by the
  dataset layer, which checked its rows and records their hash; rows from anywhere else (a JSONL file,
  rows or dicts) are validated and hashed here (`rows.load_rows`, `coevolve.store.datasets.dataset_hash`).
- `backend="peft"`: a Ray Train `TorchTrainer` job (`ScalingConfig(num_workers=1, use_gpu=False)` on
  CPU) running the peft LoRA loop (`loop.run_peft_loop`) on the rows rendered with the base model's own
  chat template as vLLM renders them at inference (`tokenise`). What crosses into the job is where the
  rows are, never the rows: a dataset's own `rows.jsonl`, or for other rows the job's copy of them in
  `<store>/train_runs/<adapter_id>.rows.jsonl`; the workers read them from that file. Rerunning a job
  with the same adapter id and store resumes from its last epoch checkpoint. The final adapter folder is
  a plain peft folder that vLLM loads unchanged; it lands in `<store>/adapters/<adapter_id>/`, the folder
  the Serve app loads adapters from by id, and an `AdapterRef` goes into the store, recording the
  harnesses and decoding policies the rows were collected under (`trained_under`, from the rows'
  provenance).
- `backend="synthetic"`: the synthetic backend (`synthetic`) learns from the same rows in this process;
  the result is registered the same way.

Heavy imports (torch, transformers, peft, ray.train) stay inside the functions that need them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from coevolve.services.training.loop import TrainConfig, run_peft_loop
from coevolve.services.training.rows import (
    TrainingError,
    load_rows,
    read_rows_file,
    require_learnable,
    trained_under,
    write_rows_file,
)
from coevolve.services.training.synthetic import train_synthetic
from coevolve.store.datasets import DatasetRecord, dataset_hash, read_rows
from coevolve.values import AdapterRef, TrainingRow, check_adapter_id

log = structlog.get_logger(role="trainer")

ADAPTERS_DIR = "adapters"
TRAIN_RUNS_DIR = "train_runs"
BACKENDS = ("peft", "synthetic")

ProgressFn = Callable[[dict[str, Any]], None]
# what a job trains on: a dataset of the store, a JSONL rows file, or rows (TrainingRow or JSON dicts)
RowSource = DatasetRecord | str | Path | Iterable[TrainingRow | dict[str, Any]]


@dataclass(frozen=True)
class TrainingData:
    """The rows a job trains on, as they entered: their hash, and the dataset file they are in (None for
    rows that came from outside a dataset)."""

    rows: tuple[TrainingRow, ...]
    digest: str
    jsonl: Path | None


def training_data(source: RowSource, store: Any) -> TrainingData:
    """A dataset of `store` as the dataset layer reads it (its hash checked, its rows as written), or
    other rows validated and hashed here, once. Raises TrainingError (or DatasetError)."""
    if isinstance(source, DatasetRecord):
        rows = read_rows(store_root(store), source.id)
        require_learnable(rows)
        return TrainingData(tuple(rows), source.manifest["sha256"], source.jsonl.resolve())
    rows = load_rows(source)
    return TrainingData(tuple(rows), dataset_hash(rows), None)


def store_root(store: Any) -> Path:
    return Path(getattr(store, "root", store))


def adapter_dir(store: Any, adapter_id: str) -> Path:
    return store_root(store) / ADAPTERS_DIR / adapter_id


def _check_base(base: str | Path) -> Path:
    p = Path(base)
    if not (p / "config.json").is_file():
        raise TrainingError(
            f"base model folder {str(p)!r} has no config.json (make one: coevolve models make-tiny)"
        )
    return p.resolve()


def _check_adapter_id(adapter_id: str) -> None:
    try:
        check_adapter_id(adapter_id)
    except ValueError as e:
        raise TrainingError(str(e)) from None


def train_adapter(
    rows: RowSource,
    base: str | Path,
    adapter_id: str,
    config: TrainConfig | dict[str, Any] | None = None,
    store: Any = None,
    backend: str = "peft",
    *,
    progress: ProgressFn | None = None,
) -> AdapterRef:
    """Train an adapter from a dataset of the store or from rows, and register it in the store (module
    docstring).

    `store` is a `HarnessStore` (or its directory). The peft backend needs Ray running
    (`coevolve.cluster.runtime.start_ray`); rerunning after a crash resumes from the last checkpoint.
    """
    if backend not in BACKENDS:
        raise TrainingError(f"unknown training backend {backend!r} (choose from {', '.join(BACKENDS)})")
    if store is None:
        raise TrainingError("train_adapter needs a store")
    cfg = config if isinstance(config, TrainConfig) else TrainConfig.model_validate(config or {})
    _check_adapter_id(adapter_id)
    data = training_data(rows, store)
    if not hasattr(store, "put_adapter"):
        from coevolve.store.store import HarnessStore

        store = HarnessStore(store)
    out = adapter_dir(store, adapter_id)
    if out.exists():
        raise TrainingError(f"adapter {adapter_id!r} already exists in the store ({out})")

    if backend == "synthetic":
        ref = train_synthetic(data.rows, str(base), adapter_id, cfg, out, data.digest)
    else:
        ref = _train_peft(data, _check_base(base), adapter_id, cfg, store, out, progress)
    store.put_adapter(ref)
    log.info("adapter registered", adapter=adapter_id, backend=backend, path=ref.path)
    return ref


def _ray_train_loop(job: dict[str, Any]) -> None:
    """Runs in each Ray Train worker: the rows are read from the file the job names."""
    import ray.train
    import ray.train.torch

    ctx = ray.train.get_context()
    world = ctx.get_world_size()

    def restore() -> str | None:
        ck = ray.train.get_checkpoint()
        if ck is None:
            return None
        local = tempfile.mkdtemp(prefix="coevolve-restore-")
        return ck.to_directory(local)

    def report(metrics: dict[str, Any], folder: str | None) -> None:
        ck = ray.train.Checkpoint.from_directory(folder) if folder else None
        ray.train.report(metrics, checkpoint=ck)

    wrap = ray.train.torch.prepare_model if world > 1 else None
    run_peft_loop(
        job["base"],
        read_rows_file(job["rows_path"]),
        TrainConfig.model_validate(job["config"]),
        restore=restore,
        report=report,
        rank=ctx.get_world_rank(),
        world=world,
        wrap_model=wrap,
        progress_path=job["progress_path"],
    )


# glibc malloc on a CPU worker: with its moving mmap threshold, the activations of rows of varying length
# (a few MB to GBs) fragmented the heap of a 2-core warm-up past 20 GB in 45 steps; tensors of 1 MiB and
# more are mmapped instead and go back to the OS when freed (read at process start, so set on the worker).
CPU_WORKER_ENV = {"MALLOC_MMAP_THRESHOLD_": "1048576"}


def _train_peft(
    data: TrainingData,
    base: Path,
    adapter_id: str,
    cfg: TrainConfig,
    store: Any,
    out: Path,
    progress: ProgressFn | None,
) -> AdapterRef:
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    runs = (store_root(store) / TRAIN_RUNS_DIR).resolve()
    runs.mkdir(parents=True, exist_ok=True)
    progress_path = runs / f"{adapter_id}.progress.json"
    progress_path.unlink(missing_ok=True)  # an earlier, interrupted job's figures are not this job's progress
    rows_path = data.jsonl or runs / f"{adapter_id}.rows.jsonl"
    if data.jsonl is None:  # rows from outside a dataset: the job's copy, which its workers read
        write_rows_file(rows_path, data.rows)
    job = {
        "base": str(base),
        "rows_path": str(rows_path),
        "config": cfg.model_dump(),
        "progress_path": str(progress_path),
    }
    trainer = TorchTrainer(
        _ray_train_loop,
        train_loop_config=job,
        scaling_config=ScalingConfig(
            num_workers=cfg.num_workers,
            use_gpu=cfg.use_gpu,
            resources_per_worker={"CPU": cfg.cpus_per_worker},
        ),
        run_config=RunConfig(
            name=adapter_id,
            storage_path=str(runs),
            checkpoint_config=CheckpointConfig(num_to_keep=2),
            failure_config=FailureConfig(max_failures=0),
            worker_runtime_env={} if cfg.use_gpu else {"env_vars": CPU_WORKER_ENV},
        ),
    )
    stop = threading.Event()
    watcher = None
    if progress is not None:
        # about one sequence per row (`encode_for_training`); the loop's own progress has the exact total
        progress({"step": 0, "total": cfg.steps_per_epoch(len(data.rows)) * cfg.epochs, "epoch": 0, "loss": None})

        def watch() -> None:
            last = None
            while not stop.wait(0.5):
                try:
                    text = progress_path.read_text()
                except OSError:
                    continue
                if text != last:
                    last = text
                    with contextlib.suppress(json.JSONDecodeError):
                        progress(json.loads(text))

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
    t0 = time.perf_counter()
    try:
        result = trainer.fit()
    finally:
        stop.set()
        if watcher is not None:
            watcher.join(timeout=2)
        if data.jsonl is None:
            rows_path.unlink(missing_ok=True)
    if result.error is not None:
        raise RuntimeError(f"training job {adapter_id!r} failed: {result.error}")
    if result.checkpoint is None:
        raise RuntimeError(f"training job {adapter_id!r} reported no checkpoint")
    with result.checkpoint.as_directory() as d:
        state = json.loads((Path(d) / "state.json").read_text())
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = out.parent / f".{adapter_id}.staging"
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(Path(d) / "adapter", staging)
    os.replace(staging, out)
    metrics = {
        "steps": state["step"],
        "epochs": state["epoch"],
        "loss_curve": state["losses"],
        "tokens": state["tokens"],
        "resumed_from_epoch": state.get("resumed_from_epoch"),
        "sequences": state.get("sequences"),
        **({"rows_cut": state["rows_cut"]} if state.get("rows_cut") else {}),
        "wall_s": round(time.perf_counter() - t0, 3),
        "tokens_per_s": (result.metrics or {}).get("tokens_per_s"),
    }
    if progress is not None:
        progress(
            {
                "step": state["step"],
                "total": state["step"],
                "epoch": state["epoch"],
                "loss": state["losses"][-1],
            }
        )
    return AdapterRef(
        id=adapter_id,
        base_model=str(base),
        path=str(out),
        dataset_hash=data.digest,
        train_config={"backend": "peft", **cfg.model_dump()},
        metrics=metrics,
        trained_under=trained_under(data.rows),
    )
