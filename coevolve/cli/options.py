"""What every `coevolve` command module shares: the option types, the store default, the one-line
usage errors and error handling, the `--resume` check, JSON output. The command modules import this;
`coevolve.cli.app` assembles them into the one app."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from coevolve.errors import BadInput, CoevolveError

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


# The click that typer runs on: its own vendored copy in recent typer, the click package before.
click_exceptions = sys.modules[typer.BadParameter.__module__]


class OneLineUsageErrors(TyperGroup):
    """Click's own usage errors (an unknown option, `--n abc`, a missing argument) as one `error:` line
    with exit status 2, like every other bad input, instead of a usage box."""

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click_exceptions.UsageError as e:
            if type(e).__name__ == "NoArgsIsHelpError":  # `coevolve` alone: the help
                from typer import rich_utils

                rich_utils.rich_format_error(e)
            else:
                typer.echo(usage_error_line(e), err=True)
            sys.exit(e.exit_code)
        except click_exceptions.ClickException as e:
            e.show()
            sys.exit(e.exit_code)
        except typer.Abort:
            typer.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


def usage_error_line(e: Any) -> str:
    """`error: <what click says> (<command> --help lists the options)`, on one line."""
    message = " ".join(e.format_message().split())
    ctx = e.ctx
    if ctx is None:
        return f"error: {message}"
    hint = f"{ctx.command_path} --help lists the options"
    if isinstance(e, click_exceptions.NoSuchOption) and ctx.command.name == "run":
        from coevolve.config import RunProfile

        field = e.option_name.lstrip("-").replace("-", "_")
        if field in RunProfile.model_fields:
            hint = f"{field} is a profile field: set it as an override, {field}=VALUE"
    return f"error: {ctx.command_path}: {message} ({hint})"


StoreOpt = Annotated[Path, typer.Option("--store", help="store directory")]
SeedOpt = Annotated[int, typer.Option("--seed", help="seed for sampling and synthetic models")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print one JSON object instead of a table")]
LogJsonOpt = Annotated[bool, typer.Option(
    "--log-json", help="stderr as JSON lines only: logs, Ray workers' lines (re-emitted as JSON), errors; no progress bars"
)]
DEFAULT_STORE = Path(".coevolve")
MAX_CANDIDATES = 64  # edits proposed per iteration (each is evaluated against the current harness)
MAX_SCREEN = 64  # evolve --screen: train failures each candidate runs before val


class UsageError(BadInput):
    """Bad input: reported as one line, exit status 2."""


def cli_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """An expected error (`CoevolveError`) as one `error:` line and its exit status; anything else is a
    bug and propagates with its traceback."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except CoevolveError as e:
            say_error(f"error: {e}", bool(kwargs.get("log_json")), event="error", level="error", error=str(e))
            raise typer.Exit(e.exit_code) from None

    return wrapper


def say_error(line: str, log_json: bool, **fields: Any) -> None:
    """One line for the user on stderr; with --log-json one JSON object (stderr is JSON lines then)."""
    if log_json:
        from coevolve.services.logs import utc_now

        typer.echo(json.dumps({**fields, "message": line, "timestamp": utc_now()}, default=str), err=True)
    else:
        typer.echo(line, err=True)


def open_store(path: Path, *, create: bool):
    from coevolve.store.store import HarnessStore

    return HarnessStore(path, create=create)


def check_resume(resume: str | None, store: Path, kind: str, what: str,
                 hint: str = "coevolve runs list shows them") -> None:
    """`--resume RUN` names a `kind` run of the store, before anything is built or written: `--resume ""`
    names no run (an error, never a new run; `hint` says where run ids are listed), and a store that does
    not exist is not created."""
    if resume is None:
        return
    if not resume.strip():
        raise UsageError(f"--resume needs a run id ({hint})")
    from coevolve.store.store import is_fresh_store_dir

    if is_fresh_store_dir(store):
        raise UsageError(f"cannot resume {resume!r}: store {store} does not exist")
    st = open_store(store, create=False)
    try:
        run = st.get_run(resume)
    finally:
        st.close()
    if run.kind != kind:
        raise UsageError(f"run {resume!r} is a {run.kind} run, not {what}")


def echo_json(obj: Any) -> None:
    typer.echo(json.dumps(obj, sort_keys=True, default=str))
