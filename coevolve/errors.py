"""The root of the errors coevolve expects.

A `CoevolveError` is an outcome the user can act on, not a bug: the CLI prints it as one `error:` line
and exits with its `exit_code` (2: bad input the user can correct; 1: a run that could not do its work).
Any other exception reaching the CLI is a bug and prints its traceback (exit status 1), so a bug never
looks like a usage error."""

from __future__ import annotations


class CoevolveError(Exception):
    """An expected error, printed as one `error:` line with exit status `exit_code`."""

    exit_code = 2


class BadInput(CoevolveError, ValueError):
    """Input the user can correct (a flag, a profile, a model reference, an environment variable).
    A `ValueError` too, so callers that validate values keep catching it as one."""
