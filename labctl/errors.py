"""Errors the CLI turns into one line and an exit code, never a traceback."""


class LabError(RuntimeError):
    """Something outside the spec stops the run (no engine, no cluster, busy names)."""
    exit_code = 1
