"""labctl: run one lab description on local processes, docker compose or Kubernetes.

The CLI stays thin: parse flags, call the library, turn known errors into one
line and an exit code (2: bad lab description, 1: the lab or its backend
failed). Heavy imports (torch, kubernetes) never happen at import time.
"""
from __future__ import annotations

import functools
import math
import os
import re
import select
import signal
import sys
from pathlib import Path
from typing import Any

import click

from . import backends as backend_registry
from . import spec as specmod
from .errors import Interrupted, LabError
from workloads._protocol import one_line, visible

EXIT_SPEC = 2


_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


class LabGroup(click.Group):
    """click's own errors (a bad flag value, an unknown option) as one line, exit 2, like
    the spec's: click would print Usage:, Try and Error: lines."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _NO_ARGS_IS_HELP as exc:       # bare `labctl`: the help, as click shows it
            exc.show()
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            click.echo(f"error: {_click_error(exc)}", err=True)
            sys.exit(exc.exit_code)
        except (LabError, specmod.SpecError, Interrupted) as exc:    # raised outside a command
            fail(*exit_for(exc))
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        except BrokenPipeError:
            if not stdout_gone():
                raise
            stop_quietly()
        try:
            sys.stdout.flush()            # what is left for a reader that went away: now, not at exit
        except BrokenPipeError:
            stop_quietly()
        sys.exit(code if isinstance(code, int) else 0)


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


def _click_error(exc: click.ClickException) -> str:
    """`--nodes: expected ...` for a bad value; click's own message for the rest."""
    param = getattr(exc, "param", None)
    if isinstance(exc, click.BadParameter) and not isinstance(exc, click.MissingParameter) \
            and param is not None:
        name = max(param.opts, key=len) if isinstance(param, click.Option) else param.human_readable_name
        text = f"{name}: {exc.message}"
    else:
        text = exc.format_message()
    return one_line(text)


class IntRange(click.IntRange):
    """An integer flag with the spec's bounds; a bad value reads as the spec's line
    (`expected an integer between 1 and 4096, given '-3'`). Digits only, as in a lab file."""

    def __init__(self, lo: int, hi: int, expected: str | None = None):
        super().__init__(lo, hi)
        self.expected = expected or f"an integer between {lo} and {hi}"

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not (len(value) < 20 and re.fullmatch(r"\s*[0-9]+\s*", value)):
            self.fail(f"expected {self.expected}, given {value!r}", param, ctx)
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter:
            self.fail(f"expected {self.expected}, given {value!r}", param, ctx)


class Seconds(click.FloatRange):
    """Seconds in (0, MAX_SECONDS], finite, as the spec's timeouts."""

    def __init__(self):
        super().__init__(0, specmod.MAX_SECONDS, min_open=True)

    def convert(self, value, param, ctx):
        expected = f"a number of seconds > 0 and at most {specmod.MAX_SECONDS:,}"
        try:
            seconds = super().convert(value, param, ctx)
        except click.BadParameter:
            self.fail(f"expected {expected}, given {value!r}", param, ctx)
        if not math.isfinite(seconds):
            self.fail(f"expected {expected}, given {value!r}", param, ctx)
        return seconds


class Choice(click.Choice):
    """One of the spec's (or the registry's) names; a bad one is `expected one of a, b, given 'x'`."""

    def convert(self, value, param, ctx):
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter:
            self.fail(f"expected one of {', '.join(self.choices)}, given {value!r}", param, ctx)


def fail(message: str, code: int = 1) -> None:
    say(f"error: {message}", err=True)
    sys.exit(code)


def say(text: str, err: bool = False, nl: bool = True) -> None:
    """Print text that may hold a rank's (an exception, a check's detail, a report): its
    control characters shown, not obeyed (workloads._protocol.visible); `labctl logs`
    alone prints what ranks wrote as they wrote it."""
    click.echo(visible(text, keep="\n\t"), err=err, nl=nl)


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
    if isinstance(exc, OSError):            # permissions, a full disk, a read-only folder ...
        if exc.filename is None and not exc.strerror:
            return str(exc).strip("'\""), 1     # our own message, e.g. "x: not a run folder"
        where = f"'{exc.filename}': " if exc.filename else ""
        return f"{where}{exc.strerror or exc}", 1
    return None


