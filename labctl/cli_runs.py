"""The commands that read or act on a run folder or a lab already started (collect, logs,
report, down, stacks, trace, predict, compare) and `labctl exercise`: click and nothing
else; labctl/cli.py adds them to `labctl`."""
from __future__ import annotations

import sys

import click

from . import backends as backend_registry
from . import commands, fields
from .errors import Refused
from . import spec as specmod
from .clikit import (ByteSize, IntRange, Seconds, open_run_folder, progress_printer, report_and_exit, backend_options,
                     friendly, lab_options, say)

@click.command()
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
    report_and_exit(run)


@click.command()
@click.argument("run", type=click.Path())
@click.option("--node", type=int, help="Only this node's log.")
@click.option("--rank", type=int, help="Only this rank's log.")
@friendly
def logs(run, node, rank) -> None:
    """Print a run's logs: every node's, or one node's or one rank's."""
    r = open_run_folder(run)
    paths = commands.log_paths(r, node, rank)
    for p in paths:
        if len(paths) > 1:
            click.echo(f"==> {p.relative_to(r.path)} <==")
        for text in commands.text_of(p):
            click.echo(text, nl=False)


@click.command()
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
    r = open_run_folder(run)
    say(commands.report_text(r, fmt), nl=False)
    for path in reportmod.write_files(r, lambda line: say(line, err=True)):
        click.echo(f"plot: {path}", err=True)


@click.command()
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

    r = open_run_folder(run)
    options = backend_registry.options_for(r.record.backend, options)
    say(lab.down(r, discard_logs=discard_logs, force=force,
                 progress=lambda line: say(line, err=True), options=options))


@click.command()
@click.argument("run", type=click.Path())
@backend_options
@friendly
def stacks(run, **options) -> None:
    """Show where every rank of a running lab is, without stopping it.

    Each rank prints all its threads' Python stacks (SIGRTMIN+6, faulthandler) into
    its log; they are saved as stacks/rank-<r>.txt and summarized here.
    """
    r = open_run_folder(run)
    options = backend_registry.options_for(r.record.backend, options)
    say(commands.stacks_text(r, progress=lambda line: say(line, err=True), options=options))


@click.command()
@click.argument("run", type=click.Path(), required=False)
@click.option("--backend", "backend_name", type=click.Choice(backend_registry.collect_targets()),
              help="With --run-id: a lab `docker compose` or `kubectl` started (as `labctl collect`).")
@click.option("--run-id", help="The run id of a lab started outside labctl (with --backend).")
@backend_options
@friendly
def watch(run, backend_name, run_id, **options) -> None:
    """Watch a running lab live: every rank's op count, the op it is in and for how long,
    and a hang named within seconds of its start (who, what, where), without stopping it.

    RUN: a lab another `labctl up` runs (another terminal); what it names goes to the
    terminal and to <run>/live/watch-<pid>/watch.json. --backend B --run-id ID: a lab
    `docker compose` or `kubectl` started from a rendered file; watched until it ends, then
    collected into a run folder as `labctl collect` does (nothing is stopped). Exit 0 when
    the lab ended (or Ctrl-C) with no hang named, 1 when it named one.
    """
    from . import lab
    from .rundir import RunDir

    if (run is None) == (backend_name is None or run_id is None):
        raise Refused("give a run folder, or --backend and --run-id of a lab started outside labctl "
                      "(example: labctl watch runs/<run> or labctl watch --backend compose --run-id ID)")
    if run is None:
        options = backend_registry.options_for(backend_name, options)
        folder = lab.collect(backend_name, run_id, wait=True, progress=lambda line: say(line, err=True),
                             options=options)
        if folder.record.live is not None and folder.record.live.resumed_at is None:
            raise SystemExit(1)
        return
    try:
        r = RunDir.open(run)
    except (OSError, ValueError) as exc:      # not a run folder, a damaged status.json
        raise Refused(str(exc)) from None
    options = backend_registry.options_for(r.record.backend, options)
    named = lab.watch(r, progress=lambda line: say(line, err=True), options=options)
    if named:
        raise SystemExit(1)


@click.command("trace")
@click.argument("run", type=click.Path())
@click.option("--png", is_flag=True, help="also draw trace-timeline.png (needs matplotlib: the plot extra)")
@friendly
def trace_cmd(run, png) -> None:
    """Every rank's collectives and p2p ops: (re)write trace.json and print per-op totals,
    the stragglers and, after a hang, the stuck collective (docs/trace.md)."""
    from . import trace

    r = open_run_folder(run)
    summary = trace.merge(r.path, world=r.record.world_size, hostnames=r.hostnames)
    say(trace.text(summary))
    if summary.empty:
        sys.exit(1)
    if png:
        picture = trace.write_timeline(r.path)     # LabError (no matplotlib): one line, exit 1
        if picture is not None:
            click.echo(f"timeline picture: {picture}")


@click.group()
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
        run, grades = ex.check(spec, [entry], progress=progress_printer(quiet),
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


@click.command()
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
    α and β terms, and which dominates. On a parallelism pattern's run (fsdp, tp, pp,
    cp, ep, mesh): each variant's step at N ranks, its ops scaled by the pattern's rule
    and replayed over the run's links or --link, beside the pattern's formula
    (docs/patterns.md).
    """
    from . import report

    overrides = specmod.LinksReader().from_flags(link) if link else None
    say(report.predict(open_run_folder(run), world_size, list(sizes) or None, fmt, overrides), nl=False)


@click.command()
@click.argument("run_a", type=click.Path())
@click.argument("run_b", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["md", "json", "csv"]), default="md")
@friendly
def compare(run_a, run_b, fmt) -> None:
    """Compare the measurements of two runs (bench: B/A ratio per operation and size)."""
    from . import report

    say(report.compare(open_run_folder(run_a), open_run_folder(run_b), fmt), nl=False)


@click.command()
@click.argument("path", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              help="json: the culprit, op, line, group and the lab's diagnosis as one object.")
@friendly
def diagnose(path, fmt) -> None:
    """Who is to blame, the call and its line, from torch's own Flight Recorder dumps.

    PATH is a folder of one job's dumps (TORCH_FR_DUMP_TEMP_FILE=<prefix> writes
    <prefix><rank>; _dump_fr_trace / _dump_nccl_trace pickles, gloo or NCCL, with or
    without stack traces; _dump_fr_trace_json and the debug server's JSON), one rank's
    dump, or a lab run folder (its own diagnosis, and its torch dumps if it holds
    any). The lab's matcher names the rank the others wait for or the one whose call
    differs, the call, the group and the line (docs/diagnosis.md, "Diagnosing torch's
    own dumps"). A pickle is never run: one that names any class or function is
    refused. Exit 0 when the dumps were read, 2 when PATH holds none."""
    from . import diagnose as diagnosis

    say(diagnosis.diagnose(path, fmt), nl=False)


COMMANDS = (collect, logs, report, down, stacks, watch, trace_cmd, exercise, predict, compare, diagnose)
