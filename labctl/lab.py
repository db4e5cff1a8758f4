"""The library behind the CLI: spec → plan → driver + backend → run folder → report."""
from __future__ import annotations

import dataclasses
import os
import signal
import socket
import time
from pathlib import Path
from typing import Callable

from . import backends, driver, finish
from .backends.base import Backend, BackendOptions, TakeStacks
from .errors import Interrupted, LabError, Refused
from .outcome import INTERRUPT_EXIT, NodeState
from .plan import LaunchPlan, new_run_id, plan
from .runrecord import Collected
from .rundir import RunDir, folder_path
from .signals import Signals, signals_raise
from .spec import LabSpec, WorkloadSpec
from .verdict import Ending, Seen

# The one workload labctl itself names: `labctl preflight` runs it (workloads/preflight.py).
PREFLIGHT = "preflight"
PREFLIGHT_JOIN_S = 60.0          # at most this long for every rank to reach node 0's store
PREFLIGHT_TIMEOUT_S = 300.0      # the whole preflight lab, containers' start included

Progress = Callable[[str], None]


def make_plan(spec: LabSpec, run_id: str | None = None, backend: Backend | None = None,
              out: str | None = None, runs_root: str = "runs",
              options: BackendOptions | None = None) -> LaunchPlan:
    """The plan of a run whose folder will be `out` (or the lab's `out`, else
    `<runs_root>/<run id>`): `labctl render plan` shows what `labctl up` would run."""
    backend = backend or backends.create(spec.backend, options=options)
    run_id = run_id or new_run_id(spec)
    try:
        placement = backend.placement(spec, folder_path(run_id, out or spec.out, runs_root))
    except FileNotFoundError as exc:
        raise LabError(str(exc)) from None
    return plan(spec, placement, run_id)


def up(spec: LabSpec, out: str | None = None, progress: Progress = print,
       runs_root: str = "runs", backend: Backend | None = None,
       options: BackendOptions | None = None, signals: Signals | None = None) -> RunDir:
    """Run the lab to its end and return the finalized run folder.

    The folder is written whatever happens: a failing rank, the deadline,
    a signal, an error inside the backend — all end with logs collected,
    everything stopped and a finished status.json. Preflight refusals
    (exit 2) happen before the folder exists. `backend`: an instance to use
    instead of a new one of `spec.backend` (tests place nodes differently).
    `signals`: a regime the caller installed (`signals_raise()`) and keeps after
    the run (`labctl exercise check` grades the run under it).
    """
    backend = backend or backends.create(spec.backend, progress, options)
    the_plan = make_plan(spec, backend=backend, out=out, runs_root=runs_root)
    backend.preflight(the_plan)
    try:
        run = RunDir.create(the_plan, out or spec.out, root=runs_root)
    except FileExistsError as exc:
        raise LabError(str(exc)) from None
    run.record.workdir = spec.workdir
    run.note_controller()
    progress(f"run {the_plan.run_id}: {spec.nodes} node(s) x {spec.nproc_per_node} process(es), "
             f"{spec.launcher}, {spec.dist_backend}, backend {spec.backend} -> {run.path}")
    t0 = time.monotonic()
    live = _live(run, backend, progress)
    if live is not None and live.view is not None:
        progress = _above(progress, live.view)
    with signals_raise(signals) as signals:  # one regime from the start to the report
        result = driver.run(the_plan, backend, run, progress, signals=signals, live=live)
        run.record.seconds = round(time.monotonic() - t0, 3)
        finish.write_down(run, result, progress, signals)
    if result.error is not None:
        raise _kept_said(result.error, run) if result.kept else result.error
    return run


