"""What labctl's commands decide besides their flags: the lab from its file and flags, the
one mapping of the library's errors to a line and an exit code, what a run's end says,
the preflight's table, a run folder opened (with its note), its logs and its page.
labctl/cli.py is click and calls these; heavy modules (lab, report, html, exercise) are
imported where they are used, so that `labctl --help` imports neither torch nor kubernetes.
"""
from __future__ import annotations

import codecs
import os
import select
import signal
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

from . import backends as backend_registry
from . import labchecks
from . import spec as specmod
from .errors import Interrupted, LabError, Refused
from .rundir import NotARunFolder

EXIT_SPEC = 2


def exit_for(exc: BaseException) -> tuple[str, int] | None:
    """The one mapping of the library's errors to what the CLI says and its exit code:
    (one line, code), or None for what is not ours to say (a bug: its traceback)."""
    from .outcome import INTERRUPT_EXIT

    if isinstance(exc, specmod.SpecError):
        return str(exc), EXIT_SPEC
    if isinstance(exc, LabError):
        return str(exc), exc.exit_code
    if isinstance(exc, Interrupted):        # a second signal cut a protected phase short
        return f"interrupted ({exc.signal})", INTERRUPT_EXIT.get(exc.signal, 130)
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted", 130
    if isinstance(exc, BrokenPipeError):
        return "broken pipe (a process labctl was writing to went away)", 1
    if isinstance(exc, NotARunFolder):      # a path given as a run folder that is none: bad input
        return str(exc).strip("'\""), EXIT_SPEC
    if isinstance(exc, OSError):            # permissions, a full disk, a read-only folder ...
        if exc.filename is None and not exc.strerror:
            return str(exc).strip("'\""), 1     # our own message, e.g. "x: not a run folder"
        where = f"'{exc.filename}': " if exc.filename else ""
        return f"{where}{exc.strerror or exc}", 1
    return None


def stdout_gone() -> bool:
    """Whether the reader of stdout went away (`labctl logs RUN | head` after its ten
    lines): the kernel marks a pipe without readers POLLERR. Tells that broken pipe from
    one of a child process's, which is a real error."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):     # no real stdout (a test runner's)
        return False


def stop_quietly() -> None:
    """Stop as `cat` does when its reader is gone: nothing on stderr, the status of a
    SIGPIPE death (141); stdout points at /dev/null so that Python's own flush at exit
    cannot complain either."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
    sys.exit(128 + signal.SIGPIPE)


# ---- the lab ----------------------------------------------------------------------------
def load_lab(spec_file: str | None, script_args: tuple[str, ...] = (), check_out: bool = True,
             note: Callable[[str], None] | None = None, **flags: Any) -> specmod.LabSpec:
    """The lab from its file and flags, refused (SpecError: exit 2) where it could not
    start here: its fields, the backends' rules, its script and (`check_out`) run folder.
    `note` is told each setting that cannot act (`labchecks.idle_settings`)."""
    overrides = specmod.from_flags(flags)
    if script_args:
        overrides["script_args"] = list(script_args)
    spec = backend_registry.load(spec_file, overrides)
    labchecks.check_files(spec, spec_file or "lab spec", out=check_out)
    for line in labchecks.idle_settings(spec) if note else ():
        note(line)
    return spec


def backend_flags(flags: dict[str, Any]) -> dict[str, Any]:
    """The backends' own flags, taken out of `flags` (what is left: the lab's)."""
    names = backend_registry.all_options()
    return {k: flags.pop(k) for k in list(flags) if k in names}


def summary(spec: specmod.LabSpec) -> str:
    """`labctl validate`'s line for a lab that can run."""
    what = spec.script or ",".join(w.name for w in spec.workloads)
    return (f"ok: lab {spec.name!r}: {spec.nodes} node(s) x {spec.nproc_per_node} process(es) "
            f"= world size {spec.world_size}, {spec.launcher}, {spec.dist_backend}, "
            f"backend {spec.backend}, runs {what}"
            + (f"; faults: {', '.join(map(str, spec.faults))}" if spec.faults else "")
            + (f"; links: {'; '.join(spec.links.describe(spec.nodes * spec.replicas))}"
               if spec.links else ""))


def write_starter(path: str, name: str, force: bool) -> None:
    """`labctl init`: the starter lab description (spec.STARTER) with its name."""
    target = Path(path)
    if target.exists() and not force:
        raise Refused(f"{path} exists; use --force to overwrite it")
    text = specmod.STARTER.format(name=name)
    specmod.from_dict({"name": name}, source="--name")      # validate the name
    target.write_text(text)


