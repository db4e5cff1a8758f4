"""A worker's uncaught exception in torch elastic's error file, as `record` writes it.

Under torchrun every worker gets `TORCHELASTIC_ERROR_FILE` (`<--log-dir>/<run id>_*/
attempt_<n>/<local rank>/error.json`); torch's `errors.record` writes the exception
there (`{"message": {"message": "ValueError: boom", "extraInfo": {"py_callstack":
<traceback>, "timestamp": "<epoch s>"}}}`), the agent reads it for its failure
summary, and labctl reads it after the run (labctl/blame.py) instead of scraping
that summary. `recorded(fn)` is `record`'s `except Exception` branch: torch's own
`ErrorHandler.record_exception` writes the record (to a temporary name, renamed into
place once whole), then the exception goes on as before (same traceback, same exit
code). Not `record` itself, for three reasons: it writes the file in place (see
`_write`), its `initialize()` turns on `faulthandler` for every fatal signal (a crashing
rank would print a "Fatal Python error" dump it never printed), and it imports
torch before a user's script runs (a script that sets OMP_NUM_THREADS before
`import torch` would lose it). Here torch is imported only once an exception
escapes. labctl adds a `labctl` key (torch reads only `message`): the global and
local rank, the time in nanoseconds (torch's timestamp is whole seconds), and the
traceback, moved there from `extraInfo` so that torchrun's failure summary stays one
line per failed worker (`traceback : ValueError: boom`).
"""
from __future__ import annotations

import functools
import json
import os
import time
from typing import Callable, TypeVar

ERROR_FILE_ENV = "TORCHELASTIC_ERROR_FILE"
LABCTL_KEY = "labctl"

_R = TypeVar("_R")


def recorded(fn: Callable[..., _R]) -> Callable[..., _R]:
    """`fn`, writing an exception that escapes it into torchrun's error file for this
    worker; `fn` itself when there is none (direct mode, no torchrun)."""
    if not os.environ.get(ERROR_FILE_ENV):
        return fn

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            _write(exc, time.time_ns())
            raise

    return wrapper


def _write(exc: Exception, time_ns: int) -> None:
    """torch's error file, plus labctl's key, made whole under a temporary name and
    renamed into place: torch's own `record_exception` truncates the file and then
    writes it, and torchrun SIGTERMs the other workers as soon as one fails, so a
    worker stopped between the two left an empty file on which torchrun's agent
    crashed reading it (json.JSONDecodeError), losing that node's failure summary.
    A failure to write is silent: the exception on its way out matters more."""
    path = os.environ.get(ERROR_FILE_ENV, "")
    torchs, ours = f"{path}.torch", f"{path}.tmp"
    try:
        from torch.distributed.elastic.multiprocessing.errors import get_error_handler

        os.environ[ERROR_FILE_ENV] = torchs     # torch's handler writes where the variable says
        try:
            get_error_handler().record_exception(exc)   # inside the except: format_exc() works
        finally:
            os.environ[ERROR_FILE_ENV] = path
        # a torch whose record labctl cannot read: torch's own goes into place
        os.replace(ours if _with_labctl_key(torchs, ours, time_ns) else torchs, path)
    except Exception:       # noqa: BLE001 - never mask the worker's own exception
        pass
    finally:
        for left in (torchs, ours):
            if os.path.exists(left):
                os.unlink(left)


def _with_labctl_key(torchs: str, ours: str, time_ns: int) -> bool:
    """torch's record `torchs` written to `ours` with labctl's key; False if that failed."""
    try:
        with open(torchs) as f:
            data = json.load(f)
        info = data["message"]["extraInfo"]
        # the agent prints py_callstack, when there is one, in its failure summary for every
        # failed worker: a traceback per rank at the end of each node log, whose tail the
        # log reader keeps short (labctl.logs.AGENT_TAIL_LINES). Under labctl's key, the
        # summary shows the exception line instead (the rank printed its traceback itself).
        data[LABCTL_KEY] = {"rank": _int_env("RANK"), "local_rank": _int_env("LOCAL_RANK"),
                            "time_ns": time_ns, "py_callstack": info.pop("py_callstack", "")}
        with open(ours, "w") as f:
            json.dump(data, f)
        return True
    except Exception:       # noqa: BLE001 - OSError, ValueError, KeyError, TypeError ...
        return False


def _int_env(name: str) -> int | None:
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() else None