def watch(run: RunDir, progress: Progress = print, options: BackendOptions | None = None,
          poll_s: float = 0.5, clock: Callable[[], float] = time.monotonic) -> int:
    """`labctl watch`: the live view and watcher on a lab another labctl runs, until it
    ends (or Ctrl-C). What it names goes to the terminal and to live/watch.json, never
    into the running labctl's status.json. Returns the hangs it named."""
    from . import live

    rec = run.record
    if rec.ended:
        raise Refused(f"run {rec.run_id} has ended ({rec.state.value}): nothing to watch; "
                        f"`labctl report {run.path}` says how it went")
    if run.controller_gone():
        raise Refused(f"run {rec.run_id}'s labctl is gone: nothing runs it to watch; "
                        f"`labctl down {run.path}` saves what it left")
    backend = backends.create(rec.backend, progress, options)
    backend.attach(run)
    watcher = live.watcher_for(run, backend, progress, started_at=_started_epoch(rec.started),
                               owner=False)
    if watcher is None:
        raise Refused(f"run {rec.run_id} cannot be watched live (see the line above)")
    named, last = 0, None
    try:
        while True:
            watcher.poll(backend.describe().outcomes)
            if watcher.stalled is not None and watcher.said is not None and watcher.said is not last:
                named, last = named + 1, watcher.said
            if _ended(run):
                break
            time.sleep(poll_s)
    except KeyboardInterrupt:
        progress("watch: stopped (the lab goes on)")
    finally:
        watcher.close()
    if _ended(run):
        progress(f"watch: run {rec.run_id} ended; `labctl report {run.path}` says how it went")
    return named


def _ended(run: RunDir) -> bool:
    try:
        return RunDir.open(run.path).record.ended or run.controller_gone()
    except Exception:       # noqa: BLE001 - status.json mid-write: look again
        return False


def _started_epoch(started: str) -> float | None:
    import datetime as _dt

    try:
        return _dt.datetime.fromisoformat(started).timestamp()
    except (TypeError, ValueError):
        return None


def _live(run: RunDir, backend: Backend, progress: Progress, elsewhere: bool = False):
    """The live watcher (labctl/live/), showing its view where progress is shown.
    `elsewhere`: a lab started outside labctl (`collect`): never stopped, its records read
    from its log stream."""
    from . import live

    quiet = getattr(progress, "quiet", False)
    return live.watcher_for(run, backend, progress, show=not quiet, elsewhere=elsewhere)


def _above(progress: Progress, view) -> Progress:
    """`progress` that takes the live view's block off the screen first."""
    def say(line: str) -> None:
        view.clear()
        progress(line)
    return say


def _kept_said(error: LabError, run: RunDir) -> LabError:
    """The error that ended a lab whose logs could not all be saved, with what to do: the
    lab was kept, and `labctl down` saves them (one line, the error's exit code)."""
    said = LabError(f"{error}; the lab was kept: `labctl down {run.path}` saves the logs, "
                    "then removes it")
    said.exit_code = error.exit_code
    return said


def collect(backend_name: str, run_id: str, out: str | None = None, wait: bool = True,
            timeout: float | None = None, delete: bool = False, progress: Progress = print,
            runs_root: str = "runs", options: BackendOptions | None = None,
            backend: Backend | None = None) -> RunDir:
    """The run folder of a lab that `docker compose up` or `kubectl apply` started.

    The backend finds the run's objects by its id and rebuilds the plan from the
    lab description the renderer stored in them; the driver watches it until
    every node has ended (`wait`, at most `timeout` seconds, default the lab's
    own timeout) and collects every log. Nothing is stopped; `delete` removes
    the lab afterwards, only once the folder is written. `backend`: an instance of
    `backend_name` to use instead of a new one (tests: one on a fake cluster).
    """
    backend = backend or backends.create(backend_name, progress, options)
    the_plan = backend.attach(run_id)
    if out is None:
        out = str(_free_folder(Path(runs_root), run_id))
    try:
        run = RunDir.create(the_plan, out, root=runs_root)
    except FileExistsError as exc:
        raise LabError(str(exc)) from None
    run.record.collected = Collected(wait=wait)
    _attach(backend, run)
    spec = the_plan.spec
    progress(f"run {run_id}: {spec.nodes} node(s) x {spec.nproc_per_node} process(es), "
             f"{spec.launcher}, {spec.dist_backend}, started outside labctl on {backend_name} "
             f"-> {run.path}")
    t0 = time.monotonic()
    live = _live(run, backend, progress, elsewhere=True) if wait else None
    if live is not None and live.view is not None:
        progress = _above(progress, live.view)
    with signals_raise() as signals:
        result = driver.follow(the_plan, backend, run, progress,
                               timeout=spec.timeout if timeout is None else timeout, wait=wait,
                               signals=signals, live=live)
        run.record.seconds_watched = round(time.monotonic() - t0, 3)
        if delete and result.error is None:
            for o in result.outcomes:
                if not o.state.ended:
                    o.state, o.reason = NodeState.STOPPED, "still running when `labctl collect --delete` removed it"
            result.seen.removed_before_end = True
        finish.write_down(run, result, progress, signals)
    if result.error is not None:
        raise LabError(f"{result.error}; nothing was deleted; what could be saved is in {run.path}"
                       if delete else f"{result.error}; see {run.path}") from None
    if delete:
        progress(backend.delete())
    return run