def friendly(fn):
    """Known errors → one line on stderr and an exit code (`exit_for`); never a traceback."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (Exception, KeyboardInterrupt, Interrupted) as exc:
            if isinstance(exc, BrokenPipeError) and stdout_gone():
                stop_quietly()              # `labctl logs RUN | head`: the reader has what it wanted
            said = exit_for(exc)
            if said is None:
                raise
            fail(*said)
    return wrapper


def lab_options(fn=None, *, leave_out: tuple[str, ...] = ()):
    """The flags shared by `up`, `render` and `validate`; each overrides lab.yaml.
    `leave_out`: the destinations a command does not take (`exercise check`: its file is
    the script, and it traces always)."""
    if fn is None:
        return functools.partial(lab_options, leave_out=leave_out)
    options = [click.option("-f", "--file", "spec_file", type=click.Path(dir_okay=False),
                            help="Lab description (YAML). Default: built-in 2x2 gloo lab.")]
    options += [_lab_flag(key, decl) for key, decl in specmod.lab_fields() if decl.flag]
    for option in reversed(options):
        if not leave_out or not any(name in leave_out for name in _destinations(option)):
            fn = option(fn)
    return fn


def _lab_flag(key: str, decl: specmod.LabField):
    """A lab field's flag, from its declaration (`spec.lab_field`): its reader's bounds
    are the flag's type."""
    read = decl.read
    if decl.many:
        return click.option(decl.flag, key, multiple=True, help=decl.help)
    if isinstance(read, specmod.Bool):
        switch = {} if "/" in decl.flag else {"is_flag": True}
        return click.option(decl.flag, key, default=None, help=decl.help, **switch)
    if isinstance(read, specmod.Int):
        kind: Any = IntRange(read.lo, read.hi, read.flag_expected())
    elif isinstance(read, specmod.Seconds):
        kind = Seconds()
    elif isinstance(read, specmod.Choice):
        kind = Choice(read.choices if read.choices is not None else backend_registry.NAMES)
    elif isinstance(read, specmod.Folder):
        kind = click.Path(file_okay=False)
    else:
        kind = str
    return click.option(decl.flag, key, type=kind, help=decl.help)


def _destinations(option) -> list[str]:
    """The parameter names a click.option decorator would add (read off a dummy function)."""
    def probe():
        pass
    option(probe)
    return [p.name for p in getattr(probe, "__click_params__", [])]


def load_spec(spec_file: str | None, script_args: tuple[str, ...] = (), check_out: bool = True,
              notes: bool = True, **flags: Any) -> specmod.LabSpec:
    """The lab from its file and flags, refused (SpecError: exit 2) where it could not
    start here: its fields, the backends' rules, its script and (`check_out`) run folder.
    With `notes`, one `note:` line on stderr for each setting that cannot act."""
    overrides = specmod.from_flags(flags)
    if script_args:
        overrides["script_args"] = list(script_args)
    spec = backend_registry.load(spec_file, overrides)
    specmod.check_files(spec, spec_file or "lab spec", out=check_out)
    for note in specmod.idle_settings(spec) if notes else ():
        click.echo(f"note: {note}", err=True)
    return spec


@click.group(cls=LabGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="labctl")
def main() -> None:
    """Run PyTorch distributed labs (p2p, collectives, DDP) on local processes,
    docker compose or Kubernetes, and report every rank's results."""


@main.command()
@click.argument("path", default="lab.yaml", type=click.Path(dir_okay=False))
@click.option("--name", default="lab", help="Lab name to write into the file.")
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
@friendly
def init(path: str, name: str, force: bool) -> None:
    """Write a commented starter lab description."""
    target = Path(path)
    if target.exists() and not force:
        fail(f"{path} exists; use --force to overwrite it")
    text = specmod.STARTER.format(name=name)
    specmod.from_dict({"name": name}, source="--name")      # validate the name
    target.write_text(text)
    click.echo(f"wrote {path}; run it with: labctl up -f {path}")


