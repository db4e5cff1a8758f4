"""labctl: run one lab description on local processes, docker compose or Kubernetes.

The CLI stays thin: parse flags, call the library, turn known errors into one
line and an exit code (2: bad lab description, 1: the lab or its backend
failed). Heavy imports (torch, kubernetes) never happen at import time.
"""
from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

import click

from . import backends as backend_registry
from . import spec as specmod
from .errors import LabError

EXIT_SPEC = 2


def fail(message: str, code: int = 1) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def friendly(fn):
    """Known errors → one line on stderr and an exit code; never a traceback."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except specmod.SpecError as exc:
            fail(str(exc), EXIT_SPEC)
        except LabError as exc:
            fail(str(exc), exc.exit_code)
        except FileNotFoundError as exc:
            fail(str(exc).strip("'\""), 1)
        except OSError as exc:          # permissions, a full disk, a read-only folder ...
            where = f"{exc.filename}: " if exc.filename else ""
            fail(f"{where}{exc.strerror or exc}", 1)
        except KeyboardInterrupt:
            fail("interrupted", 130)
    return wrapper


def lab_options(fn):
    """The flags shared by `up`, `render` and `validate`; each overrides lab.yaml."""
    options = [
        click.option("-f", "--file", "spec_file", type=click.Path(dir_okay=False),
                     help="Lab description (YAML). Default: built-in 2x2 gloo lab."),
        click.option("--name", help="Lab name (DNS-1123 label)."),
        click.option("--backend", help="Where it runs: " + " | ".join(backend_registry.NAMES) + "."),
        click.option("--nodes", help="Number of nodes."),
        click.option("--nproc-per-node", help="Worker processes per node."),
        click.option("--workload", "workloads", multiple=True,
                     help="Workload to run (repeatable; comma lists work too)."),
        click.option("--script", type=str, help="Your own script, run on every node: --script train.py -- ARGS"),
        click.option("--launcher", help="torchrun (c10d rendezvous) | direct (env:// per worker)."),
        click.option("--dist-backend", help="gloo | nccl | auto."),
        click.option("--init-method", help="How workers join: env | tcp (node 0, own port) | file (shared dir)."),
        click.option("--replicas", help="Independent torchrun jobs sharing one replica store (default 1)."),
        click.option("--timeout", help="Seconds before the whole lab is stopped."),
        click.option("--join-timeout", help="Seconds the rendezvous waits for all nodes."),
        click.option("--rdzv-port", help="Rendezvous / MASTER_PORT (default: free port locally, 29500 in containers)."),
        click.option("--image", help="Container image (compose, k8s)."),
        click.option("--env", "env", multiple=True, help="Extra environment KEY=VALUE for every node (repeatable)."),
        click.option("--out", type=click.Path(file_okay=False), help="Run folder (default runs/<lab>-<stamp>)."),
        click.option("--workdir", help="Local nodes' working directory: node (work/node-<i>/ in the run folder) | invoking."),
        click.option("--max-restarts", help="Elastic: times torchrun restarts a node's workers after a failure (default 0)."),
        click.option("--min-nodes", help="Elastic: the fewest nodes the lab goes on with (torchrun --nnodes MIN:nodes; default: nodes)."),
        click.option("--pg-timeout", help="Seconds a collective waits for its peers (init_process_group timeout; LAB_PG_TIMEOUT)."),
        click.option("--debug", is_flag=True, default=None,
                     help="TORCH_DISTRIBUTED_DEBUG=DETAIL, TORCH_CPP_LOG_LEVEL=INFO (and NCCL_DEBUG=INFO for nccl)."),
        click.option("--fault", "faults", multiple=True,
                     help="Inject a fault (repeatable): kill-rank:R@T, kill-node:N@T, stop-node:N@T+D, "
                          "partition:N@T+D, delay:N=MS (seconds after every node started)."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def load_spec(spec_file: str | None, script_args: tuple[str, ...] = (), **flags: Any) -> specmod.LabSpec:
    overrides: dict[str, Any] = {k: v for k, v in flags.items() if v not in (None, ())}
    if "workloads" in overrides:
        overrides["workloads"] = [w for item in overrides["workloads"]
                                  for w in item.split(",") if w]
    if "env" in overrides:
        env = {}
        for item in overrides["env"]:
            key, sep, value = item.partition("=")
            if not sep:
                raise specmod.SpecError(f"--env: expected KEY=VALUE, given {item!r}")
            env[key] = value
        overrides["env"] = env
    if script_args:
        overrides["script_args"] = list(script_args)
    return backend_registry.load(spec_file, overrides)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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
               + (f"; faults: {', '.join(spec.faults)}" if spec.faults else ""))


RENDER_TARGETS = backend_registry.render_targets()


def backend_options(fn):
    """Flags that belong to one backend (k8s: --context, --namespace), from the registry."""
    for option, (help_text, names) in reversed(list(backend_registry.all_options().items())):
        fn = click.option(f"--{option.replace('_', '-')}", option,
                          help=f"{help_text} ({', '.join(names)} backend).")(fn)
    return fn


def _options_for(backend: str, given: dict[str, Any]) -> dict[str, Any]:
    """The backend flags given on the command line; one that does not apply is exit 2."""
    given = {k: v for k, v in given.items() if v is not None}
    wrong = [k for k in given if k not in backend_registry.backend_class(backend).options]
    if wrong:
        owners = backend_registry.all_options()[wrong[0]][1]
        fail(f"--{wrong[0].replace('_', '-')} applies to the {', '.join(owners)} backend, "
             f"not {backend}", EXIT_SPEC)
    return given


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
    from . import lab, render as renderers

    if target != "plan":
        flags["backend"] = target
    spec = load_spec(spec_file, script_args, **flags)
    the_plan = lab.make_plan(spec, run_id=run_id)
    if output_dir:
        out = Path(output_dir)
        out.mkdir(parents=True, exist_ok=True)
        for name, text in renderers.files(target, the_plan).items():
            (out / name).write_text(text)
            click.echo(f"wrote {out / name}", err=True)
    else:
        click.echo(renderers.text(target, the_plan), nl=False)
    if target in backend_registry.collect_targets():
        click.echo(f"run id {the_plan.run_id}; once started: labctl collect --backend {target} "
                   f"--run-id {the_plan.run_id}", err=True)


def _spec_and_options(spec_file, script_args, flags) -> tuple[specmod.LabSpec, dict[str, Any]]:
    """`up`'s and `preflight`'s flags: the lab's, then the chosen backend's own."""
    backend_flags = {k: flags.pop(k) for k in list(flags) if k in backend_registry.all_options()}
    spec = load_spec(spec_file, script_args, **flags)
    return spec, _options_for(spec.backend, backend_flags)


def _progress(quiet: bool):
    return (lambda line: None) if quiet else (lambda line: click.echo(line, err=True))


def _failure_line(run, what: str = "lab") -> str:
    """`lab failed: <who failed first and why>; failed rank(s): ...; logs in <folder>`."""
    from . import report

    first, failed = run.meta.get("first_failure"), run.meta.get("failed_ranks") or []
    who = f": {report.describe_failure(first)}" if first else (
        f": {run.meta['message']}" if run.meta.get("message") else "")
    if failed:
        who += f"; failed rank(s): {', '.join(map(str, failed))}"
    return f"{what} {run.meta['state']}{who}; logs in {run.path}"


def _preflight_table(run) -> tuple[bool, str]:
    """(passed, its table): the preflight workload's section of the report."""
    from . import lab, report

    section = report.hook(lab.PREFLIGHT).markdown(run.results()) or "no preflight check reported"
    silent = _silent_nodes(run)
    if silent:
        section += "\n\n" + "\n".join(f"- node {i}: no check reported (never started, or died "
                                      f"first): {run.node_log(i)}" for i in silent)
    return run.meta["state"] == "passed", section


