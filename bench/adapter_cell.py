"""An adapter's evaluation cell against the base model's, served as the project serves them: wall time of
the same cell (SmolLM2 under a family's L0 oracle harness, val instances x 2 seeds) for the base model
and for a LoRA adapter served merged into the weights (`merged_adapters`), in the same run.

The adapter is a fresh LoRA of the warm-up's shape (rank 16 on every linear layer) with peft's default
initialisation (B = 0): it leaves the model's function unchanged, so both cells run the same workload
and the ratio measures serving alone (a trained adapter changes what the model writes, hence how long
its rollouts are). Batched bf16 arithmetic depends on which sequences share a batch, so a few rollouts
may still diverge: the script prints both cells' tokens and how many rollouts differ.

    .venv/bin/python bench/adapter_cell.py --model .coevolve/models/smollm2 [--family iot --n 50] [--json]

Serves with `coevolve serve --config deploy/serve/cpu-smollm2.yaml` in a subprocess on a store of its own
(log in bench-out/adapter-cell-serve.log), runs the cells with `coevolve.jobs.run_eval` (executor pool,
gateway, constrained calls), stops the server. Needs the machine to itself.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from serve_overhead import lora_adapter, model_folder

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

ADAPTER = "bench-identity-r16"
SEEDS = 2


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def cell_adapter(base: str, out: Path) -> None:
    """The warm-up's shape (rank 16 on every linear layer), B = 0: the model's output unchanged."""
    lora_adapter(base, out, 16, identity=True)


def serve(config: str, model: Path, store: Path, log: Path) -> subprocess.Popen:
    coevolve = [sys.executable, "-m", "coevolve.cli.app"]
    proc = subprocess.Popen([*coevolve, "serve", "--config", config, "--store", str(store),
                             "-s", f"models.0.source={model.resolve()}", "-s", f"models.0.merged_adapters=[{ADAPTER}]"],
                            stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=ROOT)
    while subprocess.run([*coevolve, "serve", "status", "--store", str(store)], check=False, capture_output=True, cwd=ROOT).returncode:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited ({proc.returncode}); see {log}")
        time.sleep(5)
    return proc


def cell(store: Path, model: str, family: str, harness_id: str, n: int) -> tuple[float, dict, list]:
    from coevolve.jobs import EvalRequest, run_eval, validate_eval
    from coevolve.store.store import HarnessStore
    from coevolve.tasks.helpers import LEVELS

    req = EvalRequest(family, "val", n, harness_id, (model,), 4, 0, None, repeats=SEEDS,
                      params=tuple(sorted(LEVELS["L0"].items())), max_in_flight=16)
    started = time.perf_counter()
    [res] = run_eval(validate_eval(req, store), progress=False)
    seconds = time.perf_counter() - started
    out = res.as_json()
    with HarnessStore(store, create=False) as hs:
        trajs = sorted(hs.get_trajectories(out["run_id"]), key=lambda t: (t.instance.id, t.seed))
    return seconds, out, [(t.instance.id, t.seed, len(t.turns), t.passed, t.error, [m.get("content") for m in t.messages]) for t in trajs]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=".coevolve/models/smollm2", help="model folder")
    ap.add_argument("--config", default="deploy/serve/cpu-smollm2.yaml", help="serve profile")
    ap.add_argument("--family", default="iot")
    ap.add_argument("--n", type=int, default=50, help="val instances (x 2 seeds)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    model = model_folder(a.model)
    if model is None:
        return 2
    from coevolve.store.store import HarnessStore
    from coevolve.tasks.helpers import selection_harnesses

    store = Path(tempfile.mkdtemp(prefix="bench-adapter-cell-")) / "store"
    (store / "adapters").mkdir(parents=True)
    progress(f"an identity LoRA adapter (rank 16, B = 0) in {store} ...")
    cell_adapter(str(model), store / "adapters" / ADAPTER)
    harness = selection_harnesses(a.family)["oracle"]
    with HarnessStore(store, create=True) as hs:
        hs.put_harness(harness, rationale="adapter cell bench: the level rule's oracle harness")
    (ROOT / "bench-out").mkdir(exist_ok=True)
    log = ROOT / "bench-out" / "adapter-cell-serve.log"
    progress(f"serving {a.config} with the adapter merged beside the base (log {log}) ...")
    proc = serve(a.config, model, store, log)
    try:
        runs = {}
        for name, ref in (("base", "vllm/smollm2"), ("adapter merged", f"vllm/smollm2@{ADAPTER}")):
            progress(f"cell: {name} ({ref}), {a.n} x {SEEDS} rollouts ...")
            runs[name] = cell(store, ref, a.family, harness.id, a.n)
            progress(f"  {runs[name][0]:.1f} s")
    finally:
        subprocess.run([sys.executable, "-m", "coevolve.cli.app", "serve", "stop", "--store", str(store)], check=False, capture_output=True, cwd=ROOT)
        proc.wait(timeout=120)
    (base_s, base, base_r), (merged_s, merged, merged_r) = runs["base"], runs["adapter merged"]
    out = {
        "family": a.family, "rollouts": base["n"], "base_seconds": round(base_s, 1), "merged_seconds": round(merged_s, 1),
        "ratio": round(merged_s / base_s, 3), "rollouts_differing": sum(b != m for b, m in zip(base_r, merged_r, strict=True)),
        "tokens": {"base": base["total_tokens"], "merged": merged["total_tokens"]},
        "passed": {"base": base["passed"], "merged": merged["passed"]},
    }
    if a.json:
        print(json.dumps(out))
    else:
        print(f"{a.family} L0 oracle cell, {out['rollouts']} rollouts: base {out['base_seconds']} s, adapter merged "
              f"{out['merged_seconds']} s, ratio {out['ratio']:.2f} (rollouts differing: {out['rollouts_differing']}; "
              f"tokens {out['tokens']['base']} vs {out['tokens']['merged']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
