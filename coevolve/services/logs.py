"""structlog set-up: human-readable on a terminal, JSON lines with --log-json or when not a TTY.

JSON lines mean every line this process writes to stderr parses as one JSON object:

- structlog events are rendered by `JSONRenderer`;
- stdlib `logging` records (libraries, Ray's driver-side logger) and Python warnings go through a JSON
  formatter on the root logger and on the `ray` logger;
- lines of Ray workers and actors, which Ray prints on the driver behind a coloured
  `(RolloutWorker pid=...)` prefix, are re-emitted as JSON by `forward_worker_logs_as_json()` (call it
  after `ray.init`; `coevolve.jobs` does): a worker line that is already a JSON object (workers inherit
  the JSON setting through the environment) keeps its fields and gains `worker` and `worker_pid`; any
  other line becomes `{"event": line, "source": "worker", ...}`. Nothing is dropped, and the lines
  go to stderr (never stdout, which carries a command's `--json` result).

Re-emitting hooks Ray's driver-side log dispatcher (`ray._private.ray_logging`), the one place all
worker lines pass through. If a Ray version lacks it, `forward_worker_logs_as_json` returns False and
the caller can start Ray with `log_to_driver=False` instead (worker lines then stay in Ray's log files,
`/tmp/ray/session_latest/logs/worker-*.err`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import structlog

from coevolve.settings import environment, export

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
RAY_LOG_DIR = "/tmp/ray/session_latest/logs"  # Ray's default; `ray_log_dir()` asks the running Ray

_json_handler: logging.Handler | None = None  # the root handler configure_logging(json_lines=True) adds


class JsonLogFormatter(logging.Formatter):
    """One JSON object per stdlib log record, with the fields structlog's JSON lines carry."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "event": record.getMessage(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "timestamp": _iso(record.created),
        }
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def configure_logging(json_lines: bool | None = None, level: str | None = None) -> None:
    """Configure structlog for this process. Settings pass to Ray workers through the environment."""
    global _json_handler
    env = environment()
    level = (level or env.log_level or "warning").lower()
    if json_lines is None:
        json_lines = env.log_json == "1" if env.log_json else not sys.stderr.isatty()
    export(log_level=level, log_json="1" if json_lines else "0")
    renderer = structlog.processors.JSONRenderer() if json_lines else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(LEVELS.get(level, logging.WARNING)),
        # resolve sys.stderr at each use: it may be swapped (pytest, CliRunner) after configuration
        logger_factory=lambda *_: structlog.PrintLogger(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    root = logging.getLogger()
    if json_lines and _json_handler is None:
        _json_handler = _StderrHandler()
        _json_handler.setLevel(logging.WARNING)  # what Python's last-resort handler would have printed
        _json_handler.setFormatter(JsonLogFormatter())
        root.addHandler(_json_handler)  # libraries' records (and warnings) as JSON, not lastResort text
        logging.captureWarnings(True)
        _json_ray_logger()
    elif not json_lines and _json_handler is not None:
        root.removeHandler(_json_handler)
        _json_handler = None
        logging.captureWarnings(False)


class _StderrHandler(logging.StreamHandler):
    """A stream handler bound to the current sys.stderr at each record (like the structlog logger)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def _json_ray_logger() -> None:
    """Ray's `ray` logger prints through its own stderr handler (it does not propagate): JSON it."""
    if _json_handler is None or "ray" not in sys.modules:
        return
    for h in logging.getLogger("ray").handlers:
        if isinstance(h, logging.StreamHandler) and getattr(h, "stream", None) in (sys.stderr, sys.__stderr__):
            h.setFormatter(JsonLogFormatter())


# ----------------------------------------------------------------------------------- Ray workers
def forward_worker_logs_as_json() -> bool:
    """On this (driver) process, print every Ray worker line as one JSON object on stderr instead of
    Ray's `(Actor pid=N) line`. Call after `ray.init` (idempotent). False if Ray's dispatcher is not
    there (another Ray version): the caller should then start Ray with `log_to_driver=False`."""
    try:
        from ray._private.ray_logging import global_worker_stdstream_dispatcher as dispatcher
    except ImportError:
        return False
    if not hasattr(dispatcher, "add_handler") or not hasattr(dispatcher, "remove_handler"):
        return False
    dispatcher.remove_handler("ray_print_logs")  # Ray's printer: prefix, colour, dedup
    dispatcher.remove_handler("coevolve_json_logs")
    dispatcher.add_handler("coevolve_json_logs", _emit_worker_lines)
    _json_ray_logger()
    return True


def _emit_worker_lines(data: dict[str, Any]) -> None:
    out = structlog.PrintLogger(file=sys.stderr)  # shares structlog's write lock on stderr
    for line in worker_lines_as_json(data):
        out.msg(line)


def worker_lines_as_json(data: dict[str, Any]) -> list[str]:
    """Ray's log batch (`pid`, `ip`, `lines`, `is_err`, `actor_name`/`task_name`, `localhost`) as JSON
    lines. Ray's progress-bar protocol lines (tqdm_ray) are dropped; empty lines too."""
    pid = data.get("pid")
    source = pid if pid in ("autoscaler", "raylet") else "worker"
    name = data.get("actor_name") or data.get("task_name")
    extra: dict[str, Any] = {}
    if source == "worker":
        extra["worker_pid"] = int(pid) if isinstance(pid, str) and pid.isdigit() else pid
        if name:
            extra["worker"] = name
    ip = data.get("ip")
    if ip and ip != data.get("localhost"):
        extra["ip"] = ip
    raw_lines = data.get("lines", [])
    if pid == "autoscaler":  # like Ray's printer: only the autoscaler's events, not its status dumps
        raw_lines = _autoscaler_events(raw_lines)
    lines = []
    for raw in raw_lines:
        line = raw.split(":info_message:", 1)[-1].rstrip()
        if not line.strip() or "__ray_tqdm_magic_token__" in line:
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            obj = None
        if isinstance(obj, dict):
            for k, v in extra.items():
                obj.setdefault(k, v)
            obj.setdefault("source", source)
        else:
            obj = {
                "event": line,
                "level": "warning" if data.get("is_err") else "info",
                "source": source,
                "stream": "stderr" if data.get("is_err") else "stdout",
                **extra,
                "timestamp": _iso(time.time()),
            }
        lines.append(json.dumps(obj, default=str))
    return lines


def _autoscaler_events(lines: list[str]) -> list[str]:
    try:
        from ray._private.worker import filter_autoscaler_events

        return list(filter_autoscaler_events(lines))
    except (ImportError, AttributeError):
        return [ln.split(":event_summary:", 1)[1] for ln in lines if ":event_summary:" in ln]


def ray_log_dir() -> str:
    """The running Ray's log folder (worker-*.out/err, raylet, gcs), else Ray's default symlink."""
    with contextlib.suppress(ImportError, AttributeError):
        from ray._private import worker as ray_worker

        node = ray_worker._global_node
        if node is not None:
            return str(node.get_logs_dir_path())
    return RAY_LOG_DIR


# ------------------------------------------------------------------------------------ benches
def quiet_libraries() -> None:
    """For scripts that print figures (bench/): no progress bars or INFO chatter from Hugging Face,
    vLLM, Ray Serve/Train or litellm on this process and those it starts. Call before importing them."""
    for k, v in {
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "TRANSFORMERS_VERBOSITY": "error",
        "TOKENIZERS_PARALLELISM": "false",
        "VLLM_LOGGING_LEVEL": "WARNING",
        "LITELLM_LOG": "ERROR",
    }.items():
        os.environ.setdefault(k, v)
    for name in ("ray", "ray.serve", "ray.train", "ray.tune", "ray.data", "vllm", "LiteLLM", "httpx", "filelock"):
        logging.getLogger(name).setLevel(logging.WARNING)


def quiet_serve_driver() -> None:
    """Ray Serve sets its driver-side logger to INFO when `ray.serve` is imported: import it, then
    keep that logger to warnings (its replicas and controller log into Ray's log folder anyway)."""
    import ray.serve  # noqa: F401 - configures the `ray.serve` logger

    logging.getLogger("ray.serve").setLevel(logging.WARNING)


@contextmanager
def root_logger_kept() -> Iterator[None]:
    """Undo, when the block ends, what an import does to the root logger: Ray Serve LLM's import
    replaces its handlers with Ray's JSON one at INFO, after which every library's INFO record (and
    litellm's, whose objects that formatter cannot encode) is printed on this process's stderr."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def utc_now() -> str:
    """Now, in the form structlog's JSON lines carry (`2026-01-31T12:00:00.123456Z`)."""
    return _iso(time.time())


@contextmanager
def output_to_file(path: str | Path) -> Iterator[Path]:
    """Send this process's stdout and stderr (file descriptors 1 and 2, so C++ libraries' output and
    that of the subprocesses started inside the block too) to `path` while the block runs."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with path.open("ab") as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
        try:
            yield path
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int((t % 1) * 1e6):06d}Z"
