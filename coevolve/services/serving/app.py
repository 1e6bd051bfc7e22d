"""Serving the weak model: a Ray Serve LLM app (vLLM) with LoRA adapters loaded at run time by id.

- `ServeConfig` (pydantic, loaded from `deploy/serve/<profile>.yaml`) describes the app: where it
  listens (127.0.0.1 unless configured otherwise), the models it serves (source folder or HF id,
  accelerator, engine settings, tool parser, LoRA limits, replicas/autoscaling).
- `build_app(config, adapters_dir)` turns it into a Ray Serve application with `ray.serve.llm`
  (`LLMConfig` + `build_openai_app`): an OpenAI-compatible HTTP surface with tool calling. Adapters are
  read from `<store>/adapters/<adapter_id>/` (where `coevolve.services.training` writes them), so registering
  an adapter makes it servable as `model@adapter` without a restart.
- A model's `merged_adapters` are each merged into its weights (`prepare_merged`, kept under
  `<store>/merged/<model>/<adapter>`) and served as an engine of their own without LoRA; the state file
  maps `model@adapter` to it and `litellm_route` sends such requests there. On CPU, vLLM's per-request
  LoRA path costs ~9x in prefill, so an evaluation of one adapter serves it merged (base speed).
- `start_serving` / `stop_serving` run it on the Ray the caller started (`coevolve.cluster.runtime`), and write /
  remove the state file `<store>/serve.json` that tells clients where the server is.
- `litellm_route(ref)` maps a `vllm/<model>[@adapter]` ModelRef to `litellm.acompletion` kwargs; the
  model gateway calls it. The endpoint comes from `$COEVOLVE_SERVE_URL` or the state file.
- Constrained tool calls (a harness's `DecodingPolicy`, `coevolve.llm.constrained`) reach the app as
  `response_format` json_schema requests, which vLLM serves with its structured-output backend. Each
  model is configured for them (`compact_json`, on by default): vLLM's `guidance` backend with
  `disable_any_whitespace`, because with the free whitespace JSON grammars allow, a small model (the
  tiny random one at any temperature, measured) fills its whole reply cap with newlines inside the
  object and never writes a call; and `guidance` rather than `xgrammar` because vLLM 0.32 refuses
  schemas xgrammar cannot compile (a string with both a pattern and a length bound, a tool schema an
  edit may well write) and whitespace control needs one named backend, not `auto`'s fallback.

Ray Serve and vLLM are imported only inside the functions that build or run the app.
"""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Literal

import structlog
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from coevolve.errors import BadInput
from coevolve.settings import environment, variable
from coevolve.values import ModelRef, check_adapter_id, with_adapter

log = structlog.get_logger(role="serving")

STATE_FILE = "serve.json"
MERGED_DIR = "merged"
SERVE_URL_ENV = variable("serve_url")

# Serve's proxy must answer its readiness check within 5 s by default; on a small, busy CPU node (vLLM
# start-up saturates it) that fails and Serve kills the proxy in a loop. These must be in the
# environment before Ray starts (its processes inherit it): `apply_serve_env_defaults()` first.
SERVE_ENV_DEFAULTS = {
    "RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "120",
    "RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S": "60",
    "RAY_SERVE_PROXY_HEALTH_CHECK_PERIOD_S": "30",
}


def apply_serve_env_defaults() -> None:
    for k, v in SERVE_ENV_DEFAULTS.items():
        os.environ.setdefault(k, v)


class ServingError(BadInput):
    """Bad serve config or no server to talk to: one clear line for the user."""


# ------------------------------------------------------------------------------------- config
class Autoscaling(BaseModel):
    model_config = ConfigDict(extra="forbid")

    min_replicas: int = Field(1, ge=0)
    max_replicas: int = Field(1, ge=1)
    initial_replicas: int | None = Field(None, ge=0)
    target_ongoing_requests: int = Field(32, ge=1, description="per replica; Serve scales to hold it")

    @model_validator(mode="after")
    def _order(self) -> Autoscaling:
        if self.min_replicas > self.max_replicas:
            raise ValueError("min_replicas must not exceed max_replicas")
        return self


