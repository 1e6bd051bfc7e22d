"""Training cost of the warm-up's rows: the loop's tree-packed form vs one sequence per trained turn.

The warm-up's rows (`bench/warmup.py`) are constrained, most with several trained turns. The loop trains
each row as one tree-packed sequence and computes only the logits that predict a loss-bearing token
(`coevolve.services.training.encode_for_training`, `loop.batch_loss`); the baseline is the form it replaces:
one sequence per trained turn (`training_sequences` + `encode_row`), each with Hugging Face's own loss
over every logit. Both sides run forward + backward on the same LoRA model (the loop's, `load_for_training`,
with the warm-up's rank and alpha), the same threads and dtype, on a seeded sample of rows, alternating
which side goes first per row.

Printed: tokens per epoch both ways over all rows, seconds per sampled row both ways, the ratio
baseline / packed, and each side's projected hours per epoch (mean seconds per row x rows).

    python bench/packed_training.py [--base .coevolve/models/smollm2] [--sample 8] [--threads 2]
        [--dtype float32|bfloat16] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", default=str(ROOT / ".coevolve" / "models" / "smollm2"))
    ap.add_argument("--sample", type=int, default=8, help="rows timed both ways")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"), help="the base weights'")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from coevolve.services.logs import configure_logging, quiet_libraries

    quiet_libraries()
    configure_logging(json_lines=False, level="warning")
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoTokenizer
    from warmup import WARMUP_CONFIG, warmup_rows

    from coevolve.services.training import TrainConfig, encode_for_training, encode_row, training_sequences
    from coevolve.services.training.loop import batch_loss, load_for_training

    torch.set_num_threads(args.threads)
    rows, _ = warmup_rows()
    tok = AutoTokenizer.from_pretrained(args.base)
    limit = WARMUP_CONFIG["max_seq_len"]
    split = [[encode_row(s, tok, limit) for s in training_sequences(r)] for r in rows]
    packed = [encode_for_training(r, tok, limit) for r in rows]
    tokens = {"split": sum(len(e.input_ids) for es in split for e in es),
              "packed": sum(len(e.input_ids) for es in packed for e in es)}
    progress(f"{len(rows)} rows: {sum(map(len, split))} per-turn sequences, {tokens['split']:,} tokens; "
             f"{sum(map(len, packed))} packed sequences, {tokens['packed']:,} tokens")

    model = load_for_training(args.base, args.dtype)  # the loop's model; no mask: plain sdpa
    model = get_peft_model(model, LoraConfig(r=WARMUP_CONFIG["rank"], lora_alpha=WARMUP_CONFIG["alpha"],
                                             lora_dropout=0.0, target_modules=TrainConfig().target_modules,
                                             task_type="CAUSAL_LM"))
    model.train()
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id

    def run_split(i: int) -> None:
        for e in split[i]:
            model(input_ids=torch.tensor([e.input_ids]), labels=torch.tensor([e.labels])).loss.backward()

    def run_packed(i: int) -> None:
        for e in packed[i]:
            batch_loss(model, [e], pad, "cpu").backward()

    sample = random.Random(0).sample(range(len(rows)), min(args.sample, len(rows)))
    secs = {"split": 0.0, "packed": 0.0}
    for k, i in enumerate(sample):
        order = [("split", run_split), ("packed", run_packed)]
        for name, fn in order if k % 2 == 0 else order[::-1]:
            t0 = time.perf_counter()
            fn(i)
            secs[name] += time.perf_counter() - t0
            model.zero_grad(set_to_none=True)
        progress(f"row {k + 1}/{len(sample)} ({len(split[i])} turns): split {secs['split']:.0f} s, "
                 f"packed {secs['packed']:.0f} s so far")
    out = {
        "rows": len(rows), "sampled": len(sample), "threads": args.threads, "dtype": args.dtype,
        "tokens_per_epoch": tokens, "token_ratio": round(tokens["split"] / tokens["packed"], 2),
        "s_per_row": {k: round(v / len(sample), 2) for k, v in secs.items()},
        "time_ratio_split_over_packed": round(secs["split"] / secs["packed"], 2),
        "projected_h_per_epoch": {k: round(v / len(sample) * len(rows) / 3600, 2) for k, v in secs.items()},
    }
    print(json.dumps(out) if args.json else "\n".join(f"{k}: {v}" for k, v in out.items()))


if __name__ == "__main__":
    main()
