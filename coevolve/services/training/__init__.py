"""LoRA SFT of the weak model on training rows: one job interface (`job.train_adapter`), two backends
(the Ray Train peft job, `job`, and the synthetic one, `synthetic`), over the rows as they enter
(`rows`), rendered to tokens as vLLM renders them (`tokenise`) and trained by the bare peft loop
(`loop`).

Three private helpers are importable from here for the callers that reach into them: the CLI's early
checks (`_check_adapter_id`, `_check_base`) and the template normalisation the tests compare with
(`_template_messages`)."""

from __future__ import annotations

from coevolve.services.training.job import BACKENDS, TRAIN_RUNS_DIR, adapter_dir, train_adapter
from coevolve.services.training.job import _check_adapter_id as _check_adapter_id
from coevolve.services.training.job import _check_base as _check_base
from coevolve.services.training.loop import TrainConfig, run_peft_loop
from coevolve.services.training.rows import TrainingError, load_rows
from coevolve.services.training.synthetic import SYNTHETIC_ADAPTER_FILE
from coevolve.services.training.tokenise import (
    IGNORE,
    constrained_answer,
    encode_for_training,
    encode_row,
    prompt_ids,
    training_sequences,
)
from coevolve.services.training.tokenise import _template_messages as _template_messages
from coevolve.store.datasets import dataset_hash

__all__ = [
    "BACKENDS",
    "IGNORE",
    "SYNTHETIC_ADAPTER_FILE",
    "TRAIN_RUNS_DIR",
    "TrainConfig",
    "TrainingError",
    "adapter_dir",
    "constrained_answer",
    "dataset_hash",
    "encode_for_training",
    "encode_row",
    "load_rows",
    "prompt_ids",
    "run_peft_loop",
    "train_adapter",
    "training_sequences",
]
