"""Errors the CLI turns into one line and an exit code, never a traceback."""
import click


class LabError(click.ClickException, RuntimeError):
    """Something outside the spec stops the run (no engine, no cluster, busy names).

    A ClickException: the CLI prints `error: <message>` and exits with `exit_code`."""
    exit_code = 1
