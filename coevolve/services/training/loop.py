"""The bare peft LoRA SFT loop over encoded rows, with its settings (`TrainConfig`, defined with the
configuration tree in `coevolve.config`): what a Ray Train worker runs (`coevolve.services.training.job`)
and what the throughput bench runs in-process beside it. Every
epoch ends with a checkpoint (adapter, optimizer, step count) handed to the caller, which persists it;
a checkpoint handed back at the start resumes the loop from it."""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from coevolve.config import TrainConfig
from coevolve.services.training.rows import TrainingError
from coevolve.services.training.tokenise import IGNORE, EncodedRow, encode_row, training_sequences
from coevolve.values import TrainingRow


def _collate(batch: list[EncodedRow], pad_id: int) -> dict[str, Any]:
    import torch

    width = max(len(r.input_ids) for r in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    lab = torch.full((len(batch), width), IGNORE, dtype=torch.long)
    att = torch.zeros((len(batch), width), dtype=torch.long)
    for i, r in enumerate(batch):
        n = len(r.input_ids)
        ids[i, :n] = torch.tensor(r.input_ids)
        lab[i, :n] = torch.tensor(r.labels)
        att[i, :n] = 1
    if bool(att.all()):  # no padding: let attention take its unmasked (faster) path
        return {"input_ids": ids, "labels": lab}
    return {"input_ids": ids, "labels": lab, "attention_mask": att}


def run_peft_loop(
    base: str,
    rows: Sequence[TrainingRow],
    cfg: TrainConfig,
    *,
    restore: Callable[[], str | None],
    report: Callable[[dict[str, Any], str | None], None],
    rank: int = 0,
    world: int = 1,
    wrap_model: Callable[[Any], Any] | None = None,
    progress_path: str | None = None,
) -> dict[str, Any]:
    """The LoRA SFT loop on the base model folder `base`, shared by the Ray Train worker and the in-process
    bench baseline. `rows` are taken as they are (validated where they entered training).

    `restore()` returns a checkpoint folder to resume from (or None); `report(metrics, folder)` is called
    after each epoch with a folder holding `adapter/` and `trainer_state.pt` (the caller persists it; None
    on workers other than rank 0). Rank 0 writes `{step, total, epoch, loss}` to `progress_path` as it goes.
    """
    import torch
    from peft import LoraConfig, get_peft_model, set_peft_model_state_dict
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(max(1, int(cfg.cpus_per_worker)))
    torch.manual_seed(cfg.seed)
    tokenizer = AutoTokenizer.from_pretrained(base)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    encoded = [encode_row(s, tokenizer, cfg.max_seq_len) for r in rows for s in training_sequences(r)]
    # a sequence cut at max_seq_len before its loss-bearing turn has nothing to learn (and a loss over
    # no tokens is NaN): it is left out, and counted
    cut = sum(1 for e in encoded if not e.loss_tokens)
    encoded = [e for e in encoded if e.loss_tokens]
    if not encoded:
        raise TrainingError(
            f"every one of the {cut} training sequences is longer than max_seq_len {cfg.max_seq_len} before its"
            " trained turn: raise max_seq_len"
        )

    device = torch.device("cuda", torch.cuda.current_device()) if cfg.use_gpu else torch.device("cpu")
    model = AutoModelForCausalLM.from_pretrained(base, dtype=getattr(torch, cfg.dtype)).to(device)
    lora = LoraConfig(
        r=cfg.rank,
        lora_alpha=cfg.alpha,
        lora_dropout=cfg.dropout,
        target_modules=list(cfg.target_modules),
        task_type="CAUSAL_LM",
    )
    model = get_peft_model(model, lora)  # autocast_adapter_dtype: LoRA weights stay float32 on a bf16 base
    optim = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=cfg.lr, weight_decay=cfg.weight_decay
    )
    state = {"epoch": 0, "step": 0, "losses": [], "tokens": 0, "resumed_from_epoch": None,
             "sequences": len(encoded), "sequences_cut": cut}
    ckpt = restore()
    if ckpt:
        ck = Path(ckpt)
        set_peft_model_state_dict(
            model, load_file(str(ck / "adapter" / "adapter_model.safetensors"), device=str(device))
        )
        trainer_state = torch.load(ck / "trainer_state.pt", weights_only=False, map_location=device)
        optim.load_state_dict(trainer_state["optimizer"])  # moves its state to the parameters' device
        state.update(json.loads((ck / "state.json").read_text()))
        state["resumed_from_epoch"] = state["epoch"]
    if wrap_model is not None:
        model = wrap_model(model)
    model.train()

    per_epoch = cfg.steps_per_epoch(len(encoded))
    total = per_epoch * cfg.epochs
    t_train = 0.0
    tokens_run = 0
    for epoch in range(state["epoch"], cfg.epochs):
        gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + epoch)
        order = torch.randperm(len(encoded) * cfg.repeat, generator=gen).tolist()
        order = [order[i] % len(encoded) for i in range(rank, len(order), world)]
        epoch_losses = []
        for b in range(per_epoch):
            batch = [encoded[j] for j in order[b * cfg.batch_size : (b + 1) * cfg.batch_size]] or [encoded[0]]
            t0 = time.perf_counter()
            out = model(**{k: v.to(device) for k, v in _collate(batch, pad_id).items()})
            out.loss.backward()
            optim.step()
            optim.zero_grad(set_to_none=True)
            t_train += time.perf_counter() - t0
            n_tok = sum(len(r.input_ids) for r in batch)
            tokens_run += n_tok
            state["tokens"] += n_tok
            state["step"] += 1
            epoch_losses.append(float(out.loss.detach()))
            if progress_path and rank == 0 and (b % 5 == 0 or b == per_epoch - 1):
                tmp = f"{progress_path}.tmp"
                Path(tmp).write_text(
                    json.dumps(
                        {"step": state["step"], "total": total, "epoch": epoch, "loss": epoch_losses[-1]}
                    )
                )
                os.replace(tmp, progress_path)
        state["epoch"] = epoch + 1
        state["losses"].append(sum(epoch_losses) / len(epoch_losses))
        with tempfile.TemporaryDirectory(prefix="coevolve-ckpt-") as d:
            base_model = model.module if hasattr(model, "module") else model
            if rank == 0:
                base_model.save_pretrained(Path(d) / "adapter")
                torch.save({"optimizer": optim.state_dict()}, Path(d) / "trainer_state.pt")
                (Path(d) / "state.json").write_text(json.dumps(state))
            metrics = {
                "epoch": state["epoch"],
                "step": state["step"],
                "loss": state["losses"][-1],
                "tokens": state["tokens"],
                "train_s": t_train,
                "tokens_per_s": tokens_run / t_train if t_train else 0.0,
            }
            report(metrics, d if rank == 0 else None)
    return {**state, "train_s": t_train, "tokens_run": tokens_run, "steps_total": total}
