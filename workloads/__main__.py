"""`python -m workloads --workloads env,p2p [--options JSON]`: run workloads in one process group.

Exit status: 0 when every check on this rank passed, 1 when one failed. A
crash raises, so torchrun sees a failed worker and stops the node.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import time

from . import _common, _stacks


def run_workloads(names: list[str], options: dict[str, dict]) -> int:
    _stacks.install()                     # SIGUSR1: print every thread's stack (labctl stacks)
    ctx = _common.init()
    try:
        for name in names:
            module = importlib.import_module(f"workloads.{name}")
            ctx.workload = name
            started = time.perf_counter()
            failures_before = ctx.failures
            module.run(ctx, **options.get(name, {}))
            # world_size: an elastic lab may end with fewer ranks than it started with
            ctx.record("workload_done", ctx.failures == failures_before,
                       seconds=round(time.perf_counter() - started, 6), unit="s",
                       world_size=ctx.world_size)
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
    sys.exit(main())
