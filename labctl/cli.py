"""labctl: run one lab description on local processes, docker compose or Kubernetes.

The CLI stays thin: parse flags, call the library, turn known errors into one
line and an exit code (2: bad lab description, 1: the lab or its backend
failed). Heavy imports (torch, kubernetes) never happen at import time.
"""
from __future__ import annotations

import click

from . import backends as backend_registry
from . import cli_runs, commands
from .clikit import (RUN_ONLY, LabGroup, progress_printer, report_and_exit, spec_and_options,  # noqa: F401
                     backend_options, fail, friendly, lab_options, load_spec, say)
from .commands import EXIT_SPEC, exit_for  # noqa: F401 - labctl.cli.exit_for: the one way errors end


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
@lab_options(leave_out=RUN_ONLY)
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@friendly
def validate(spec_file, script_args, **flags) -> None:
    """Check a lab description; exit 2 with one line when it cannot run."""
    click.echo(commands.summary(load_spec(spec_file, script_args, **flags)))


RENDER_TARGETS = backend_registry.render_targets()


@main.command()
@click.argument("target", type=click.Choice(RENDER_TARGETS))
@lab_options(leave_out=RUN_ONLY)
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

    spec, options = spec_and_options(spec_file, script_args, flags)
    progress = progress_printer(quiet)
    if with_preflight:
        checked = lab.preflight(spec, out=f"{spec.out}-preflight" if spec.out else None,
                                progress=progress, options=options)
        passed, section = commands.preflight_table(checked)
        if not passed:
            say(section)
            fail(f"{commands.preflight_failure(checked)}; the lab was not started", EXIT_SPEC)
        progress(f"preflight passed in {checked.record.seconds or 0:.1f} s ({checked.path})")
    run = lab.up(spec, progress=progress, options=options)
    report_and_exit(run)


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
    spec, options = spec_and_options(spec_file, script_args, flags, notes=False)
    run = lab.preflight(spec, out=spec.out, progress=progress_printer(quiet), options=options)
    passed, section = commands.preflight_table(run)
    say(section)
    if not passed:
        fail(commands.preflight_failure(run), commands.exit_code(run))
    click.echo(f"preflight passed in {run.record.seconds or 0:.1f} s; report: {run.report_path}")


for _command in cli_runs.COMMANDS:
    main.add_command(_command)


if __name__ == "__main__":
    main()