class ModelProfile(BaseModel):
    """One served model (a base model; its adapters come from the adapters folder)."""

    model_config = ConfigDict(extra="forbid")

    model_id: str = Field(description="the name clients use: ModelRef `vllm/<model_id>[@adapter]`")
    source: str = Field(description="a local model folder or a Hugging Face model id")
    accelerator: Literal["cpu", "gpu"] = "cpu"
    accelerator_type: str | None = Field(None, description="GPU type for Ray scheduling, e.g. H100")
    tensor_parallel_size: int = Field(1, ge=1)
    lora: bool = Field(True, description="serve adapters from the adapters folder")
    max_lora_rank: int = Field(16, ge=1, description="largest adapter rank the engine accepts")
    max_loras: int = Field(4, ge=1, description="adapters active in one batch")
    max_adapters_per_replica: int = Field(16, ge=1, description="adapters kept loaded per replica (LRU)")
    tool_parser: str | None = Field("hermes", description="vLLM tool-call parser; None: no tool calling")
    engine: dict[str, Any] = Field(default_factory=dict, description="more vLLM engine arguments")
    compact_json: bool = Field(
        True,
        description="structured output (constrained tool calls) as compact JSON, by vLLM's guidance backend"
        " (`COMPACT_JSON_OUTPUTS`); ignored when `engine` sets structured_outputs_config",
    )
    env: dict[str, str] = Field(default_factory=dict, description="environment of the replica and engine")
    replica_cpus: float | None = Field(
        None,
        ge=0,
        description="CPUs of the Serve replica actor itself (Ray's default 1; 0 on small CPU nodes)",
    )
    engine_cpus: float | None = Field(None, gt=0, description="CPUs of the vLLM engine bundle (CPU profiles)")
    niceness: int | None = Field(
        None,
        ge=-20,
        le=19,
        description="the engine processes' niceness (Ray starts workers at 15; CPU profiles set 0 so that the"
        " engine is not starved by anything else on the machine; lowering it needs CAP_SYS_NICE)",
    )
    autoscaling: Autoscaling = Field(default_factory=Autoscaling)
    merged_adapters: list[str] = Field(
        default_factory=list,
        description="adapter ids (of the adapters folder) each served merged into this model's weights, as an"
        " engine of its own (`merged_model_id`); requests for `vllm/<model_id>@<adapter>` go to it. On CPU,"
        " vLLM's per-request LoRA costs ~9x in prefill: an evaluation of one adapter serves it merged",
    )

    @field_validator("model_id")
    @classmethod
    def _plain_id(cls, v: str) -> str:
        if not v or any(c in v for c in ":@ "):
            raise ValueError(f"model_id {v!r} must be non-empty without ':', '@' or spaces")
        return v

    @field_validator("merged_adapters")
    @classmethod
    def _adapter_ids(cls, v: list[str]) -> list[str]:
        for adapter in v:
            check_adapter_id(adapter)
        if len(set(v)) != len(v):
            raise ValueError(f"duplicate adapter ids in {v}")
        return v


def merged_model_id(model_id: str, adapter: str) -> str:
    """The served name of `adapter` merged into `model_id`'s weights."""
    return f"{model_id}--{adapter}"


def merged_dir(adapters_dir: str | Path, model_id: str, adapter: str) -> Path:
    """Where `adapter` merged into `model_id` is kept: beside the adapters folder, one folder per pair."""
    return Path(adapters_dir).resolve().parent / MERGED_DIR / model_id / adapter


class ServeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field("coevolve-llm", description="Ray Serve application name")
    host: str = Field("127.0.0.1", description="HTTP bind address (0.0.0.0 only on a private network)")
    port: int = Field(8000, ge=0, le=65535, description="0: pick a free port")
    models: list[ModelProfile] = Field(min_length=1)
    adapters_dir: str | None = Field(None, description="default: <store>/adapters")
    ready_timeout_s: float = Field(900.0, gt=0)

    @model_validator(mode="after")
    def _unique(self) -> ServeConfig:
        ids = [m.model_id for m in self.models]
        if len(set(ids)) != len(ids):
            raise ValueError(f"duplicate model ids in {ids}")
        return self


def _set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    *parents, last = key.split(".")
    node: Any = data
    for p in parents:
        node = node[int(p)] if isinstance(node, list) else node.setdefault(p, {})
    node[int(last) if isinstance(node, list) else last] = value


