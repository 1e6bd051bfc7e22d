"""structlog set-up: human-readable on a terminal, JSON lines with --log-json or when not a TTY."""

from __future__ import annotations

import logging
import os
import sys

import structlog

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def configure_logging(json_lines: bool | None = None, level: str | None = None) -> None:
    """Configure structlog for this process. Settings pass to Ray workers through the environment."""
    level = (level or os.environ.get("COEVOLVE_LOG_LEVEL") or "warning").lower()
    if json_lines is None:
        env = os.environ.get("COEVOLVE_LOG_JSON")
        json_lines = env == "1" if env is not None else not sys.stderr.isatty()
    os.environ["COEVOLVE_LOG_LEVEL"] = level
    os.environ["COEVOLVE_LOG_JSON"] = "1" if json_lines else "0"
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