@main.command()
@lab_options
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@friendly
def validate(spec_file, script_args, **flags) -> None:
    """Check a lab description; exit 2 with one line when it cannot run."""
    spec = load_spec(spec_file, script_args, **flags)
    what = spec.script or ",".join(w.name for w in spec.workloads)
    click.echo(f"ok: lab {spec.name!r}: {spec.nodes} node(s) x {spec.nproc_per_node} process(es) "
               f"= world size {spec.world_size}, {spec.launcher}, {spec.dist_backend}, "
               f"backend {spec.backend}, runs {what}"
               + (f"; faults: {', '.join(map(str, spec.faults))}" if spec.faults else "")
               + (f"; links: {'; '.join(spec.links.describe(spec.nodes * spec.replicas))}"
                  if spec.links else ""))


RENDER_TARGETS = backend_registry.render_targets()


def backend_options(fn):
    """Flags that belong to one backend (k8s: --context, --namespace), generated from the
    backends' typed options (`Backend.Options`, through the registry)."""
    for flag in reversed(list(backend_registry.all_options().values())):
        fn = click.option(f"--{flag.name.replace('_', '-')}", flag.name, type=flag.type,
                          help=f"{flag.help} ({', '.join(flag.backends)} backend).")(fn)
    return fn


def _options_for(backend: str, given: dict[str, Any]):
    """The backend flags given on the command line, as that backend's typed options; one
    of another backend is one line, exit 2 (`backends.options_for`)."""
    return backend_registry.options_for(backend, given)


@main.command()
@click.argument("target", type=click.Choice(RENDER_TARGETS))
@lab_options
@click.option("-o", "--output-dir", type=click.Path(file_okay=False),
              help="Write files into this folder instead of stdout.")
@click.option("--run-id", help="Run id, also the rendezvous id (default: a fresh <lab>-<stamp>-<hex>); "
                                "the first line of every rendered file names it, and "
                                "`labctl collect --run-id` finds the lab by it.")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@friendly
def render(target, spec_file, output_dir, run_id, script_args, **flags) -> None:
    """Print what a backend would run: plan (JSON), compose or k8s manifests."""
    from . import lab

    if target != "plan":
        flags["backend"] = target
    spec = load_spec(spec_file, script_args, check_out=False, **flags)
    the_plan = lab.make_plan(spec, run_id=run_id)
    if output_dir:
        out = Path(output_dir)
        out.mkdir(parents=True, exist_ok=True)
        for name, text in backend_registry.render_files(target, the_plan).items():
            (out / name).write_text(text)
            click.echo(f"wrote {out / name}", err=True)
    else:
        click.echo(backend_registry.render_text(target, the_plan), nl=False)
    if target in backend_registry.collect_targets():
        click.echo(f"run id {the_plan.run_id}; once started: labctl collect --backend {target} "
                   f"--run-id {the_plan.run_id}", err=True)


def _spec_and_options(spec_file, script_args, flags, notes: bool = True):
    """`up`'s and `preflight`'s flags: the lab's, then the chosen backend's own."""
    flag_names = backend_registry.all_options()
    backend_flags = {k: flags.pop(k) for k in list(flags) if k in flag_names}
    spec = load_spec(spec_file, script_args, notes=notes, **flags)
    return spec, _options_for(spec.backend, backend_flags)


def _progress(quiet: bool):
    return (lambda line: None) if quiet else (lambda line: say(line, err=True))


def _failure_line(run, what: str = "lab") -> str:
    """`lab failed: <who failed first and why>; failed rank(s): ...; logs in <folder>`."""

    rec = run.record
    first, failed = rec.first_failure, rec.failed_ranks
    who = f": {first.describe()}" if first else (f": {rec.message}" if rec.message else "")
    if failed:
        who += f"; failed rank(s): {', '.join(map(str, failed))}"
    return f"{what} {rec.state.value}{who}; logs in {run.path}"


def _preflight_table(run) -> tuple[bool, str]:
    """(passed, its table): the preflight workload's hook makes the table."""
    from . import lab, report

    return run.record.ok, report.hook(lab.PREFLIGHT).run_table(run)