def load_serve_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> ServeConfig:
    """Read a profile YAML; `key=value` overrides (dotted, e.g. `port=0`, `models.0.source=/m`)."""
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except OSError as e:
        raise ServingError(f"cannot read serve config {str(p)!r}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise ServingError(f"serve config {str(p)!r} is not text (not UTF-8)") from None
    except (yaml.YAMLError, RecursionError) as e:
        raise ServingError(f"serve config {str(p)!r} is not valid YAML: {' '.join(str(e).split())}") from None
    if not isinstance(data, dict):
        raise ServingError(f"serve config {str(p)!r} must be a mapping, not {type(data).__name__}")
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key or any(not part for part in key.split(".")):
            raise ServingError(f"override {item!r} is not key=value (key: dotted names, e.g. models.0.source)")
        try:
            value = yaml.safe_load(raw)
        except (yaml.YAMLError, RecursionError):
            raise ServingError(f"override {item!r}: the value is not valid YAML") from None
        try:
            _set_dotted(data, key, value)
        except (IndexError, ValueError, TypeError, AttributeError, KeyError):
            raise ServingError(f"override {item!r} does not fit the config") from None
    try:
        return ServeConfig.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "(top level)"
        raise ServingError(f"serve config {str(p)!r}: {where}: {first['msg']}") from None
    except (TypeError, ValueError, RecursionError) as e:  # e.g. unhashable keys YAML allows
        raise ServingError(f"serve config {str(p)!r}: {type(e).__name__}: {e}") from None


# ------------------------------------------------------------------------------------ the app
# vLLM's structured-output settings for constrained tool calls (module docstring)
COMPACT_JSON_OUTPUTS = {"backend": "guidance", "disable_any_whitespace": True}


def _engine_kwargs(m: ModelProfile) -> dict[str, Any]:
    kw: dict[str, Any] = {"tensor_parallel_size": m.tensor_parallel_size}
    if m.lora:
        kw.update(enable_lora=True, max_lora_rank=m.max_lora_rank, max_loras=m.max_loras)
    if m.tool_parser:
        kw.update(enable_auto_tool_choice=True, tool_call_parser=m.tool_parser)
    if m.compact_json:
        kw["structured_outputs_config"] = dict(COMPACT_JSON_OUTPUTS)
    kw.update(m.engine)
    return kw


def _resolve_source(source: str) -> str:
    """A local folder as an absolute path (replicas run elsewhere); anything else (an HF id) as is."""
    p = Path(source).expanduser()
    return str(p.resolve()) if p.exists() else source


def import_serve_llm() -> Any:
    """`coevolve.services.serving._serve_llm` (and so `ray.serve.llm`), imported without Ray Serve LLM's logging set-up
    taking over this process's root logger."""
    from coevolve.services.logs import root_logger_kept

    with root_logger_kept():
        import coevolve.services.serving._serve_llm as module
    return module


def llm_configs(config: ServeConfig, adapters_dir: str | Path) -> list[Any]:
    serve_llm = import_serve_llm()
    from ray.serve.llm import LLMConfig

    NICENESS = variable("engine_niceness")

    out = []
    lora_root = f"{serve_llm.LOCAL_PREFIX}{Path(adapters_dir).resolve()}"
    models = list(config.models)
    for m in config.models:  # each merged adapter: the same engine on the merged weights, without LoRA
        models += [m.model_copy(update={"model_id": merged_model_id(m.model_id, a), "lora": False, "merged_adapters": [],
                                        "source": str(merged_dir(adapters_dir, m.model_id, a))}) for a in m.merged_adapters]
    for m in models:
        deployment: dict[str, Any] = {"autoscaling_config": m.autoscaling.model_dump(exclude_none=True)}
        if m.replica_cpus is not None:
            deployment["ray_actor_options"] = {"num_cpus": m.replica_cpus}
        kwargs: dict[str, Any] = {
            "model_loading_config": {"model_id": m.model_id, "model_source": _resolve_source(m.source)},
            "engine_kwargs": _engine_kwargs(m),
            "deployment_config": deployment,
            "server_cls": serve_llm.LocalLoraLLMServer,
        }
        env = dict(m.env) | ({NICENESS: str(m.niceness)} if m.niceness is not None else {})
        if env:
            kwargs["runtime_env"] = {"env_vars": env}
        if m.accelerator == "cpu":
            kwargs["accelerator_config"] = {"kind": "cpu"}
            if m.engine_cpus is not None:
                kwargs["placement_group_config"] = {"bundles": [{"CPU": m.engine_cpus}]}
        elif m.accelerator_type:
            kwargs["accelerator_type"] = m.accelerator_type
        if m.lora:
            kwargs["lora_config"] = {
                "dynamic_lora_loading_path": lora_root,
                "max_num_adapters_per_replica": m.max_adapters_per_replica,
            }
        out.append(LLMConfig(**kwargs))
    return out


def build_app(config: ServeConfig, adapters_dir: str | Path) -> Any:
    """The Ray Serve application: `build_openai_app` over one LLMConfig per model."""
    LocalLoraIngress = import_serve_llm().LocalLoraIngress
    from ray.serve.llm import build_openai_app

    Path(adapters_dir).mkdir(parents=True, exist_ok=True)
    args: dict[str, Any] = {
        "llm_configs": llm_configs(config, adapters_dir),
        "ingress_cls_config": {"ingress_cls": LocalLoraIngress},
    }
    if all(m.accelerator == "cpu" for m in config.models):
        # On a small CPU node the engine's placement group takes the CPUs: the ingress only routes.
        args["ingress_deployment_config"] = {"ray_actor_options": {"num_cpus": 0}}
    return build_openai_app(args)


# ---------------------------------------------------------------------------- state and routing
def default_store() -> Path:
    return Path(environment().store)


def state_path(store: str | Path | None = None) -> Path:
    return Path(store if store is not None else default_store()) / STATE_FILE


def read_state(store: str | Path | None = None) -> dict[str, Any] | None:
    try:
        return json.loads(state_path(store).read_text())
    except (OSError, json.JSONDecodeError):
        return None


_route_cache: dict[str, tuple[float, str]] = {}


def serve_url(store: str | Path | None = None) -> str:
    """Base URL (`http://host:port`) of the running server: `$COEVOLVE_SERVE_URL`, else the state file."""
    env = environment().serve_url
    if env:
        return env.rstrip("/").removesuffix("/v1")
    p = state_path(store)
    try:
        mtime = p.stat().st_mtime
    except OSError:
        raise ServingError(
            f"no vLLM server known: {p} does not exist and ${SERVE_URL_ENV} is not set "
            "(start one: coevolve serve --config deploy/serve/cpu-tiny.yaml)"
        ) from None
    cached = _route_cache.get(str(p))
    if cached and cached[0] == mtime:
        return cached[1]
    state = read_state(store)
    if not state or "url" not in state:
        raise ServingError(f"serve state file {p} is unreadable")
    _route_cache[str(p)] = (mtime, state["url"])
    return state["url"]


def served_model_name(ref: ModelRef) -> str:
    return ref.model + (f":{ref.adapter}" if ref.adapter else "")


def litellm_route(ref: ModelRef | str, store: str | Path | None = None) -> dict[str, Any]:
    """kwargs for `litellm.acompletion` that reach `vllm/<model>[@adapter]` on the Serve app."""
    if isinstance(ref, str):
        ref = ModelRef.parse(ref)
    if ref.provider != "vllm":
        raise ServingError(f"litellm_route serves provider 'vllm', not {ref.provider!r}")
    name = served_model_name(ref)
    if ref.adapter:  # served merged into the base weights, when the server was told to
        name = ((read_state(store) or {}).get("merged") or {}).get(with_adapter(ref.model, ref.adapter), name)
    return {
        "model": f"openai/{name}",
        "api_base": f"{serve_url(store)}/v1",
        "api_key": "none",
    }


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def probe(url: str, timeout: float = 2.0) -> list[str] | None:
    """Model ids the server lists at /v1/models, or None if it does not answer."""
    try:
        with urllib.request.urlopen(f"{url}/v1/models", timeout=timeout) as r:
            return [m["id"] for m in json.loads(r.read())["data"]]
    except (urllib.error.URLError, OSError, ValueError, KeyError):
        return None


# -------------------------------------------------------------------------------- start / stop
def start_serving(
    config: ServeConfig,
    store: str | Path | None = None,
    *,
    address: str | None = None,
    on_status: Any = None,
) -> dict[str, Any]:
    """Deploy the app on the running Ray (start it first with `coevolve.cluster.runtime.start_ray`), wait until
    every model answers, and write the state file. Returns the state."""
    import ray
    from ray import serve

    if not ray.is_initialized():
        raise ServingError("Ray is not running (coevolve.cluster.runtime.start_ray first)")
    from coevolve.store.store import HarnessStore

    store_dir = Path(store if store is not None else default_store())
    HarnessStore(store_dir).close()  # a store (not a stray folder) holds the state file and adapters
    adapters = Path(config.adapters_dir) if config.adapters_dir else store_dir / "adapters"
    port = config.port or _free_port(config.host)
    serve.start(http_options={"host": config.host, "port": port})
    # If Serve was already running on this Ray (another app), its proxy keeps its own address.
    host, port = _serve_http_address(config.host, port)
    merged = prepare_merged(config, adapters)
    app = build_app(config, adapters)
    t0 = time.perf_counter()
    # Alone on Serve it takes "/"; beside other apps (another team's, a synthetic one) it gets its own.
    prefix = f"/{config.name}" if _other_apps(config.name) else ""
    serve.run(app, name=config.name, route_prefix=prefix or "/", blocking=False)
    url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}{prefix}"
    wanted = {m.model_id for m in config.models} | set(merged.values())
    deadline = time.monotonic() + config.ready_timeout_s
    while True:
        listed = probe(url)
        if listed is not None and wanted <= set(listed):
            break
        status = serve.status().applications.get(config.name)
        if status is not None and str(status.status).endswith("DEPLOY_FAILED"):
            raise RuntimeError(f"serve app {config.name!r} failed to deploy: {status.message}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"serve app {config.name!r} not ready after {config.ready_timeout_s:.0f}s")
        if on_status is not None and status is not None:
            on_status(str(status.status), time.perf_counter() - t0)
        time.sleep(1.0)
    state = {
        "url": url,
        "app": config.name,
        "models": sorted(wanted),
        "sources": {m.model_id: _resolve_source(m.source) for m in config.models},  # tokenizers for role prompts
        "adapters_dir": str(adapters.resolve()),
        "merged": merged,  # "model@adapter" -> the served name of that adapter merged into the model
        "pid": os.getpid(),
        "ray_address": address,
        "started": time.time(),
        "ready_s": round(time.perf_counter() - t0, 1),
    }
    p = state_path(store_dir)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2))
    os.replace(tmp, p)
    log.info("serving", url=url, models=sorted(wanted), ready_s=state["ready_s"])
    return state


