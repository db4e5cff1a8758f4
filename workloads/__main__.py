"""`python -m workloads --workloads env,p2p [--options JSON]`: run workloads in one process group.

Exit status: 0 when every check on this rank passed, 1 when one failed. A
crash raises, so torchrun sees a failed worker and stops the node.

A workload may also define `before_init(**options) -> dict | None`, run before
init_process_group: checks that need no process group (and that explain why
one could not form). It returns keyword arguments for `_common.init` (a store
it made, a join timeout) or None, and raises `_common.Stop` when joining is
pointless; its failed checks count for the exit status as `run`'s do.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import time

from . import _common, _debugserver, _detail, _settle, _stacks, _trace
from ._protocol import WORKLOAD_DONE
from ._record import recorded


def main_single(name: str) -> None:
    """Entry point for `torchrun -m workloads.<name>`: run one workload alone."""
    sys.exit(recorded(run_workloads)([name], {}))


def run_workloads(names: list[str], options: dict[str, dict]) -> int:
    _settle.install()                     # first registered, last to run: torch's threads settle before finalization
    _stacks.install()                     # SIGRTMIN+6: print every thread's stack (labctl stacks)
    _trace.install_flight_recorder()      # its newest entries when labctl asks through a FIFO (a hang without --debug)
    _trace.install()                      # LAB_TRACE=1: record every collective and p2p op
    _debugserver.install()                # LAB_DEBUG_SERVER: torch's debug server, started after init
    _detail.install()                     # --debug (DETAIL): DDP's construction log, which crashes, skipped
    modules = {name: importlib.import_module(f"workloads.{name}") for name in names}
    join: dict = {}
    for name, module in modules.items():
        if hasattr(module, "before_init"):
            try:
                join.update(module.before_init(**options.get(name, {})) or {})
            except _common.Stop:
                return 1
    ctx = _common.init(**join)
    try:
        for name in names:
            module = modules[name]
            ctx.workload = name
            started = time.perf_counter()
            failures_before = ctx.failures
            module.run(ctx, **options.get(name, {}))
            # world_size: an elastic lab may end with fewer ranks than it started with
            ctx.record(WORKLOAD_DONE, ctx.failures == failures_before,
                       seconds=round(time.perf_counter() - started, 6), unit="s",
                       world_size=ctx.world_size)
    except BaseException as exc:
        if _trace.ended_badly(exc):
            _trace.dump_at_the_end()          # the collective this rank was in, for the report
        raise
    finally:
        _common.shutdown()
    return 1 if ctx.failures else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workloads", description=__doc__)
    parser.add_argument("--workloads", required=True, help="comma-separated workload names")
    parser.add_argument("--options", default="{}", help="JSON: {workload: {option: value}}")
    args = parser.parse_args(argv)
    names = [n for n in args.workloads.split(",") if n]
    return run_workloads(names, json.loads(args.options))


if __name__ == "__main__":
    sys.exit(recorded(main)())    # an escaping exception also lands in torchrun's error file