def preflight_spec(spec: LabSpec) -> LabSpec:
    """The user's lab as a preflight: the same nodes, backend, image, env and
    resources, running the preflight workload instead of its own work.

    Launched `direct`, one replica, env:// init: under torchrun the agents'
    rendezvous needs node 0's name and port before any worker runs, so a
    failure there would never reach the checks; direct workers meet at the same
    MASTER_ADDR:MASTER_PORT, and check it first (and MASTER_PORT + 1 for a
    tcp:// init lab). Options the lab gives the preflight workload (in its
    workloads list) are kept; torch's debug server is not started (`debug_server`).
    """
    given = next((dict(w.options) for w in spec.workloads if w.name == PREFLIGHT), {})
    options = {"join_timeout": min(spec.join_timeout, PREFLIGHT_JOIN_S), **given}
    if spec.init_method == "tcp":            # the lab's tcp:// store: MASTER_PORT + 1 on node 0
        options.setdefault("check_init_port", True)
    return dataclasses.replace(
        spec, workloads=(WorkloadSpec(PREFLIGHT, options),), script=None, script_args=(),
        launcher="direct", init_method="env", replicas=1, out=None, debug_server=None,
        timeout=min(spec.timeout, PREFLIGHT_TIMEOUT_S))


def preflight(spec: LabSpec, out: str | None = None, progress: Progress = print,
              runs_root: str = "runs", backend: Backend | None = None,
              options: BackendOptions | None = None) -> RunDir:
    """Run the lab's preflight (`preflight_spec`) on its backend; the run folder holds
    the table (report.md) and each node's log. Cheap refusals raise, as for `up`."""
    return up(preflight_spec(spec), out=out, progress=progress, runs_root=runs_root,
              backend=backend, options=options)


def write_report(run: RunDir, progress: Progress) -> None:
    """report.md, report.html and the workloads' files of a finished run folder."""
    finish.write_reports(run, progress)


def _attach(backend: Backend, run: RunDir) -> None:
    """Bind `backend` to the run recorded in `run`, and write down what it says the record
    must hold of it (k8s: where a folder `labctl collect` made ran)."""
    backend.attach(run)
    driver.keep_state(run, backend.for_record, save=True)


def _free_folder(root: Path, run_id: str) -> Path:
    """runs/<id>, or runs/<id>.2, .3 ... when collecting the same run again (after --no-wait)."""
    n = 1
    while True:
        path = root / (run_id if n == 1 else f"{run_id}.{n}")
        if not path.exists() or not any(path.iterdir()):
            return path
        n += 1


CONTROLLER_EXIT_S = 60.0      # `down --force`: a live labctl's own cleanup, at most this long


class ControllerAlive(LabError):
    """`labctl down` of a run whose labctl still runs it: a refusal unless --force."""
    exit_code = 2


def live_controller(run: RunDir) -> int | None:
    """The pid of the labctl that runs `run` on this machine, while it is alive."""
    ctl = run.record.controller
    if run.record.ended or ctl is None or not ctl.pid:
        return None
    if ctl.host != socket.gethostname() or run.controller_gone():
        return None
    return int(ctl.pid)


def _stop_controller(run: RunDir, pid: int, progress: Progress, asked: Callable[[], None] = lambda: None) -> None:
    """SIGTERM to the live labctl: it stops its lab and writes the folder itself (`asked`:
    called once the signal is sent)."""
    progress(f"run {run.record.run_id}: asking its labctl (pid {pid}) to stop it (SIGTERM)")
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    asked()
    end = time.monotonic() + CONTROLLER_EXIT_S
    while time.monotonic() < end and not run.controller_gone():
        time.sleep(0.1)
    try:
        run.record = RunDir.open(run.path).record
    except (OSError, LabError):
        pass


