"""The library behind `labctl up`: spec → plan → backend → run folder → report."""
from __future__ import annotations

import signal
import time
from typing import Any, Callable

from . import backends, report
from .errors import LabError
from .plan import LaunchPlan, new_run_id, plan
from .rundir import RunDir
from .spec import LabSpec


def make_plan(spec: LabSpec, run_id: str | None = None, **options: Any) -> LaunchPlan:
    backend = backends.load(spec.backend)
    try:
        placement = backend.placement(spec, **options)
    except FileNotFoundError as exc:
        raise LabError(str(exc)) from None
    return plan(spec, placement, run_id or new_run_id(spec))


def up(spec: LabSpec, out: str | None = None, progress: Callable[[str], None] = print,
       runs_root: str = "runs", **options: Any) -> RunDir:
    """Run the lab to its end and return the finalized run folder.

    The folder is written whatever happens: a failing rank, the deadline,
    Ctrl-C (or SIGTERM) all end with logs collected and everything stopped.
    """
    the_plan = make_plan(spec, **options)
    try:
        run = RunDir.create(the_plan, out or spec.out, root=runs_root)
    except FileExistsError as exc:
        raise LabError(str(exc)) from None
    progress(f"run {the_plan.run_id}: {spec.nodes} node(s) x {spec.nproc_per_node} process(es), "
             f"{spec.launcher}, {spec.dist_backend}, backend {spec.backend} -> {run.path}")
    backend = backends.load(spec.backend)
    t0 = time.monotonic()
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    error: LabError | None = None
    try:
        outcomes, state, message = backend.run(the_plan, run, t0 + spec.timeout, progress, **options)
    except LabError as exc:         # the backend could not run the lab: still a complete folder
        error, (outcomes, state, message) = exc, ([], "error", str(exc))
    finally:
        signal.signal(signal.SIGTERM, previous)
    run.meta["seconds"] = round(time.monotonic() - t0, 3)
    run.finalize(outcomes, state, message)
    if error is not None:
        raise error
    write_bench_plots(run, progress)
    (run.path / "report.md").write_text(report.markdown(run))
    return run


def write_bench_plots(run: RunDir, progress: Callable[[str], None]) -> None:
    """PNG plots next to the report when the run has bench results; a missing
    matplotlib is a note, not a failed lab."""
    if not any(r.get("workload") == "bench" for r in run.results()):
        return
    from . import bench

    try:
        for path in bench.write_plots(run):
            progress(f"plot: {path}")
    except LabError as exc:
        progress(f"note: {exc}")


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt
