"""The Backend interface: a backend submits, describes, streams, signals and deletes.

A backend says *how*; the driver (labctl/driver.py) decides *when*: deadlines, the
grace after the first failure, signals and the run's outcome are the driver's, the
way torch elastic's `SimpleElasticAgent._invoke_run` owns the loop and its
subclasses only start, monitor and stop workers. The core owns the run folder and
the one lossless collector (labctl/collect.py); a backend never writes the run
record: it says what the record must hold (`BackendState`) and the core writes it.
Five run verbs, so that a new backend is five answers, not seventeen:

    submit(plan, rundir) -> BackendState   create the nodes (binds the instance);
                               what the run record must hold of them
    describe(within, joins) -> RunView  the nodes now (`within`: wait up to that long
                               first, less when a node may have ended), whether
                               anything of the run exists, the ranks joined
    stream(rundir, strict) -> [NodeOutcome]  every node's log into the run folder through
                               labctl/collect.py; the final outcomes. Raises when a log
                               cannot be saved whole (strict: any that cannot be read):
                               the driver then deletes nothing
    signal(action) -> [note]   Stop(indices, reason), TakeStacks(rundir),
                               BeginFault(fault), EndFault(fault); an action a backend
                               cannot do is refused in one line (the default)
    delete() -> str            remove what is left of the run; one line on what

  Declarations, not run verbs:
    placement(spec, folder)    names, node 0's address, the shared directory (pure)
    preflight(plan)            refuse what cannot work, before anything starts (< 1 s)
    debug_server_at(plan)      where to open the started lab's debug server
  Binding to a run started elsewhere:
    attach(run folder | run id) -> plan | None   a run recorded in a folder (a dead
                               labctl, `labctl down`), or one labctl rendered but did
                               not start, found by its id (its plan rebuilt from the
                               lab description stored in its objects)
    find_runs() -> [run id]    the runs this backend can see (by the run label)

One instance serves one run (`self.run`, a BoundRun), however it was bound.
placement, submit, describe, stream, signal and delete are abstract; the rest
have defaults that do nothing or refuse in one line. A backend's own
command-line settings are a frozen dataclass of `BackendOptions` (its `Options`):
the CLI's flags are generated from it (TorchX's `runopts`, as a dataclass).
"""
from __future__ import annotations

import abc
import enum
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, ClassVar, Union

from ..errors import LabError
from ..faults import Fault
from ..outcome import NodeOutcome
from ..plan import LaunchPlan, Placement
from ..runrecord import Leftover
from ..rundir import RunDir
from ..spec import LabSpec

Progress = Callable[[str], None]


class PreflightError(LabError):
    """A lab that cannot work here, refused before it starts (exit 2, one line)."""
    exit_code = 2


class OptionRefused(LabError):
    """A backend's flag given for another backend (exit 2, one line naming whose it is)."""
    exit_code = 2


class UnknownRun(LabError):
    """No run with that id here (exit 2, one line naming the runs there are)."""
    exit_code = 2

    @classmethod
    def of(cls, run_id: str, where: str, runs: list[str]) -> "UnknownRun":
        known = ", ".join(runs[:20]) + (f" and {len(runs) - 20} more" if len(runs) > 20 else "")
        return cls(f"no run {run_id} {where}; runs there: {known or 'none'} "
                   "(the run id is on the first line of every file `labctl render` wrote)")


class BackendFailure(LabError):
    """The backend saw the lab fail in a way no node exit shows (a pod that can never
    be scheduled, an image that cannot be pulled): the run ends as failed with this message."""


@dataclass(frozen=True)
class BackendOptions:
    """A backend's own settings from the command line; each backend with any declares a
    frozen subclass with one field per flag (`option(help)`: the flag's help; its type,
    from the annotation, is the flag's; None means not given). A backend with none keeps
    this empty one."""


def option(help: str, default: Any = None) -> Any:
    """A field of a backend's options: what its flag's help says, and its default."""
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class BackendState:
    """What the run record must hold of a backend's run, said by the backend and written
    by the core (`driver.keep_state`): status.json's `<backend>` object (local: its
    guards' pids; k8s: namespace, context, selector), whether the local guards write
    the rank logs, what was killed after the ranks ended. None: nothing to write."""
    notes: dict[str, Any] | None = None           # record.backend_state, the same dict shape
    rank_logs_by_guards: bool | None = None
    leftovers: tuple[Leftover, ...] | None = None


@dataclass(frozen=True, eq=False)
class RunView:
    """The bound run as its backend sees it now (`describe`); each part frozen once read.

    `outcomes` (one per plan node), `exists` (does anything of the run still exist)
    and `joined` (ranks that said they joined; None unless asked) are each asked of
    the backend only when read, and kept: the driver's poll reads the outcomes alone
    (one `docker inspect`, one pod list), `labctl down` and `stacks` only whether
    the run exists (containers, objects or processes by its id), the join clock only
    `joined` (a read of the logs). Reading them all on every look would add that cost
    to every poll."""
    read_outcomes: Callable[[], list[NodeOutcome]] = field(repr=False)
    read_exists: Callable[[], bool] = field(default=lambda: False, repr=False)
    read_joined: Callable[[], int | None] = field(default=lambda: None, repr=False)

    @cached_property
    def outcomes(self) -> tuple[NodeOutcome, ...]:
        return tuple(self.read_outcomes())

    @cached_property
    def exists(self) -> bool:
        return bool(self.read_exists())

    @cached_property
    def joined(self) -> int | None:
        return self.read_joined()


# ---- what `signal` asks of a backend -------------------------------------------------
@dataclass(frozen=True)
class Stop:
    """Stop those nodes (SIGTERM, then kill), keeping their logs."""
    indices: tuple[int, ...]
    reason: str


@dataclass(frozen=True)
class TakeStacks:
    """Ask every rank for its Python stacks (all threads) without stopping it; the dumps
    land in the node logs (the driver asks at the deadline, before anything is stopped)."""
    rundir: RunDir


@dataclass(frozen=True)
class BeginFault:
    """Make one fault happen now (kill a rank, freeze a node ...); NotYet when its
    target is not there yet."""
    fault: Fault


@dataclass(frozen=True)
class EndFault:
    """End a fault with a duration (resume a frozen node, reconnect a cut one)."""
    fault: Fault


Action = Union[Stop, TakeStacks, BeginFault, EndFault]


def dispatch(name: str, action: Action, *, stop: Callable[[tuple[int, ...]], None] | None = None,
             stacks: Callable[[], list[str]] | None = None, begin: Callable[[Fault], str] | None = None,
             end: Callable[[Fault], str] | None = None) -> list[str]:
    """A backend's `signal`: `action` to the handler it gives for that kind; the note lines
    (a fault: one line; Stop: none). An action without a handler is refused in one line (a
    note for stacks, a LabError for the others), as before the verbs were one."""
    if isinstance(action, Stop):
        if stop is None:
            raise LabError(f"the {name} backend cannot stop nodes")
        stop(action.indices)
        return []
    if isinstance(action, TakeStacks):
        return stacks() if stacks is not None else [f"the {name} backend cannot take stacks"]
    if isinstance(action, BeginFault):
        if begin is None:
            raise LabError(f"the {name} backend cannot inject faults")
        return [begin(action.fault)]
    if isinstance(action, EndFault):
        if end is None:
            raise LabError(f"the {name} backend cannot end faults")
        return [end(action.fault)]
    raise TypeError(f"not an action: {action!r}")


class Bound(enum.Enum):
    """How a backend instance came to serve its run."""
    STARTED = "started"       # submit(): this instance created the nodes
    FOUND = "found"           # attach(run id): started by kubectl / docker compose, found by id
    ATTACHED = "attached"     # attach(run folder): a labctl that died, `down`