def _silent_nodes(run) -> list[int]:
    """Nodes of the preflight lab from which no check came back."""
    heard = {r.get("node") for r in run.results() if r.get("workload") == "preflight"}
    return [n["index"] for n in run.plan["nodes"] if n["index"] not in heard]


def _preflight_failure(run) -> str:
    """`preflight failed: dns (node 1 -> node 0), port (...); logs in <folder>`: the
    failed checks by name; the first failing rank when no check could say."""
    from . import lab, report

    failed: dict[str, list[str]] = {}
    for row in report.hook(lab.PREFLIGHT).rows(run.results()):
        if not row["ok"]:
            failed.setdefault(row["check"], []).append(row["nodes"])
    silent = _silent_nodes(run)
    if silent:
        failed["no check reported"] = [f"node {i}" for i in silent]
    if not failed:
        return _failure_line(run, "preflight")
    named = "; ".join(f"{check} ({', '.join(where)})" for check, where in failed.items())
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
                                progress=progress, **options)
        passed, section = _preflight_table(checked)
        if not passed:
            click.echo(section)
            fail(f"{_preflight_failure(checked)}; the lab was not started", EXIT_SPEC)
        progress(f"preflight passed in {checked.meta.get('seconds', 0):.1f} s ({checked.path})")
    run = lab.up(spec, progress=progress, **options)
    _report_and_exit(run)


