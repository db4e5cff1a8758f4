"""`python -m workloads._script SCRIPT [ARGS]`: run a user's script as `python SCRIPT ARGS` would,
after installing the stack dump on SIGRTMIN+6 (workloads/_stacks.py), so that
`labctl stacks` and the deadline can show where a script that knows nothing
of labctl was stuck. sys.argv, __main__ and sys.path[0] are what the script
expects.

Under torchrun with `init_method: tcp`, a script that joins the lab's way,
`init_process_group(init_method=os.environ["LAB_INIT_METHOD"], rank=..., world_size=...)`,
would hang: torchrun sets TORCHELASTIC_USE_AGENT_STORE=True, so torch makes every
rank a *client* of the tcp:// store and nobody hosts it. The wrapper makes
init_process_group join a tcp:// URL as the lab's own workloads do
(workloads/_common.py): with that flag off while it joins, so global rank 0 hosts
the store (docs/init-methods.md, "Joining through LAB_INIT_METHOD").

With a lab pg_timeout (LAB_PG_TIMEOUT), init_process_group called without a timeout
gets the lab's, so that `--pg-timeout` acts on any script (docs/failures.md)."""
from __future__ import annotations

import functools
import os
import runpy
import sys
from typing import Callable

from . import _common, _debugserver, _detail, _settle, _stacks, _trace
from ._record import recorded
from ._protocol import Env

AGENT_STORE_FLAG = "TORCHELASTIC_USE_AGENT_STORE"


def _tcp_url(args: tuple, kwargs: dict) -> bool:
    """init_process_group(backend, init_method, ...) called with a tcp:// URL."""
    url = kwargs.get("init_method", args[1] if len(args) > 1 else None)
    return isinstance(url, str) and url.startswith("tcp://")


def _wrap_init_process_group(wrap: Callable[[Callable], Callable]) -> bool:
    """Put `wrap(original)` in place of torch's init_process_group, under both names a
    script may call it by. Imports torch, which the script is about to import anyway;
    False without torch."""
    try:
        import torch.distributed as dist
        from torch.distributed import distributed_c10d
    except ImportError:
        return False
    original = distributed_c10d.init_process_group
    wrapped = functools.wraps(original)(wrap(original))
    dist.init_process_group = distributed_c10d.init_process_group = wrapped
    return True


def host_tcp_stores_under_torchrun() -> bool:
    """Under torchrun in a tcp lab: a tcp:// join with the agent-store flag off while it
    joins (module docstring). True when installed."""
    if os.environ.get(AGENT_STORE_FLAG) != "True" or \
            not os.environ.get(Env.INIT_METHOD, "").startswith("tcp://"):
        return False

    def wrap(original: Callable) -> Callable:
        def init_process_group(*args, **kwargs):
            if not _tcp_url(args, kwargs):
                return original(*args, **kwargs)
            saved = os.environ.get(AGENT_STORE_FLAG)
            os.environ[AGENT_STORE_FLAG] = "False"
            try:
                return original(*args, **kwargs)
            finally:
                if saved is not None:
                    os.environ[AGENT_STORE_FLAG] = saved
        return init_process_group

    return _wrap_init_process_group(wrap)


def say_when_joined() -> bool:
    """With the join fault clock: a rank says it joined (`_common.say_joined`) once its
    init_process_group returns, whatever the script's way of joining. True when installed."""
    if os.environ.get(Env.FAULT_CLOCK) != "join":
        return False

    def wrap(original: Callable) -> Callable:
        def init_process_group(*args, **kwargs):
            joined = original(*args, **kwargs)
            _common.say_joined()
            return joined
        return init_process_group

    return _wrap_init_process_group(wrap)


PG_TIMEOUT_ENV = Env.PG_TIMEOUT


def apply_pg_timeout() -> bool:
    """With the lab's pg_timeout (LAB_PG_TIMEOUT): a script's init_process_group that gives
    no timeout gets the lab's, so that `--pg-timeout` acts on a script that knows nothing
    of labctl, as it does on the workloads. A script that gives its own keeps it, and
    global rank 0 says so once on stderr. True when installed."""
    seconds = os.environ.get(PG_TIMEOUT_ENV)
    if not seconds:
        return False

    def wrap(original: Callable) -> Callable:
        import datetime
        import inspect

        signature = inspect.signature(original)

        def init_process_group(*args, **kwargs):
            try:
                call = signature.bind(*args, **kwargs)
            except TypeError:             # torch's own error for a wrong call, as ever
                return original(*args, **kwargs)
            own = call.arguments.get("timeout")
            if own is None:
                call.arguments["timeout"] = datetime.timedelta(seconds=float(seconds))
            elif os.environ.get("RANK", "0") == "0":
                sys.stderr.write(f"labctl: pg_timeout {seconds} s is not applied: the script passes "
                                 f"its own timeout ({own}) to init_process_group\n")
                sys.stderr.flush()
            return original(*call.args, **call.kwargs)
        return init_process_group

    return _wrap_init_process_group(wrap)


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit("usage: python -m workloads._script SCRIPT [ARGS...]")
    script = sys.argv[1]
    _settle.install()       # first registered, last to run: torch's threads settle before finalization
    _stacks.install()
    host_tcp_stores_under_torchrun()
    say_when_joined()
    apply_pg_timeout()
    _trace.install_flight_recorder()    # its newest entries into the log when labctl asks (a FIFO)
    _trace.install()        # LAB_TRACE=1: record every collective and p2p op (workloads/_trace/)
    _debugserver.install()  # LAB_DEBUG_SERVER: torch's debug server, started after init
    _detail.install()       # --debug (DETAIL): DDP's construction log, which crashes, skipped
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    if os.environ.get(Env.EXERCISE):    # `labctl exercise check`: import the file, call its function
        from . import _exercise as exercise
        sys.exit(exercise.main(script))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            raise
        say_exit_message(exc, script)
        raise SystemExit(1) from None   # Python's own code for an exit with a message
    except BaseException as exc:
        if _trace.ended_badly(exc):
            _trace.dump_at_the_end()    # the collective this rank was in, for the report
        raise


def say_exit_message(exc: SystemExit, script: str) -> None:
    """`raise SystemExit("...")` (or sys.exit("...")): Python prints the message alone, a
    line the report cannot tell from any other, so the rank's failure was reported without
    its words. It is said as every other exception is, its traceback from the script's frame
    on (the lab's own frames left out), then the rank exits 1 as Python would."""
    import traceback

    tb = exc.__traceback__
    mine = os.path.abspath(script)
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) != mine:
        tb = tb.tb_next
    sys.stdout.flush()
    traceback.print_exception(type(exc), exc, tb if tb is not None else exc.__traceback__)
    sys.stderr.flush()


if __name__ == "__main__":
    recorded(main)()        # the script's escaping exception also lands in torchrun's error file