def _preflight_failure(run) -> str:
    """`preflight failed: dns (node 1 -> node 0), port (...); logs in <folder>`: the
    failed checks by name; the first failing rank when no check could say."""
    from . import lab, report

    named = report.hook(lab.PREFLIGHT).failed_checks(run)
    if not named:
        return _failure_line(run, "preflight")
    return f"preflight failed: {named}; logs in {run.path}"


@main.command()
@lab_options
@backend_options
@click.option("--quiet", "-q", is_flag=True, help="No progress lines, only the report.")
@click.option("--preflight", "with_preflight", is_flag=True,
              help="Run `labctl preflight` first; stop with its table (exit 2) if a check fails.")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@friendly
def up(spec_file, script_args, quiet, with_preflight, **flags) -> None:
    """Run the lab, collect every rank's logs and results, print the report.

    Exit 0 only when every rank exited 0 and every check passed; 1 when the
    lab failed or timed out; 2 when it was refused before starting (bad lab
    description, a cheap check, or a failed --preflight); 130/143/129
    when Ctrl-C, SIGTERM or SIGHUP stopped it.
    """
    from . import lab

    spec, options = _spec_and_options(spec_file, script_args, flags)
    progress = _progress(quiet)
    if with_preflight:
        checked = lab.preflight(spec, out=f"{spec.out}-preflight" if spec.out else None,
                                progress=progress, options=options)
        passed, section = _preflight_table(checked)
        if not passed:
            say(section)
            fail(f"{_preflight_failure(checked)}; the lab was not started", EXIT_SPEC)
        progress(f"preflight passed in {checked.record.seconds or 0:.1f} s ({checked.path})")
    run = lab.up(spec, progress=progress, options=options)
    _report_and_exit(run)


def _report_and_exit(run) -> None:
    """Print the report; exit 0 only if the run passed, else one line on why (as `up`)."""
    from . import report
    from .outcome import INTERRUPT_EXIT

    try:
        say(report.markdown(run))
    except OSError:
        pass                          # the terminal is gone (SIGHUP); the report is in the folder
    if not run.record.ok:
        fail(_failure_line(run), INTERRUPT_EXIT.get(run.record.signal or "", 1))


@main.command()
@lab_options
@backend_options
@click.option("--quiet", "-q", is_flag=True, help="No progress lines, only the table.")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@friendly
def preflight(spec_file, script_args, quiet, **flags) -> None:
    """Check, on the real backend, what makes a multi-node lab fail in its first minute.

    Takes the same flags and lab description as `up`, and runs a short lab of
    the same nodes (the `preflight` workload, direct launcher): per node, node
    0's name resolves, its rendezvous port answers, a GPU per worker (nccl),
    /dev/shm size, clock offset from node 0; per pair of nodes a tiny all_reduce
    and send/recv, with their times. Prints one table. Exit 0 when every check
    passed, 1 when one failed, 2 when the lab was refused before starting.
    """
    from . import lab
    from .outcome import INTERRUPT_EXIT

    # no notes: the preflight runs its own lab of these nodes (direct, its workload)
    spec, options = _spec_and_options(spec_file, script_args, flags, notes=False)
    run = lab.preflight(spec, out=spec.out, progress=_progress(quiet), options=options)
    passed, section = _preflight_table(run)
    say(section)
    if not passed:
        fail(_preflight_failure(run), INTERRUPT_EXIT.get(run.record.signal or "", 1))
    click.echo(f"preflight passed in {run.record.seconds or 0:.1f} s; report: {run.path / 'report.md'}")


@main.command()
@click.option("--backend", "backend_name", required=True, type=click.Choice(backend_registry.collect_targets()),
              help="Where the lab runs.")
@click.option("--run-id", required=True,
              help="The run id: on the first line of every file `labctl render` wrote "
                   "(compose: also the project name).")
@click.option("--out", type=click.Path(file_okay=False),
              help="Run folder (default runs/<run id>, then runs/<run id>.2 ...).")
@click.option("--no-wait", is_flag=True,
              help="Take what is there now; a lab still running is written down as running.")
@click.option("--timeout", type=click.FloatRange(min=0),
              help="Seconds to wait for every node to end (default: the lab's own timeout).")