def down(run: RunDir, discard_logs: bool = False, progress: Progress = print,
         force: bool = False, options: BackendOptions | None = None,
         backend: Backend | None = None) -> str:
    """Delete what a run left behind — after saving its logs, unless told not to.

    A run whose labctl died (or that kubectl/compose started) still has nodes,
    and maybe unsaved logs: they are collected into the folder, status.json is
    finalized as abandoned and the report written, and only then is anything
    stopped or deleted. If saving fails, nothing is deleted. A run whose labctl
    could not collect every log (`logs_uncollected`: state error or interrupted)
    gets its logs saved the same way, and keeps its state. A run whose labctl
    is alive is refused (that labctl stops it on Ctrl-C); `force` asks that
    labctl to stop (SIGTERM) and then cleans up what is left. `backend`: an instance of
    the run's backend to use instead of a new one (tests: one on a fake cluster).
    SIGINT, SIGTERM or SIGHUP stop it with one line (`DownInterrupted`): what was done,
    what is left; it once died silently with 143.
    """
    step = _DownStep(run)
    with signals_raise() as signals:
        try:
            return _down(run, discard_logs, progress, force, options, backend, signals, step)
        except Interrupted as exc:
            raise step.interrupted(exc.signal) from None


class DownInterrupted(LabError):
    """`labctl down` stopped by a signal: one line, the signal's exit status (130, 143, 129)."""


@dataclasses.dataclass
class _DownStep:
    """Where `labctl down` is, for the one line a signal gets: what is done, what is left."""
    run: RunDir
    doing: str = "looking at the run"
    done: str = "nothing was saved, stopped or deleted"
    left: str = "the run as it was"

    def now(self, doing: str, done: str, left: str) -> None:
        self.doing, self.done, self.left = doing, done, left

    force: bool = False

    def interrupted(self, sig: str) -> LabError:
        flag = " --force" if self.force else ""
        again = f"`labctl down{flag} {self.run.path}` again finishes it" if self.left != "nothing" else ""
        error = DownInterrupted(f"interrupted ({sig}) while {self.doing}: {self.done}; left: {self.left}"
                                + (f"; {again}" if again else ""))
        error.exit_code = INTERRUPT_EXIT.get(sig, 130)
        return error


def _down(run: RunDir, discard_logs: bool, progress: Progress, force: bool,
          options: BackendOptions | None, backend: Backend | None, signals, step: _DownStep) -> str:
    pid = live_controller(run)
    if pid is not None and not force:
        raise ControllerAlive(f"run {run.record.run_id} is still run by labctl pid {pid}; "
                              f"stop it there (Ctrl-C, or kill -INT {pid}), or use "
                              "`labctl down --force` to stop it from here")
    if pid is not None:
        step.force = True
        step.now(f"asking its labctl (pid {pid}) to stop the lab", "nothing was asked, saved or deleted",
                 "the lab and its labctl, running")
        _stop_controller(run, pid, progress, asked=lambda: step.now(
            f"waiting for its labctl (pid {pid}) to stop the lab",
            "its labctl was asked to stop the lab (SIGTERM); nothing was saved or deleted here",
            "the lab, until its labctl has stopped it and written the folder"))
        step.force = False
    backend = backend or backends.create(run.record.backend, progress, options)
    _attach(backend, run)
    finished = run.record.ended and not run.record.logs_uncollected
    if not backend.describe().exists:
        note = ""
        if not finished:
            step.now("writing down the run (nothing of it runs)", "nothing was deleted",
                     "the run folder's status.json and report, not yet finished")
            try:
                _finalize_abandoned(run, backend, progress, save=False, signals=signals)
            except OSError as exc:          # a full or read-only folder: still clean up
                note = f" (the run folder could not be written: {run.storage_error(exc)})"
        return _delete(backend, signals, step, note)
    if finished:                  # its logs are in the folder already (e.g. `labctl collect`)
        return _delete(backend, signals, step)
    if discard_logs:
        return _delete(backend, signals, step, " (logs discarded: --discard-logs)")
    step.now("saving the logs", "nothing was deleted", "the lab (still running) and its logs, not saved")
    try:
        _finalize_abandoned(run, backend, progress, save=True, signals=signals, step=step)
    except OSError as exc:
        exc = run.storage_error(exc)
        raise LabError(f"could not save the logs of run {run.record.run_id} ({exc}); "
                       "nothing was deleted (use --discard-logs to delete anyway)") from None
    except LabError as exc:
        raise LabError(f"could not save the logs of run {run.record.run_id} ({exc}); "
                       "nothing was deleted (use --discard-logs to delete anyway)") from None
    step.now("deleting the lab", f"the logs were saved into {run.path}", "the lab, not yet deleted")
    if signals.deferred:            # a signal during the protected finish: stop before deleting
        raise Interrupted(signals.deferred[0])
    done = _delete(backend, signals, step)
    return f"saved the logs into {run.path} (report: {run.report_path}); {done}"


