"""The library's errors: plain exceptions that carry their exit code. The CLI
(labctl/cli.py, `exit_for`) turns each into one line and that code, in one place. A lab
description that cannot run is a SpecError (exit 2); `short` is how a message quotes
the value it refuses."""
from __future__ import annotations

from typing import Any


class LabError(RuntimeError):
    """Something outside the lab description stops the run (no engine, no cluster, a
    refused folder): `error: <message>`, exit `exit_code` (1; 2 for refusals)."""
    exit_code = 1

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class Interrupted(BaseException):
    """A signal asked labctl to stop (BaseException: no `except Exception` swallows it).
    Raised by the driver's signal regime (labctl/driver.py) while a lab runs, or when a
    second signal cuts a protected phase short."""

    def __init__(self, signum: int):
        from .outcome import signal_name

        super().__init__(signal_name(signum))
        self.signal = signal_name(signum)


class Refused(LabError):
    """Input labctl refuses before doing anything (two flags that exclude each other, a
    folder that is no run folder): `error: <message>`, exit 2."""
    exit_code = 2


class SpecError(ValueError):
    """A lab description that cannot run; the message is one line for the user."""


def short(value: Any, limit: int = 80) -> str:
    """repr(value) cut to one readable line: an error message never echoes a 50 MB value."""
    if isinstance(value, (dict, list, tuple, set)) and len(value) > 20:
        return f"a {type(value).__name__} of {len(value)} items"
    text = repr(value)
    if len(text) > limit:
        size = len(value.encode("utf-8", "replace")) if isinstance(value, str) else None
        text = text[:limit] + (f"... ({size} bytes)" if size is not None else "...")
    return text
