"""Secrets for the model providers: a KEY=VALUE file loaded into the environment (never overriding a
set variable), and redaction of every secret value from anything written (logs, stored errors)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import structlog

from coevolve.settings import environment, variable

log = structlog.get_logger(role="gateway")

SECRETS_FILE_ENV = variable("secrets_file")
_SECRET_NAME = re.compile(r"(?i)(api_?key|secret|token|password|credential|access_key)")
_NOT_SECRET = {SECRETS_FILE_ENV, "RAY_AUTH_TOKEN_PATH"}
_loaded_secrets: set[str] = set()


def secrets_file() -> Path:
    return Path(environment().secrets_file or Path.home() / ".config" / "coevolve" / "secrets.env").expanduser()


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


_secrets_seen: tuple[str, int] | None = None


def ensure_secrets() -> None:
    """Load the secrets file if it is new or changed since the last look (one stat per call)."""
    global _secrets_seen
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
    """Values to keep out of anything written: the secrets file's, and every environment variable
    whose name says key, token, secret, password or credential."""
    values = set(_loaded_secrets)
    for k, v in os.environ.items():
        if k not in _NOT_SECRET and _SECRET_NAME.search(k) and len(v) >= 8:
            values.add(v)
    return values


def redact(text: str) -> str:
    for v in sorted(secret_values(), key=len, reverse=True):
        if v in text:
            text = text.replace(v, "[redacted]")
    return text