def _delete(backend: Backend, signals, step: _DownStep, note: str = "") -> str:
    """backend.delete() with signals deferred (a half-deleted lab helps nobody); a signal
    that came meanwhile is said once it is done."""
    if signals.deferred:
        raise Interrupted(signals.deferred[0])
    signals.raising = False
    done = backend.delete() + note
    if signals.deferred:
        step.now("deleting the lab", f"{step.done}; {done}" if "saved" in step.done else done, "nothing")
        raise Interrupted(signals.deferred[0])
    return done


def _finalize_abandoned(run: RunDir, backend: Backend, progress: Progress, save: bool,
                        signals=None, step: _DownStep | None = None) -> None:
    """Collect what exists of a run nobody finished, and write it down as abandoned
    (a run whose labctl ended without every log keeps its state and node outcomes)."""
    rec = run.record
    uncollected = rec.logs_uncollected
    outcomes = (list(rec.node_outcomes) if uncollected else []) or list(backend.describe().outcomes)
    if save:
        backend.stream(run, strict=True)
        if step is not None:
            step.now("finishing the run folder", f"the logs were saved into {run.path}; nothing was deleted",
                     "the lab, not deleted; the run folder's status.json and report, unfinished")
    for o in outcomes:
        if not o.state.ended:
            o.state, o.reason = NodeState.STOPPED, "still running when `labctl down` stopped it"
    if uncollected:                  # its labctl ended it, without every log: its state stands
        rec.logs_uncollected = False
        seen = Seen(Ending.WATCHED, outcomes, rec.message + ("; `labctl down` saved the logs "
                                                             "afterwards" if save else ""))
        previous = rec.state
    else:
        seen = Seen(Ending.WATCHED, outcomes, "its labctl is gone; `labctl down` saved what the "
                    "nodes wrote and stopped them" if not rec.ended else rec.message,
                    abandoned=True)
        previous = None
    with signals_raise(signals) as signals:     # the finish is protected as `up`'s is
        raising, signals.raising = signals.raising, False
        finish.finish(run, seen, progress, signals, previous=previous)
        signals.raising = raising


def stacks(run: RunDir, progress: Progress = print,
           options: BackendOptions | None = None) -> dict[str, dict]:
    """Every rank's stack of a lab that is still running, without stopping it.

    The ranks print their stacks into their logs (SIGRTMIN+6, workloads/_stacks.py);
    they are read back from the node logs and written to stacks/rank-<r>.txt.
    """
    from . import logs, stackdumps

    backend = backends.create(run.record.backend, progress, options)
    _attach(backend, run)
    if not backend.describe().exists:
        raise LabError(f"run {run.record.run_id} is not running: nothing to ask "
                       f"(stacks taken at its deadline are in {run.stacks_dir})")
    for note in backend.signal(TakeStacks(run)):
        progress(note)
    if not backend.live_logs:
        backend.stream(run, strict=True)
    dumps: dict[int, list[str]] = {}
    for node in run.planned_nodes:
        reader = logs.NodeLogReader()
        if run.node_log(node.index).is_file():
            reader.feed_file(run.node_log(node.index))
        reader.close()
        dumps.update(reader.stack_dumps())
    run.write_stacks(dumps)
    return {str(rank): stackdumps.where_stuck(lines) for rank, lines in sorted(dumps.items())}
