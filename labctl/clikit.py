"""What every labctl command shares: one line and an exit code for every known error
(`friendly`, `fail`, click's own errors through `LabGroup`), what a rank wrote printed as
text (`say`), the lab's flags made from the lab fields' declarations (`lab_options`) and
the backends' (`backend_options`), loading the lab and opening a run folder. Click and
nothing else; labctl/cli.py and labctl/cli_runs.py hold the commands."""
from __future__ import annotations

import functools
import sys
from typing import Any

import click

from . import backends as backend_registry
from . import commands, fields, units
from . import spec as specmod
from .commands import exit_for, stdout_gone, stop_quietly
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
    def __init__(self, read: fields.Seconds | None = None):
        read = read or fields.Seconds()
        super().__init__(read.lo or 0, read.hi or fields.MAX_SECONDS, min_open=read.lo is None)
        self.parse = read.flag_value


class ByteSize(Read, click.ParamType):
    """A message size: bytes, or with a unit (64KiB, 4MiB, 1MB; K/M/G are binary)."""
    name = "size"
    parse = staticmethod(units.message_size)


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


# The lab fields that decide only what labctl does while a lab runs, not what the lab is:
# where its run folder goes, local nodes' working directory, what the live watcher does at
# a hang. `up` and `preflight` take their flags; `validate` and `render` do not (a render
# never reads them; issue 53: their help listed them), though a lab file may hold them.
RUN_ONLY = ("out", "workdir", "on_hang", "stall_window")


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
        kind = Seconds(read)
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


def backend_options(fn):
    """Flags that belong to one backend (k8s: --context, --namespace), generated from the
    backends' typed options (`Backend.Options`, through the registry)."""
    for flag in reversed(list(backend_registry.all_options().values())):
        fn = click.option(f"--{flag.name.replace('_', '-')}", flag.name, type=flag.type,
                          help=f"{flag.help} ({', '.join(flag.backends)} backend).")(fn)
    return fn


def spec_and_options(spec_file, script_args, flags, notes: bool = True):
    """`up`'s and `preflight`'s flags: the lab's, then the chosen backend's own."""
    given = commands.backend_flags(flags)
    spec = load_spec(spec_file, script_args, notes=notes, **flags)
    return spec, backend_registry.options_for(spec.backend, given)


def progress_printer(quiet: bool):
    """Progress lines on stderr; `quiet`: none (and no live view: `printer.quiet`)."""
    def printer(line: str) -> None:
        if not quiet:
            say(line, err=True)
    printer.quiet = quiet           # type: ignore[attr-defined]
    return printer


def report_and_exit(run) -> None:
    """Print the report; exit 0 only if the run passed, else one line on why (as `up`)."""
    from . import report

    try:
        say(report.markdown(run, brief=True))
    except OSError:
        pass                          # the terminal is gone (SIGHUP); the report is in the folder
    ended = commands.ending(run)
    if ended:
        fail(*ended)


def open_run_folder(run: str):
    r, note = commands.open_run(run)
    if note:
        click.echo(f"note: {note}", err=True)
    return r