def prepare_merged(config: ServeConfig, adapters_dir: str | Path) -> dict[str, str]:
    """Merge each model's `merged_adapters` into its weights where not merged yet (an adapter id names
    one adapter for good, so a merged folder is reused). Returns {"model@adapter": served name}."""
    from coevolve.services.serving.models import merge_adapter

    out: dict[str, str] = {}
    for m in config.models:
        for adapter in m.merged_adapters:
            src, dest = Path(adapters_dir) / adapter, merged_dir(adapters_dir, m.model_id, adapter)
            if not (src / "adapter_config.json").is_file():
                raise ServingError(f"model {m.model_id!r}: merged adapter {adapter!r} is not in {adapters_dir}")
            if not (dest / "config.json").is_file():
                merge_adapter(_resolve_source(m.source), src, dest)
            out[with_adapter(m.model_id, adapter)] = merged_model_id(m.model_id, adapter)
    return out


def _serve_http_address(host: str, port: int) -> tuple[str, int]:
    try:
        from ray.serve.context import _get_global_client

        cfg = _get_global_client().http_config
        return cfg.host, int(cfg.port)
    except Exception:  # noqa: BLE001 - private API: fall back to what we asked for
        return host, port


def _other_apps(name: str) -> bool:
    from ray import serve

    try:
        return any(a != name for a in serve.status().applications)
    except Exception:  # noqa: BLE001
        return False


def stop_serving(store: str | Path | None = None, *, shutdown: bool = True) -> None:
    """Delete the app from the running Ray, shut Serve down if no other app is left on it (and
    `shutdown`), and remove the state file."""
    import ray
    from ray import serve

    state = read_state(store)
    if ray.is_initialized():
        try:
            if state and state.get("app"):
                serve.delete(state["app"])
            if shutdown and not serve.status().applications:
                serve.shutdown()
        except Exception as e:  # noqa: BLE001 - stopping must always clear the state file
            log.warning("serve shutdown failed", error=str(e))
    state_path(store).unlink(missing_ok=True)
    _route_cache.clear()
