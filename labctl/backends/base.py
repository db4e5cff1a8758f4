"""The Backend interface: how to place, start, poll, stop, collect and delete nodes.

A backend never decides *when*: deadlines, the grace after the first failure,
signals and the run's outcome belong to the driver (labctl/driver.py), the
way torch elastic's `SimpleElasticAgent._invoke_run` owns the loop and its
subclasses only start, monitor and stop workers. One instance serves one run
(`labctl up`) or one attach (`labctl collect`, `labctl down`).

    placement(spec, folder)    names, node 0's address, the shared directory on this
                               backend (pure; `folder`: the run folder the run will get)
    preflight(plan)            refuse what cannot work, before anything starts (< 1 s)

  Bind the instance to one run (`self.run`, a BoundRun), one of three ways:
    start(plan, rundir)        create the nodes; node logs go into the run folder
    attach_by_id(run_id)       find a run labctl rendered but did not start (kubectl,
                               docker compose) by its id -> its LaunchPlan, rebuilt from
                               the lab description the renderer stored in its objects
    attach(rundir)             a run recorded in a folder (a dead labctl, `labctl down`)
    find_runs() -> [run id]    the runs this backend can see (by the run label)

  Then, whichever way it was bound:
    alive() -> bool            does anything of the run still exist
    poll() -> [NodeOutcome]    one per plan node, never blocking for long
    wait(seconds)              between two polls: sleep, or return as soon as a node may
                               have ended (an event stream), so the end is seen at once
    stop(indices, reason)      stop those nodes (SIGTERM, then kill), keep their logs
    collect(rundir, strict)    write every node's log into the run folder; final outcomes.
                               Raise when a log cannot be saved whole (strict: any log
                               that cannot be read): the driver then deletes nothing (the
                               state is error), `labctl down` saves it first
    delete() -> str            remove what is left of the run; one line on what was removed

Every backend must have placement, start, poll, stop, collect and delete (abstract
here); the rest have defaults that do nothing or refuse in one line. A backend's own
command-line settings are a frozen dataclass of `BackendOptions` (its `Options`), so
they are declared once, typed: the CLI's flags are generated from it and the instance
gets the filled object as `self.options` (TorchX's `runopts`, as a dataclass).
"""
from __future__ import annotations

import abc
import enum
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar

from ..errors import LabError
from ..faults import Fault
from ..outcome import NodeOutcome
from ..plan import LaunchPlan, Placement
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


class Bound(enum.Enum):
    """How a backend instance came to serve its run."""
    STARTED = "started"       # start(): this instance created the nodes
    FOUND = "found"           # attach_by_id(): started by kubectl / docker compose, found by id
    ATTACHED = "attached"     # attach(): recorded in a run folder (a labctl that died, `down`)


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
    poll_interval: ClassVar[float] = 1.0
    # Node logs grow in the run folder while the lab runs (local): the driver splits them
    # per rank as it goes, so the end of a run has only the last bit left to read.
    live_logs: ClassVar[bool] = False
    # Fault kinds `inject` can do (labctl/faults.py); the spec refuses the others.
    fault_kinds: ClassVar[tuple[str, ...]] = ()
    # Whether `joined` can count the ranks that said they joined (the join fault clock).
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

    # ---- the run this instance serves ------------------------------------------------
    @property
    def bound(self) -> bool:
        return self._run is not None

    @property
    def run(self) -> BoundRun:
        """The bound run; a LabError (never an assert) when nothing is bound yet."""
        if self._run is None:
            raise LabError(f"the {self.name} backend serves no run yet (start, attach or "
                           "attach_by_id binds one)")
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
    def start(self, plan: LaunchPlan, rundir: RunDir) -> None:
        """Create the run's nodes (bind this instance to the run); node logs go into `rundir`."""

    @abc.abstractmethod
    def poll(self) -> list[NodeOutcome]:
        """One outcome per plan node, as they are now; never blocks for long."""

    def wait(self, seconds: float) -> None:
        """Until the next poll (the driver's loop): at most `seconds`; a backend that can
        hear a node end (compose: the engine's events) returns then."""
        time.sleep(seconds)

    def joined(self) -> int:
        """How many ranks have said they joined their process group so far (the
        JOINED_MARKER lines in the nodes' output): the join fault clock starts when all
        have. Only for backends with `hears_joins`."""
        raise LabError(f"the {self.name} backend cannot hear the ranks join")

    @abc.abstractmethod
    def stop(self, indices: list[int], reason: str) -> None:
        """Stop those nodes (SIGTERM, then kill), keeping their logs."""

    @abc.abstractmethod
    def collect(self, rundir: RunDir, strict: bool = False) -> list[NodeOutcome]:
        """Every node's log into the folder; the final outcomes. `strict`: raise when any
        log cannot be read (`labctl down`, `stacks`: then nothing may be deleted). A backend
        that fetches logs gives labctl/collect.py its sources: the collector writes, checks
        and raises (one line, after every node was tried)."""

    @abc.abstractmethod
    def delete(self) -> str:
        """Remove what is left of the bound run (nothing bound: nothing to do, "");
        one truthful line on what was removed."""

    # ---- the failure lab (optional) ------------------------------------------------
    def dump_stacks(self, rundir: RunDir) -> list[str]:
        """Ask every rank for its Python stacks (all threads) without stopping it; the
        driver calls this at the deadline before anything is stopped. Returns notes."""
        return [f"the {self.name} backend cannot take stacks"]

    def debug_server_at(self, plan: LaunchPlan) -> str | None:
        """Where to open the started lab's debug server (`debug_server`): a URL on this
        machine, or the command that makes one; None when this backend cannot say."""
        return None

    def inject(self, fault: Fault) -> str:
        """Make one fault happen now (kill a rank, freeze a node ...); one line on what was done."""
        raise LabError(f"the {self.name} backend cannot inject faults")

    def heal(self, fault: Fault) -> str:
        """End a fault with a duration (resume a frozen node, reconnect a cut one)."""
        raise LabError(f"the {self.name} backend cannot end faults")

    # ---- runs started elsewhere --------------------------------------------------
    def find_runs(self) -> list[str]:
        """Ids of the runs that have objects on this backend (containers, Jobs ...)."""
        raise LabError(f"the {self.name} backend cannot list runs")

    def attach_by_id(self, run_id: str) -> LaunchPlan:
        """Bind to the run `run_id` (started by kubectl, docker compose or a labctl that
        died) and return its plan, rebuilt from the lab description in its objects.
        Raise UnknownRun, naming the runs there are, when nothing has that id."""
        raise LabError(f"the {self.name} backend cannot collect a run it did not start")

    def attach(self, rundir: RunDir) -> None:
        """Bind to an existing run (its plan and where it ran are in the folder)."""
        raise LabError(f"the {self.name} backend cannot attach to a run started elsewhere")

    def alive(self) -> bool:
        """Whether any node (or object) of the bound run still exists."""
        return False
