"""Secrets for the model providers: a KEY=VALUE file loaded into the environment (never overriding a
set variable), the settings that may hold a key handed to Ray actors through the cluster's internal
key-value store (never through Ray's runtime_env, which Ray writes to its logs), and redaction of every
secret value from anything written (logs, stored errors)."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import structlog

from coevolve.settings import SECRET_BEARING, environment, export, setting, variable

log = structlog.get_logger(role="gateway")

SECRETS_FILE_ENV = variable("secrets_file")
WORKER_SECRETS_ENV = variable("worker_secrets")
SECRET_BEARING_VARIABLES = tuple(variable(f) for f in SECRET_BEARING)
_SECRET_NAME = re.compile(r"(?i)(api_?key|secret|token|password|credential|access_key)")
_NOT_SECRET = {SECRETS_FILE_ENV, WORKER_SECRETS_ENV, "RAY_AUTH_TOKEN_PATH"}
_loaded_secrets: set[str] = set()


def secrets_file() -> Path:
    return Path(setting("secrets_file") or Path.home() / ".config" / "coevolve" / "secrets.env").expanduser()


def load_secrets(path: str | Path | None = None) -> list[str]:
    """Load KEY=VALUE lines (`export` allowed, quotes stripped, # comments) into the environment, never
    overriding a variable already set. Returns the names loaded (never the values). A missing file is
    fine; a file others can read is loaded with a warning."""
    p = Path(path) if path is not None else secrets_file()
    try:
        text = p.read_text()
        mode = p.stat().st_mode
    except (OSError, UnicodeDecodeError):
        return []
    if mode & 0o077:
        log.warning("secrets file is readable by other users: chmod 600 it", path=str(p))
    names = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.removeprefix("export ").partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key.replace("_", "").isalnum():
            continue
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        if value:
            _loaded_secrets.add(value)
        if key not in os.environ:
            os.environ[key] = value
            names.append(key)
    if names:
        log.info("secrets loaded", path=str(p), names=sorted(names))
    return names


KV_NAMESPACE = "coevolve-worker-settings"


def put_worker_secrets(values: dict[str, str]) -> str:
    """Hand `values` (settings that may hold a key, by their `coevolve.settings.Environment` field names)
    to a job's Ray actors through the cluster's internal key-value store (held by the GCS, in memory,
    never written to Ray's logs or session files): the key it is put under, named by its content, so that
    jobs with the same values share it and an actor started later (a replacement, a resumed run's) finds
    it while the cluster lives. Ray must be initialised."""
    from ray.experimental import internal_kv

    text = json.dumps(values, sort_keys=True)
    key = f"worker-{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    internal_kv._internal_kv_put(key, text, overwrite=True, namespace=KV_NAMESPACE)
    return key


def load_worker_secrets(key: str) -> list[str]:
    """In a Ray actor: the settings its job put with `put_worker_secrets`, set in the environment (over a
    value inherited from the process that started Ray, as runtime_env would). Returns the names set; a
    key the cluster does not hold is a warning and sets nothing."""
    from ray.experimental import internal_kv

    raw = internal_kv._internal_kv_get(key, namespace=KV_NAMESPACE) if internal_kv._internal_kv_initialized() else None
    try:
        values = json.loads(raw) if raw else None
    except ValueError:
        values = None
    if not isinstance(values, dict):
        log.warning("worker settings not found in the cluster", key=key)
        return []
    fields = {k: v for k, v in values.items() if k in SECRET_BEARING and isinstance(v, str)}
    export(**fields)
    names = sorted(variable(f) for f in fields)
    log.info("worker settings loaded", key=key, names=names)
    return names


_secrets_seen: tuple[str, int] | None = None
_worker_secrets_seen: str | None = None


def ensure_secrets() -> None:
    """Load the secrets file if it is new or changed since the last look (one stat per call), and, in a
    Ray actor, the worker settings its job put in the cluster (once: they never change under one key)."""
    global _secrets_seen, _worker_secrets_seen
    worker = setting("worker_secrets")
    if worker and worker != _worker_secrets_seen:
        _worker_secrets_seen = worker
        load_worker_secrets(worker)
    p = secrets_file()
    try:
        seen = (str(p), p.stat().st_mtime_ns)
    except OSError:
        seen = (str(p), -1)
    if seen != _secrets_seen:
        _secrets_seen = seen
        if seen[1] != -1:
            load_secrets(p)


def secret_values() -> set[str]:
    """Values to keep out of anything written: the secrets file's, every environment variable whose name
    says key, token, secret, password or credential, and such arguments of the tau2 customer's model."""
    values = set(_loaded_secrets)
    for k, v in os.environ.items():
        if k not in _NOT_SECRET and _SECRET_NAME.search(k) and len(v) >= 8:
            values.add(v)
    return values | _secret_arguments(environment().tau2_user_args)


def _secret_arguments(raw: str) -> set[str]:
    """The values of a JSON object of litellm arguments whose keys name a secret (`api_key`, ...)."""
    try:
        args = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError:
        return set()
    if not isinstance(args, dict):
        return set()
    return {v for k, v in args.items() if isinstance(v, str) and len(v) >= 8 and _SECRET_NAME.search(k)}


def redact(text: str) -> str:
    for v in sorted(secret_values(), key=len, reverse=True):
        if v in text:
            text = text.replace(v, "[redacted]")
    return text
