"""labctl: run one lab description on local processes, docker compose or Kubernetes.

The CLI stays thin: parse flags, call the library, turn known errors into one
line and an exit code (2: bad lab description, 1: the lab or its backend
failed). Heavy imports (torch, kubernetes) never happen at import time.
"""
from __future__ import annotations

import functools
import sys
from typing import Any

import click

from . import backends as backend_registry
from . import commands, fields
from . import spec as specmod
from .commands import EXIT_SPEC, exit_for, stdout_gone, stop_quietly
from .errors import Interrupted, LabError
from workloads._protocol import one_line, visible


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


class Read:
    """A flag whose value a spec reader reads (`parse`: the lab file's rule and bounds);
    a bad value is its line (`--nodes: expected an integer between 1 and 4096, given '-3'`)."""
    parse: Any

    def convert(self, value, param, ctx):
        try:
            return self.parse(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class IntRange(Read, click.IntRange):
    def __init__(self, read: fields.Int):
        super().__init__(read.lo, read.hi)
        self.parse = read.flag_value


class Seconds(Read, click.FloatRange):
    def __init__(self):
        super().__init__(0, fields.MAX_SECONDS, min_open=True)
        self.parse = fields.Seconds().flag_value


class ByteSize(Read, click.ParamType):
    """A message size: bytes, or with a unit (64KiB, 4MiB, 1MB; K/M/G are binary)."""
    name = "size"
    parse = staticmethod(specmod.message_size)


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
    for key, decl in reversed(specmod.lab_fields()):
        if decl.flag and key not in leave_out:
            fn = _lab_flag(key, decl)(fn)
    return click.option("-f", "--file", "spec_file", type=click.Path(dir_okay=False),
                        help="Lab description (YAML). Default: built-in 2x2 gloo lab.")(fn)


def _lab_flag(key: str, decl: fields.LabField):
    """A lab field's flag, from its declaration (`spec.lab_field`): its reader's bounds
    are the flag's type."""
    read = decl.read
    if decl.many:
        return click.option(decl.flag, key, multiple=True, help=decl.help)
    if isinstance(read, fields.Bool):
        switch = {} if "/" in decl.flag else {"is_flag": True}
        return click.option(decl.flag, key, default=None, help=decl.help, **switch)
    if isinstance(read, fields.Int):
        kind: Any = IntRange(read)
    elif isinstance(read, fields.Seconds):
        kind = Seconds()
    elif isinstance(read, fields.Choice):
        kind = Choice(read.choices if read.choices is not None else backend_registry.NAMES)
    elif isinstance(read, fields.Folder):
        kind = click.Path(file_okay=False)
    else:
        kind = str
    return click.option(decl.flag, key, type=kind, help=decl.help)


def load_spec(spec_file: str | None, script_args: tuple[str, ...] = (), check_out: bool = True,
              notes: bool = True, **flags: Any) -> specmod.LabSpec:
    """The lab from its file and flags (`commands.load_lab`), a `note:` line for each
    setting that cannot act (with `notes`)."""
    return commands.load_lab(spec_file, script_args, check_out,
                             note=(lambda n: click.echo(f"note: {n}", err=True)) if notes else None, **flags)


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
    commands.write_starter(path, name, force)
    click.echo(f"wrote {path}; run it with: labctl up -f {path}")


@main.command()
@lab_options
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@friendly
def validate(spec_file, script_args, **flags) -> None:
    """Check a lab description; exit 2 with one line when it cannot run."""
    click.echo(commands.summary(load_spec(spec_file, script_args, **flags)))


RENDER_TARGETS = backend_registry.render_targets()


def backend_options(fn):
    """Flags that belong to one backend (k8s: --context, --namespace), generated from the
    backends' typed options (`Backend.Options`, through the registry)."""
    for flag in reversed(list(backend_registry.all_options().values())):
        fn = click.option(f"--{flag.name.replace('_', '-')}", flag.name, type=flag.type,
                          help=f"{flag.help} ({', '.join(flag.backends)} backend).")(fn)
    return fn


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
    if target != "plan":
        flags["backend"] = target
    spec = load_spec(spec_file, script_args, check_out=False, **flags)
    text, hint = commands.render(target, spec, run_id, output_dir,
                                 wrote=lambda path: click.echo(f"wrote {path}", err=True))
    if text is not None:
        click.echo(text, nl=False)
    if hint:
        click.echo(hint, err=True)


def _spec_and_options(spec_file, script_args, flags, notes: bool = True):
    """`up`'s and `preflight`'s flags: the lab's, then the chosen backend's own."""
    given = commands.backend_flags(flags)
    spec = load_spec(spec_file, script_args, notes=notes, **flags)
    return spec, backend_registry.options_for(spec.backend, given)


def _progress(quiet: bool):
    return (lambda line: None) if quiet else (lambda line: say(line, err=True))


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
        passed, section = commands.preflight_table(checked)
        if not passed:
            say(section)
            fail(f"{commands.preflight_failure(checked)}; the lab was not started", EXIT_SPEC)
        progress(f"preflight passed in {checked.record.seconds or 0:.1f} s ({checked.path})")
    run = lab.up(spec, progress=progress, options=options)
    _report_and_exit(run)


def _report_and_exit(run) -> None:
    """Print the report; exit 0 only if the run passed, else one line on why (as `up`)."""
    from . import report

    try:
        say(report.markdown(run, brief=True))
    except OSError:
        pass                          # the terminal is gone (SIGHUP); the report is in the folder
    ended = commands.ending(run)
    if ended:
        fail(*ended)


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

    # no notes: the preflight runs its own lab of these nodes (direct, its workload)
    spec, options = _spec_and_options(spec_file, script_args, flags, notes=False)
    run = lab.preflight(spec, out=spec.out, progress=_progress(quiet), options=options)
    passed, section = commands.preflight_table(run)
    say(section)
    if not passed:
        fail(commands.preflight_failure(run), commands.exit_code(run))
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

    options = backend_registry.options_for(backend_name, options)
    run = lab.collect(backend_name, run_id, out=out, wait=not no_wait, timeout=timeout,
                      delete=delete, progress=lambda line: say(line, err=True), options=options)
    _report_and_exit(run)


def _open_run(run: str):
    r, note = commands.open_run(run)
    if note:
        click.echo(f"note: {note}", err=True)
    return r


@main.command()
@click.argument("run", type=click.Path())
@click.option("--node", type=int, help="Only this node's log.")
@click.option("--rank", type=int, help="Only this rank's log.")
@friendly
def logs(run, node, rank) -> None:
    """Print a run's logs: every node's, or one node's or one rank's."""
    r = _open_run(run)
    paths = commands.log_paths(r, node, rank)
    for p in paths:
        if len(paths) > 1:
            click.echo(f"==> {p.relative_to(r.path)} <==")
        for text in commands.text_of(p):
            click.echo(text, nl=False)


@main.command()
@click.argument("run", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["md", "json", "csv", "html"]), default="md",
              help="html: (re)write the run's page, RUN/report.html, and print its path.")
