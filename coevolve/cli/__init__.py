"""The `coevolve` command line: `app` assembles the command modules (`run`, `adapt`, `models`, `store`)
on the shared options (`options`); `display` renders tables. Entry point: `coevolve.cli.app:app`."""