def render(target: str, spec: specmod.LabSpec, run_id: str | None, output_dir: str | None,
           wrote: Callable[[Path], None]) -> tuple[str | None, str | None]:
    """`labctl render`: (the text to print, or None when the files went into `output_dir`,
    each told to `wrote`; the line on how to collect it, for a backend that can)."""
    from . import lab

    the_plan = lab.make_plan(spec, run_id=run_id)
    text = None
    if output_dir:
        out = Path(output_dir)
        out.mkdir(parents=True, exist_ok=True)
        for name, content in backend_registry.render_files(target, the_plan).items():
            (out / name).write_text(content)
            wrote(out / name)
    else:
        text = backend_registry.render_text(target, the_plan)
    hint = None
    if target in backend_registry.collect_targets():
        hint = (f"run id {the_plan.run_id}; once started: labctl collect --backend {target} "
                f"--run-id {the_plan.run_id}")
    return text, hint


def stacks_text(r, progress: Callable[[str], None], options) -> str:
    """`labctl stacks`: where every rank is (the stacks table); none printed: a LabError."""
    from . import lab, report

    where = lab.stacks(r, progress=progress, options=options)
    if not where:
        raise LabError(f"no rank printed a stack (ranks started before labctl could ask, or not "
                       f"Python?); see {r.nodes_dir}")
    return report.stacks_table(where, r)


# ---- how a run ended ---------------------------------------------------------------------
def failure_line(run, what: str = "lab") -> str:
    """`lab failed: <who failed first and why>; failed rank(s): ...; logs in <folder>`."""
    rec = run.record
    first, failed = rec.first_failure, rec.failed_ranks
    who = f": {first.describe()}" if first else (f": {rec.message}" if rec.message else "")
    if failed:
        who += f"; failed rank(s): {', '.join(map(str, failed))}"
    return f"{what} {rec.state.value}{who}; logs in {run.path}"


def exit_code(run) -> int:
    """A run that did not pass: 1, or the signal's code when a signal stopped it."""
    from .outcome import INTERRUPT_EXIT

    return INTERRUPT_EXIT.get(run.record.signal or "", 1)


def ending(run) -> tuple[str, int] | None:
    """None for a run that passed, else its failure line and exit code (`up`, `collect`)."""
    return None if run.record.ok else (failure_line(run), exit_code(run))


def preflight_table(run) -> tuple[bool, str]:
    """(passed, its table): the preflight workload's table, drawn by its host part."""
    from .reports import preflight as preflight_report

    return run.record.ok, preflight_report.run_table(run)


def preflight_failure(run) -> str:
    """`preflight failed: dns (node 1 -> node 0), port (...); logs in <folder>`: the
    failed checks by name; the first failing rank when no check could say."""
    from .reports import preflight as preflight_report

    named = preflight_report.failed_checks(run)
    if not named:
        return failure_line(run, "preflight")
    return f"preflight failed: {named}; logs in {run.path}"


# ---- a run folder ------------------------------------------------------------------------
def open_run(run: str):
    """(the run folder, a note or None): the note when the run is marked running but its
    labctl is gone."""
    from .rundir import RunDir

    r = RunDir.open(run)
    note = None
    if r.controller_gone():
        note = (f"run {r.record.run_id} is marked running but its labctl "
                f"(pid {r.record.controller.pid}) is gone: abandoned; "
                f"`labctl down {r.path}` saves what is left and cleans up")
    return r, note


def log_paths(r, node: int | None, rank: int | None) -> list[Path]:
    """The logs `labctl logs` prints: every node's, or one node's or one rank's."""
    if node is not None and rank is not None:
        raise Refused("give --node or --rank, not both")
    if rank is not None:
        paths = [r.rank_log(rank)]
    elif node is not None:
        paths = [r.node_log(node)]
    else:
        paths = [p for _, p in sorted(r.node_logs())]
    for p in paths:
        if not p.is_file():
            known = sorted(x.stem for x in p.parent.glob("*.log"))
            raise LabError(f"{p}: no such log; this run has: {', '.join(known) or 'none'}")
    return paths


def text_of(path: Path, chunk: int = 1 << 20) -> Iterator[str]:
    """A log of any size a chunk at a time (never whole in memory); bytes that are not
    UTF-8 as U+FFFD, as ever."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    with open(path, "rb") as f:
        while data := f.read(chunk):
            yield decoder.decode(data)
    yield decoder.decode(b"", final=True)


def write_page(run: str) -> tuple[Path, list[str]]:
    """(Re)write a run's report.html from whatever the folder holds: (its path, the
    problems the page names)."""
    from . import html
    from .rundir import is_run_folder

    folder = Path(run)
    if not is_run_folder(folder):
        raise Refused(f"{run}: not a run folder (no status.json, plan.json or results.jsonl)")
    data = html.page_data(folder)
    return html.write(folder, data), list(data["problems"])


def report_text(r, fmt: str) -> str:
    """A run's report as `fmt`; a damaged status.json is one line, exit 2."""
    from . import report

    try:
        return report.render(r, fmt)
    except (KeyError, TypeError, AttributeError, ValueError, IndexError) as exc:
        raise Refused(f"{r.path}/status.json is damaged ({type(exc).__name__}: {str(exc)[:120]}); "
                      "no report can be made from it") from None