def _report_and_exit(run) -> None:
    """Print the report; exit 0 only if the run passed, else one line on why (as `up`)."""
    from . import report
    from .outcome import INTERRUPT_EXIT

    try:
        click.echo(report.markdown(run))
    except OSError:
        pass                          # the terminal is gone (SIGHUP); the report is in the folder
    if run.meta["state"] != "passed":
        fail(_failure_line(run), INTERRUPT_EXIT.get(run.meta.get("signal") or "", 1))


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

    spec, options = _spec_and_options(spec_file, script_args, flags)
    run = lab.preflight(spec, out=spec.out, progress=_progress(quiet), **options)
    passed, section = _preflight_table(run)
    click.echo(section)
    if not passed:
        fail(_preflight_failure(run), INTERRUPT_EXIT.get(run.meta.get("signal") or "", 1))
    click.echo(f"preflight passed in {run.meta.get('seconds', 0):.1f} s; report: {run.path / 'report.md'}")


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
                      delete=delete, progress=lambda line: click.echo(line, err=True), **options)
    _report_and_exit(run)


def _open_run(run: str):
    from .rundir import RunDir

    r = RunDir.open(run)
    if r.controller_gone():
        click.echo(f"note: run {r.meta.get('run_id')} is marked running but its labctl "
                   f"(pid {r.meta['controller']['pid']}) is gone: abandoned; "
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
        click.echo(p.read_text(errors="replace"), nl=False)


@main.command()
@click.argument("run", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["md", "json", "csv"]), default="md")
@friendly
def report(run, fmt) -> None:
    """Print a run's report (tables; bench runs also write PNG plots)."""
    from . import report as reportmod

    r = _open_run(run)
    click.echo(reportmod.render(r, fmt), nl=False)
    for path in reportmod.write_files(r, lambda line: click.echo(line, err=True)):
        click.echo(f"plot: {path}", err=True)


@main.command()
@click.argument("run", type=click.Path())
@click.option("--discard-logs", is_flag=True,
              help="Delete without saving the logs of nodes that are still there.")
@backend_options
@friendly
def down(run, discard_logs, **options) -> None:
    """Stop and delete what a run left (processes, containers, Kubernetes objects).

    Logs that were never saved (labctl was killed, or kubectl/compose started
    the lab) are saved into the run folder first, with status and report;
    if saving fails, nothing is deleted.
    """
    from . import lab

    r = _open_run(run)
    options = _options_for(r.meta["backend"], options)
    click.echo(lab.down(r, discard_logs=discard_logs,
                        progress=lambda line: click.echo(line, err=True), **options))


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
    options = _options_for(r.meta["backend"], options)
    where = lab.stacks(r, progress=lambda line: click.echo(line, err=True), **options)
    if not where:
        fail(f"no rank printed a stack (ranks started before labctl could ask, or not Python?); "
             f"see {r.path / 'nodes'}")
    click.echo(report.stacks_table(where, r))


@main.command()
@click.argument("run_a", type=click.Path())
@click.argument("run_b", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["md", "json", "csv"]), default="md")
@friendly
def compare(run_a, run_b, fmt) -> None:
    """Compare the measurements of two runs (bench: B/A ratio per operation and size)."""
    from . import report

    click.echo(report.compare(_open_run(run_a), _open_run(run_b), fmt), nl=False)


if __name__ == "__main__":
    main()