@friendly
def report(run, fmt) -> None:
    """Print a run's report (tables; bench runs also write PNG plots), or write its page."""
    from . import report as reportmod

    if fmt == "html":                 # the page is made from whatever the folder holds
        page, problems = commands.write_page(run)
        for problem in problems:
            say(f"note: {problem}", err=True)
        click.echo(str(page))
        return
    r = _open_run(run)
    say(commands.report_text(r, fmt), nl=False)
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
    options = backend_registry.options_for(r.record.backend, options)
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
    r = _open_run(run)
    options = backend_registry.options_for(r.record.backend, options)
    say(commands.stacks_text(r, progress=lambda line: say(line, err=True), options=options))


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
@click.option("--seed", type=IntRange(fields.Int(0, 2**31 - 1)), default=None, help="Seed of the inputs (default 2024).")
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
    backend_flags = commands.backend_flags(flags)
    settings = ex.settings(deadline, seed, time_it)
    spec = ex.lab_spec([entry], spec_file, specmod.from_flags(flags), settings)
    with ex.held_signals() as signals:      # until the answer is out: it is status.json's
        run, grades = ex.check(spec, [entry], progress=_progress(quiet),
                               options=backend_registry.options_for(spec.backend, backend_flags), signals=signals)
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


@main.command()
@click.argument("run", type=click.Path())
@click.option("--world-size", "-n", required=True, type=IntRange(fields.Int(2, specmod.MAX_WORLD)),
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

    overrides = specmod.LinksReader().from_flags(link) if link else None
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