@dataclass(frozen=True)
class BoundRun:
    """The one run an instance serves, fixed when it is bound (no Optional state after)."""
    run_id: str
    spec: LabSpec
    hostnames: dict[int, str]         # node index -> hostname, in the plan's order
    how: Bound
    rundir: RunDir | None = None      # None only while a run found by id has no folder yet

    @classmethod
    def of_plan(cls, plan: LaunchPlan, how: Bound, rundir: RunDir | None = None) -> "BoundRun":
        return cls(plan.run_id, plan.spec, {n.index: n.hostname for n in plan.nodes}, how, rundir)

    @classmethod
    def of_folder(cls, rundir: RunDir, how: Bound = Bound.ATTACHED) -> "BoundRun":
        return cls(rundir.record.run_id, rundir.spec, rundir.hostnames, how, rundir)


class Backend(abc.ABC):
    name: ClassVar[str] = ""
    # This backend's own command-line settings (k8s: --context, --namespace), typed; the
    # instance gets them filled as `self.options`.
    Options: ClassVar[type[BackendOptions]] = BackendOptions
    # Module with files(plan)/text(plan) for `labctl render <name>`, or None.
    renderer: ClassVar[str | None] = None
    poll_interval: ClassVar[float] = 1.0         # the driver's pause between two looks
    # Node logs grow in the run folder while the lab runs (local): the driver splits them
    # per rank as it goes, so the end of a run has only the last bit left to read.
    live_logs: ClassVar[bool] = False
    # Fault kinds `signal(BeginFault)` can do (labctl/faults.py); the spec refuses the others.
    fault_kinds: ClassVar[tuple[str, ...]] = ()
    # Whether `describe(joins=True)` can count the ranks that said they joined (the join fault clock).
    hears_joins: ClassVar[bool] = False

    @classmethod
    def check_spec(cls, spec: LabSpec, source: str) -> LabSpec:
        """This backend's rules on a lab and its own section of it (k8s: `k8s:`), for
        every lab (`labctl render <name>` renders any); SpecError with one line naming
        `source`. Returns the lab, its section normalised. Called by `backends.check_spec`."""
        return spec

    @classmethod
    def links_refusal(cls, spec: LabSpec) -> str | None:
        """Why this backend cannot shape the lab's `links` (labctl/links.py), or None when
        it can; asked only of the lab's own backend (`backends.check_spec`)."""
        return f"the {cls.name} backend cannot shape links"

    @classmethod
    def shared_dir(cls, spec: LabSpec) -> str | None:
        """`Placement.shared_dir` of this lab here (a directory every node sees), known
        without placing it: workloads' rules read it (`check_placement`)."""
        return None

    @classmethod
    def renderer_for(cls, spec: LabSpec) -> str | None:
        """The renderer of this lab: `renderer`, unless the lab asks for another shape
        (k8s: `k8s.kind: jobset` renders one JobSet)."""
        return cls.renderer

    def __init__(self, progress: Progress = lambda line: None,
                 options: BackendOptions | None = None):
        if options is None:
            options = self.Options()
        if type(options) is not self.Options:     # K8sOptions given to local: a bug, said
            raise TypeError(f"the {self.name} backend takes {self.Options.__name__}, "
                            f"given {type(options).__name__}")
        self.progress = progress
        self.options = options
        self._run: BoundRun | None = None
        # What the run record must hold of this run so far (submit's answer, what a stream
        # or a delete adds); the core writes it into the record (`driver.keep_state`).
        self.for_record = BackendState()
        # The core's ear for `tell`: set by the driver before submit, so that what a
        # backend must have on disk before it creates anything is saved then.
        self.on_state: Callable[[BackendState], None] = lambda state: None

    def tell(self, state: BackendState) -> None:
        """Say what the run record must hold *now*, before going on (k8s: the namespace and
        context, before the first object is created, so that a labctl killed while it
        creates them leaves `labctl down` knowing where to look); the core saves it."""
        self.for_record = state
        self.on_state(state)

    # ---- the run this instance serves ------------------------------------------------
    @property
    def bound(self) -> bool:
        return self._run is not None

    @property
    def run(self) -> BoundRun:
        """The bound run; a LabError (never an assert) when nothing is bound yet."""
        if self._run is None:
            raise LabError(f"the {self.name} backend serves no run yet (submit or attach "
                           "binds one)")
        return self._run

    def bind(self, run: BoundRun) -> BoundRun:
        """Serve `run`. A run found by id keeps being served as found when its folder
        is attached afterwards (`labctl collect`): only the folder is added."""
        if run.how is Bound.ATTACHED and self._run is not None and self._run.how is Bound.FOUND \
                and self._run.run_id == run.run_id:
            run = BoundRun(run.run_id, self._run.spec, self._run.hostnames, Bound.FOUND, run.rundir)
        self._run = run
        return run

    # ---- before the run ------------------------------------------------------
    @abc.abstractmethod
    def placement(self, spec: LabSpec, run_folder: Path | None = None) -> Placement:
        """How this backend lays out `spec`'s nodes; `run_folder` is where the run's folder
        will be (known before the plan, so the plan can name what lives in it; None: a
        placement only to look at, nothing of the run's folder in it)."""

    def preflight(self, plan: LaunchPlan) -> None:
        """Raise PreflightError for what cannot work; cheap checks only."""

    # ---- the run ---------------------------------------------------------------
    @abc.abstractmethod
    def submit(self, plan: LaunchPlan, rundir: RunDir) -> BackendState:
        """Create the run's nodes (binding this instance to the run); node logs go into
        `rundir`. Returns what the run record must hold (the core writes it; also
        `self.for_record`, kept as it grows, so a submit that failed half-way is written too)."""

    @abc.abstractmethod
    def describe(self, within: float = 0.0, joins: bool = False) -> RunView:
        """The run now: wait at most `within` seconds first (the driver's pause between
        two looks; a backend that can hear a node end, compose through the engine's
        events, returns then), then a RunView whose parts are read when asked.
        `joins`: count the ranks that said they joined (backends with `hears_joins`;
        else `joined` stays None)."""

    @abc.abstractmethod
    def stream(self, rundir: RunDir, strict: bool = False) -> list[NodeOutcome]:
        """Every node's log into the folder; the final outcomes. `strict`: raise when any
        log cannot be read (`labctl down`, `stacks`: then nothing may be deleted). A backend
        that fetches logs gives labctl/collect.py its sources: the collector writes, checks
        and raises (one line, after every node was tried)."""

    @abc.abstractmethod
    def signal(self, action: Action) -> list[str]:
        """Do `action` (Stop, TakeStacks, BeginFault, EndFault); the note lines on what was
        done (a fault: one line; Stop: none). A backend gives `dispatch` its handlers; an
        action it has none for is refused in one line, as before the verbs were one."""
        return dispatch(self.name, action)

    @abc.abstractmethod
    def delete(self) -> str:
        """Remove what is left of the bound run (nothing bound: nothing to do, "");
        one truthful line on what was removed."""

    def debug_server_at(self, plan: LaunchPlan) -> str | None:
        """Where to open the started lab's debug server (`debug_server`): a URL on this
        machine, or the command that makes one; None when this backend cannot say."""
        return None

    # ---- runs started elsewhere --------------------------------------------------
    def find_runs(self) -> list[str]:
        """Ids of the runs that have objects on this backend (containers, Jobs ...)."""
        raise LabError(f"the {self.name} backend cannot list runs")

    def attach(self, target: RunDir | str) -> LaunchPlan | None:
        """Bind to a run started elsewhere. A run folder (a labctl that died, `labctl
        down`): its plan and where it ran are in the folder; returns None. A run id (a
        run kubectl or docker compose started): returns its plan, rebuilt from the lab
        description in its objects; UnknownRun, naming the runs there are, when nothing
        has that id. What the record must hold of it is then in `self.for_record`."""
        if isinstance(target, str):
            raise LabError(f"the {self.name} backend cannot collect a run it did not start")
        raise LabError(f"the {self.name} backend cannot attach to a run started elsewhere")
