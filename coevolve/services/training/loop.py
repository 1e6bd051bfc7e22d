"""The bare peft LoRA SFT loop over encoded rows, with its settings (`TrainConfig`, defined with the
configuration tree in `coevolve.config`): what a Ray Train worker runs (`coevolve.services.training.job`)
and what the throughput bench runs in-process beside it. Every epoch ends, and every
`checkpoint_every` steps within one, with a checkpoint (adapter, optimizer, torch's RNG, step counts
and losses so far) handed to the caller, which persists it; a checkpoint handed back at the start
resumes the loop from it, to the same result (an epoch's order follows from the seed and the epoch)."""

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
from coevolve.services.training.tokenise import IGNORE, EncodedRow, encode_for_training
from coevolve.values import TrainingRow


def _collate(batch: list[EncodedRow], pad_id: int) -> tuple[dict[str, Any], Any]:
    """The model's inputs for `batch`, and the targets of the logits it keeps.

    Positions and, where a sequence is tree-packed or padded, a boolean attention mask (True: may
    attend) come from each `EncodedRow`; a padding query attends to itself only, so no softmax row is
    empty; with the mask goes `causal_prefix`, the length before which every row is its unpadded trunk
    (`_tree_attention`). Only the logits that predict a loss-bearing token are computed (`logits_to_keep`,
    the union over the batch); targets[b, j] is what row b's kept logit j predicts, IGNORE where nothing."""
    import torch

    width = max(len(r.input_ids) for r in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    pos = torch.zeros((len(batch), width), dtype=torch.long)
    masked = any(r.branches or len(r.input_ids) < width for r in batch)
    mask = torch.zeros((len(batch), 1, width, width), dtype=torch.bool) if masked else None
    predicted: list[dict[int, int]] = []
    for b, r in enumerate(batch):
        n = len(r.input_ids)
        ids[b, :n] = torch.tensor(r.input_ids)
        pos[b, :n] = torch.tensor(r.positions())
        if mask is not None:
            m = torch.ones((n, n), dtype=torch.bool).tril_()
            for start, end, attach in r.branches:
                m[start:end, attach:start] = False
            mask[b, 0, :n, :n] = m
            mask[b, 0, range(n, width), range(n, width)] = True
        by_predictor = {p: lab for p, lab in zip(r.predictors(), r.labels, strict=True) if lab != IGNORE}
        if len(by_predictor) != r.loss_tokens:
            raise TrainingError("two loss-bearing tokens of one training sequence share a predicting position")
        predicted.append(by_predictor)
    keep = sorted({p for by in predicted for p in by})
    column = {p: j for j, p in enumerate(keep)}
    targets = torch.full((len(batch), len(keep)), IGNORE, dtype=torch.long)
    for b, by in enumerate(predicted):
        for p, lab in by.items():
            targets[b, column[p]] = lab
    inputs = {"input_ids": ids, "position_ids": pos, "logits_to_keep": torch.tensor(keep, dtype=torch.long)}
    if mask is not None:
        inputs["attention_mask"] = mask
        inputs["causal_prefix"] = min(r.branches[0][0] if r.branches else len(r.input_ids) for r in batch)
    return inputs, targets


TREE_ATTENTION = "coevolve_tree_sdpa"


def _tree_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, dropout: float = 0.0,
                    scaling: float | None = None, causal_prefix: int | None = None, **kwargs: Any) -> Any:
    """Hugging Face's sdpa attention, split for a tree-packed batch (`_collate`): the queries before
    `causal_prefix` (every row's trunk, unpadded) attend causally within it, through sdpa's causal
    kernel, which skips the masked half; only the queries after it use the mask. With the mask alone,
    sdpa computes every query against every key: about twice the attention of a 4k-token trunk."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    def sdpa(q: Any, k: Any, v: Any, mask: Any) -> Any:
        return sdpa_attention_forward(module, q, k, v, mask, dropout=dropout, scaling=scaling, **kwargs)[0]

    if attention_mask is None or not causal_prefix or not causal_prefix < query.shape[2] == key.shape[2]:
        return sdpa(query, key, value, attention_mask), None
    t = causal_prefix
    head = sdpa(query[:, :, :t], key[:, :, :t], value[:, :, :t], None)
    tail = sdpa(query[:, :, t:], key, value, attention_mask[:, :, t:])
    return torch.cat([head, tail], dim=1), None


def load_for_training(base: str, dtype: str, device: Any = "cpu") -> Any:
    """The causal LM at `base` in `dtype`, its attention `_tree_attention`."""
    import torch
    from transformers import AttentionInterface, AutoModelForCausalLM
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(TREE_ATTENTION, _tree_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(TREE_ATTENTION, sdpa_mask)
    return AutoModelForCausalLM.from_pretrained(base, dtype=getattr(torch, dtype),
                                                attn_implementation=TREE_ATTENTION).to(device)


def batch_loss(model: Any, batch: list[EncodedRow], pad_id: int, device: Any) -> Any:
    """The mean cross-entropy over `batch`'s loss-bearing tokens."""
    import torch

    inputs, targets = _collate(batch, pad_id)
    logits = model(**{k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}).logits
    targets = targets.to(device)
    return torch.nn.functional.cross_entropy(
        logits.float().flatten(0, 1), targets.flatten(), ignore_index=IGNORE, reduction="sum"
    ) / (targets != IGNORE).sum()


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
    at each checkpoint (module docstring) with a folder holding `adapter/`, `trainer_state.pt` and
    `state.json` (the caller persists it; None on workers other than rank 0). Rank 0 writes `{step, total, epoch, loss}` to `progress_path` as it goes.
    """
    import torch
    from peft import LoraConfig, get_peft_model, set_peft_model_state_dict
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    torch.set_num_threads(max(1, int(cfg.cpus_per_worker)))
    torch.manual_seed(cfg.seed)
    tokenizer = AutoTokenizer.from_pretrained(base)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    # a sequence cut at max_seq_len before its loss-bearing turn has nothing to learn (and a loss over
    # no tokens is NaN): it is left out, and the rows left with nothing are counted
    encoded: list[EncodedRow] = []
    cut = 0
    for r in rows:
        seqs = [e for e in encode_for_training(r, tokenizer, cfg.max_seq_len) if e.loss_tokens]
        cut += not seqs
        encoded += seqs
    if not encoded:
        raise TrainingError(
            f"every one of the {cut} training rows is longer than max_seq_len {cfg.max_seq_len} before its"
            " trained turns: raise max_seq_len"
        )

    device = torch.device("cuda", torch.cuda.current_device()) if cfg.use_gpu else torch.device("cpu")
    model = load_for_training(base, cfg.dtype, device)
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
    # epoch_step / epoch_losses: the current epoch's steps taken and their losses (a mid-epoch checkpoint)
    state = {"epoch": 0, "step": 0, "losses": [], "tokens": 0, "resumed_from_epoch": None,
             "resumed_from_step": None, "epoch_step": 0, "epoch_losses": [],
             "sequences": len(encoded), "rows_cut": cut}
    ckpt = restore()
    if ckpt:
        ck = Path(ckpt)
        set_peft_model_state_dict(
            model, load_file(str(ck / "adapter" / "adapter_model.safetensors"), device=str(device))
        )
        trainer_state = torch.load(ck / "trainer_state.pt", weights_only=False, map_location=device)
        optim.load_state_dict(trainer_state["optimizer"])  # moves its state to the parameters' device
        if "rng" in trainer_state:  # dropout draws go on as if the run had not stopped
            torch.set_rng_state(trainer_state["rng"])
        state.update(json.loads((ck / "state.json").read_text()))
        state["resumed_from_epoch"] = state["epoch"]
        state["resumed_from_step"] = state["step"]
    if wrap_model is not None:
        model = wrap_model(model)
    model.train()

    per_epoch = cfg.steps_per_epoch(len(encoded))
    total = per_epoch * cfg.epochs
    t_train = 0.0
    tokens_run = 0

    def checkpoint(loss: float) -> None:
        with tempfile.TemporaryDirectory(prefix="coevolve-ckpt-") as d:
            base_model = model.module if hasattr(model, "module") else model
            if rank == 0:
                base_model.save_pretrained(Path(d) / "adapter")
                torch.save({"optimizer": optim.state_dict(), "rng": torch.get_rng_state()},
                           Path(d) / "trainer_state.pt")
                (Path(d) / "state.json").write_text(json.dumps(state))
            metrics = {
                "epoch": state["epoch"],
                "step": state["step"],
                "loss": loss,
                "tokens": state["tokens"],
                "train_s": t_train,
                "tokens_per_s": tokens_run / t_train if t_train else 0.0,
            }
            report(metrics, d if rank == 0 else None)

    for epoch in range(state["epoch"], cfg.epochs):
        gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + epoch)
        order = torch.randperm(len(encoded) * cfg.repeat, generator=gen).tolist()
        order = [order[i] % len(encoded) for i in range(rank, len(order), world)]
        epoch_losses = state["epoch_losses"]
        for b in range(state["epoch_step"], per_epoch):
            batch = [encoded[j] for j in order[b * cfg.batch_size : (b + 1) * cfg.batch_size]] or [encoded[0]]
            t0 = time.perf_counter()
            loss = batch_loss(model, batch, pad_id, device)
            loss.backward()
            optim.step()
            optim.zero_grad(set_to_none=True)
            t_train += time.perf_counter() - t0
            n_tok = sum(len(r.input_ids) for r in batch)
            tokens_run += n_tok
            state["tokens"] += n_tok
            state["step"] += 1
            epoch_losses.append(float(loss.detach()))
            if progress_path and rank == 0 and (b % 5 == 0 or b == per_epoch - 1):
                tmp = f"{progress_path}.tmp"
                Path(tmp).write_text(
                    json.dumps(
                        {"step": state["step"], "total": total, "epoch": epoch, "loss": epoch_losses[-1]}
                    )
                )
                os.replace(tmp, progress_path)
            if cfg.checkpoint_every and (b + 1) % cfg.checkpoint_every == 0 and b + 1 < per_epoch:
                state["epoch_step"] = b + 1
                checkpoint(epoch_losses[-1])
        state["epoch"] = epoch + 1
        state["losses"].append(sum(epoch_losses) / len(epoch_losses))
        state["epoch_step"], state["epoch_losses"] = 0, []
        checkpoint(state["losses"][-1])
    return {**state, "train_s": t_train, "tokens_run": tokens_run, "steps_total": total}
