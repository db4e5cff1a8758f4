"""Errors the CLI turns into one line and an exit code, never a traceback."""
import click


class LabError(click.ClickException, RuntimeError):
    """Something outside the spec stops the run (no engine, no cluster, busy names).

    A ClickException: the CLI prints `error: <message>` and exits with `exit_code`."""
    exit_code = 1


class Interrupted(BaseException):
    """A signal asked labctl to stop (BaseException: no `except Exception` swallows it).
    Raised by the driver's signal regime (labctl/driver.py) while a lab runs, or when a
    second signal cuts a protected phase short."""

    def __init__(self, signum: int):
        from .outcome import signal_name

        super().__init__(signal_name(signum))
        self.signal = signal_name(signum)