@click.option("--delete", is_flag=True,
              help="Remove the lab's containers/objects afterwards (never before its logs are saved).")
@backend_options
@friendly
def collect(backend_name, run_id, out, no_wait, timeout, delete, **options) -> None:
    """Logs, results and report of a lab that `docker compose` or `kubectl` started.

    Render the lab (`labctl render compose|k8s`), start it yourself (`docker
    compose -f compose.yaml up -d`, `kubectl apply -k DIR`), then collect it:
    labctl finds its containers or pods by the run id (the first line of every
    rendered file names it), waits until every node has ended and writes the
    same run folder as `labctl up`: nodes/, ranks/, results.jsonl, events/
    (k8s), status.json, report.md. Nothing is stopped or deleted unless
    --delete.

    Exit 0 only when every rank exited 0 and every check passed; 1 when the
    lab failed or still runs; 2 for an unknown run id.
    """
    from . import lab

    options = _options_for(backend_name, options)
    run = lab.collect(backend_name, run_id, out=out, wait=not no_wait, timeout=timeout,
                      delete=delete, progress=lambda line: say(line, err=True), options=options)
    _report_and_exit(run)


def _open_run(run: str):
    from .rundir import RunDir

    r = RunDir.open(run)
    if r.controller_gone():
        click.echo(f"note: run {r.record.run_id} is marked running but its labctl "
                   f"(pid {r.record.controller.pid}) is gone: abandoned; "
                   f"`labctl down {r.path}` saves what is left and cleans up", err=True)
    return r


@main.command()
@click.argument("run", type=click.Path())
@click.option("--node", type=int, help="Only this node's log.")
@click.option("--rank", type=int, help="Only this rank's log.")
@friendly
def logs(run, node, rank) -> None:
    """Print a run's logs: every node's, or one node's or one rank's."""
    r = _open_run(run)
    if node is not None and rank is not None:
        fail("give --node or --rank, not both", EXIT_SPEC)
    if rank is not None:
        paths = [r.rank_log(rank)]
    elif node is not None:
        paths = [r.node_log(node)]
    else:
        paths = sorted((r.path / "nodes").glob("node-*.log"),
                       key=lambda p: int(p.stem.split("-")[1]))
    for p in paths:
        if not p.is_file():
            known = sorted(x.stem for x in p.parent.glob("*.log"))
            fail(f"{p}: no such log; this run has: {', '.join(known) or 'none'}")
        if len(paths) > 1:
            click.echo(f"==> {p.relative_to(r.path)} <==")
        _print_file(p)


def _print_file(path: Path, chunk: int = 1 << 20) -> None:
    """A log of any size to stdout a chunk at a time (never whole in memory); bytes that
    are not UTF-8 as U+FFFD, as ever."""
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    with open(path, "rb") as f:
        while data := f.read(chunk):
            click.echo(decoder.decode(data), nl=False)
    click.echo(decoder.decode(b"", final=True), nl=False)


@main.command()
@click.argument("run", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["md", "json", "csv", "html"]), default="md",
              help="html: (re)write the run's page, RUN/report.html, and print its path.")
@friendly
def report(run, fmt) -> None:
    """Print a run's report (tables; bench runs also write PNG plots), or write its page."""
    from . import report as reportmod

    if fmt == "html":                 # the page is made from whatever the folder holds
        from pathlib import Path

        from . import html

        folder = Path(run)
        if not any((folder / name).is_file() for name in ("status.json", "plan.json", "results.jsonl")):
            fail(f"{run}: not a run folder (no status.json, plan.json or results.jsonl)", EXIT_SPEC)
        data = html.page_data(folder)
        page = html.write(folder, data)
        for problem in data["problems"]:
            say(f"note: {problem}", err=True)
        click.echo(str(page))
        return
    r = _open_run(run)
    try:
        text = reportmod.render(r, fmt)
    except (KeyError, TypeError, AttributeError, ValueError, IndexError) as exc:
        fail(f"{r.path}/status.json is damaged ({type(exc).__name__}: {str(exc)[:120]}); "
             "no report can be made from it", EXIT_SPEC)
    say(text, nl=False)
    for path in reportmod.write_files(r, lambda line: say(line, err=True)):
        click.echo(f"plot: {path}", err=True)


