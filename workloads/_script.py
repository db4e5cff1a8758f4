"""`python -m workloads._script SCRIPT [ARGS]`: run a user's script as `python SCRIPT ARGS` would,
after installing the stack dump on SIGUSR1 (workloads/_stacks.py), so that
`labctl stacks` and the deadline can show where a script that knows nothing
of labctl was stuck. sys.argv, __main__ and sys.path[0] are what the script
expects."""
from __future__ import annotations

import os
import runpy
import sys

from . import _stacks, _trace


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit("usage: python -m workloads._script SCRIPT [ARGS...]")
    script = sys.argv[1]
    _stacks.install()
    _trace.install_flight_recorder()    # SIGUSR2: newest Flight Recorder entries into the log
    _trace.install()        # LAB_TRACE=1: record every collective and p2p op (workloads/_trace.py)
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