@main.command()
@click.argument("run", type=click.Path())
@click.option("--discard-logs", is_flag=True,
              help="Delete without saving the logs of nodes that are still there.")
@click.option("--force", is_flag=True,
              help="Also when the run's labctl is alive: ask it to stop (SIGTERM), then clean up.")
@backend_options
@friendly
def down(run, discard_logs, force, **options) -> None:
    """Stop and delete what a run left (processes, containers, Kubernetes objects).

    Logs that were never saved (labctl was killed, or kubectl/compose started
    the lab) are saved into the run folder first, with status and report;
    if saving fails, nothing is deleted. A run whose labctl is still alive is
    refused (exit 2) unless --force.
    """
    from . import lab

    r = _open_run(run)
    options = _options_for(r.record.backend, options)
    say(lab.down(r, discard_logs=discard_logs, force=force,
                 progress=lambda line: say(line, err=True), options=options))


@main.command()
@click.argument("run", type=click.Path())
@backend_options
@friendly
def stacks(run, **options) -> None:
    """Show where every rank of a running lab is, without stopping it.

    Each rank prints all its threads' Python stacks (SIGUSR1, faulthandler) into
    its log; they are saved as stacks/rank-<r>.txt and summarized here.
    """
    from . import lab, report

    r = _open_run(run)
    options = _options_for(r.record.backend, options)
    where = lab.stacks(r, progress=lambda line: say(line, err=True), options=options)
    if not where:
        fail(f"no rank printed a stack (ranks started before labctl could ask, or not Python?); "
             f"see {r.path / 'nodes'}")
    say(report.stacks_table(where, r))


@main.command("trace")
@click.argument("run", type=click.Path())
@click.option("--png", is_flag=True, help="also draw trace-timeline.png (needs matplotlib: the plot extra)")
@friendly
def trace_cmd(run, png) -> None:
    """Every rank's collectives and p2p ops: (re)write trace.json and print per-op totals,
    the stragglers and, after a hang, the stuck collective (docs/trace.md)."""
    from . import trace

    r = _open_run(run)
    summary = trace.merge(r.path, world=r.record.world_size, hostnames=r.hostnames)
    say(trace.text(summary))
    if summary.empty:
        sys.exit(1)
    if png:
        picture = trace.write_timeline(r.path)     # LabError (no matplotlib): one line, exit 1
        if picture is not None:
            click.echo(f"timeline picture: {picture}")


@main.group()
def exercise() -> None:
    """Write a collective yourself (ring all-reduce and more) and have the lab grade it
    on real ranks: values, p2p only, bytes sent, deadlocks, time (docs/exercises.md)."""


@exercise.command("list")
def exercise_list() -> None:
    """The exercises: what each asks you to write."""
    from . import exercise as ex

    click.echo(ex.list_text())
    click.echo("\nStart one: labctl exercise init NAME [FILE]; grade it: labctl exercise check NAME FILE")


@exercise.command("init")
@click.argument("name")
@click.argument("path", required=False)
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
@friendly
def exercise_init(name: str, path: str | None, force: bool) -> None:
    """Write NAME's starter file (default NAME.py): the function to write, its contract, hints."""
    from . import exercise as ex

    written = ex.starter(name, path, force)
    click.echo(f"wrote {written}; fill in {ex.find(name).signature}, then: "
               f"labctl exercise check {name} {written}")


@exercise.command("check")
@click.argument("exercise_name", metavar="NAME")
@click.argument("file")
@click.option("--deadline", type=Seconds(), default=None,
              help="Seconds one call may take before the check calls it a deadlock (default 5).")
@click.option("--seed", type=IntRange(0, 2**31 - 1), default=None, help="Seed of the inputs (default 2024).")
@click.option("--time/--no-time", "time_it", default=True,
              help="Time the function against torch's collective at a large size (default on).")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines, only the grade.")
@lab_options(leave_out=("script", "workloads", "trace"))
@backend_options
@friendly
def exercise_check(exercise_name, file, deadline, seed, time_it, quiet, spec_file, **flags) -> None:
    """Run FILE's function for exercise NAME on the lab (the flags of `labctl up`; default
    2 x 2 local ranks) for world sizes 4, 3 and 2, and print its grade.

    Exit 0 when every check passed, 1 when one failed (or the lab did, or hit its
    --timeout), 2 for bad input (no such file, no such function, a lab an exercise cannot
    use), 130/143/129 when Ctrl-C, SIGTERM or SIGHUP stopped it: as status.json says."""
    from . import exercise as ex

    name = exercise_name
    entry = ex.entry(name, file)
    flag_names = backend_registry.all_options()
    backend_flags = {k: flags.pop(k) for k in list(flags) if k in flag_names}
    settings = ex.settings(deadline, seed, time_it)
    spec = ex.lab_spec([entry], spec_file, specmod.from_flags(flags), settings)
    with ex.held_signals() as signals:      # until the answer is out: it is status.json's
        run, grades = ex.check(spec, [entry], progress=_progress(quiet),
                               options=_options_for(spec.backend, backend_flags), signals=signals)
        said = ex.answer(run, grades)
        try:
            say(ex.text(grades, run))
            if said.passed:
                say(said.line)
            else:
                say(f"error: {said.line}", err=True)
        except OSError:
            pass                            # the terminal is gone (SIGHUP); the grade is in status.json
    if not said.passed:
        sys.exit(said.code)


_SIZE = re.compile(r"^\s*([0-9]+)\s*(b|k|kb|kib|m|mb|mib|g|gb|gib)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "kib": 1024, "kb": 1000, "m": 1 << 20, "mib": 1 << 20,
               "mb": 10 ** 6, "g": 1 << 30, "gib": 1 << 30, "gb": 10 ** 9}


class ByteSize(click.ParamType):
    """A message size: bytes, or with a unit (64KiB, 4MiB, 1MB; K/M/G are binary)."""
    name = "size"

    def convert(self, value, param, ctx):
        m = _SIZE.match(str(value))
        size = int(m.group(1)) * _SIZE_UNITS[(m.group(2) or "").lower()] if m else 0
        if not 1 <= size <= 1 << 40:
            self.fail(f"expected a size in bytes from 1 to 1TiB, with or without a unit "
                      f"(examples: 65536, 64KiB, 4MiB), given {value!r}", param, ctx)
        return size


@main.command()
@click.argument("run", type=click.Path())
@click.option("--world-size", "-n", required=True, type=IntRange(2, specmod.MAX_WORLD),
              help="Ranks to predict for.")
@click.option("--size", "sizes", multiple=True, type=ByteSize(),
              help="Message size (repeatable; e.g. 4MiB). Default: the run's sizes.")
@click.option("--format", "fmt", type=click.Choice(["md", "json", "csv"]), default="md")
@click.option("--link", "link", multiple=True, metavar="[NODE=|A-B=]RATE[,LATENCY]",
              help="Predict over other links: replaces the run's rule of the same scope "
                   "(--link 1gbit: every node; --link 2=10mbit: node 2; --link 0-1=50mbit: a pair).")
@friendly
def predict(run, world_size, sizes, fmt, link) -> None:
    """Expected time of each bench op at another world size, another size, other links.

    Each op's algorithm (the one its backend runs: gloo's, read from its source, or
    NCCL's on paper) is replayed message by message over the lab's links (the run's
    `links:`, its measured pair matrix, or --link), with a per-message overhead and
    the links' efficiency fitted on the run's sweep (docs/network.md): the time, its
    α and β terms, and which dominates.
    """
    from . import report
    from .links import from_flags

    overrides = from_flags(link, specmod.SpecError) if link else None
    say(report.predict(_open_run(run), world_size, list(sizes) or None, fmt, overrides), nl=False)


@main.command()
@click.argument("run_a", type=click.Path())
@click.argument("run_b", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["md", "json", "csv"]), default="md")
@friendly
def compare(run_a, run_b, fmt) -> None:
    """Compare the measurements of two runs (bench: B/A ratio per operation and size)."""
    from . import report

    say(report.compare(_open_run(run_a), _open_run(run_b), fmt), nl=False)


if __name__ == "__main__":
    main()
