"""Compose backend: every node is a container of one docker compose project.

`submit` renders the plan (render.py beside this module) and starts the project;
`describe` reads every container's state (waiting on the engine's events);
`signal(Stop)` stops containers; `stream` copies each node's log into the run
folder; `delete` is `docker compose down -v`. The driver calls them in that
order, always: logs before teardown. Only
the docker CLI is used (no Python docker lib). The compose project is named
after the run id, and every container and network carries the run label, so
a run started by `docker compose up` can be attached to (collect, down).
"""
from __future__ import annotations

import datetime as _dt
import functools
import json
import os
import select
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ...collect import ProcessSource, Tally, last_line as _last_line, read_by_processes, run_all
from ...errors import LabError
from ...faults import Fault, NotYet
from ...logs import joins_in
from ...outcome import NodeOutcome, NodeState, from_exit_code
from ...plan import LaunchPlan, Placement, plan as make_plan
from ...rendered import SPEC_KEY
from ...rundir import RunDir
from ...spec import DEFAULT_CUDA_IMAGE, LabSpec
from .. import spec_from_stored
from ..base import (Action, Backend, BackendState, Bound, BoundRun, PreflightError, RunView,
                    UnknownRun, dispatch)
from ..containers import container_placement, container_shared_dir
from ..runfolder import local_debug_server_dir, local_records_dir
from . import render as render_compose

STOP_TIMEOUT_S = 5         # docker stop: SIGTERM, then SIGKILL after this many seconds
CLI_TIMEOUT_S = 120.0      # any single docker/compose call
ASK_AT_LEAST_S = 10.0      # a poll asks the engine this often even when no event came
LOGS_TIMEOUT_S = 900.0     # one node's whole log (hundreds of MB on a loaded machine)
DOCKER_MISSING = "docker not found on PATH (install: bash scripts/ensure-docker.sh)"


def _cli(argv: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
    """Run a docker/compose CLI call in a session of its own: a Ctrl-C at the terminal
    goes to labctl's process group only, and labctl decides (a `docker logs` that
    dies with labctl's Ctrl-C would lose the log). When labctl gives up on the call
    (a signal raising in labctl, the timeout), subprocess.run kills it."""
    return subprocess.run(argv, timeout=timeout, stdin=subprocess.DEVNULL,
                          start_new_session=True, **kwargs)


@functools.cache
def compose_command() -> tuple[str, ...]:
    """`docker compose` (v2 plugin) or a `docker-compose` v2 binary, whichever works;
    found once per process."""
    return _find_compose()


def forget_compose() -> None:
    """Look Compose up again at the next call (PATH changed: tests)."""
    compose_command.cache_clear()


# where the docker CLI looks for plugins besides $DOCKER_CONFIG/cli-plugins (Linux)
SYSTEM_PLUGIN_DIRS = ("/usr/local/lib/docker/cli-plugins", "/usr/local/libexec/docker/cli-plugins",
                      "/usr/lib/docker/cli-plugins", "/usr/libexec/docker/cli-plugins")


def _compose_plugin_file() -> Path | None:
    """The docker CLI's Compose plugin, found where the CLI looks for it. Only Compose v2
    ever shipped as a plugin (v1 was a standalone program), so the file answers the
    question without starting it: that costs 0.2 s of CPU on these 2 cores, on every
    `labctl up`, while the lab's containers start."""
    config = os.environ.get("DOCKER_CONFIG") or os.path.join(os.path.expanduser("~"), ".docker")
    for folder in (os.path.join(config, "cli-plugins"), *SYSTEM_PLUGIN_DIRS):
        path = Path(folder, "docker-compose")
        if path.is_file() and os.access(path, os.X_OK):
            return path
    return None


def _find_compose() -> tuple[str, ...]:
    if shutil.which("docker") is not None and _compose_plugin_file() is not None:
        return ("docker", "compose")
    candidates = [("docker", "compose"), ("docker-compose",)]
    for argv in candidates:
        if shutil.which(argv[0]) is None:
            continue
        try:
            done = _cli([*argv, "version", "--short"], 30, capture_output=True, text=True)
        except subprocess.TimeoutExpired:
            continue
        if done.returncode == 0 and done.stdout.strip().lstrip("v").startswith(("2.", "3.")):
            return argv
    if shutil.which("docker") is None:
        raise LabError("docker not found on PATH; the compose backend needs Docker and "
                       "Compose v2 (install both: bash scripts/ensure-docker.sh)")
    raise LabError("Compose v2 not found (neither 'docker compose' nor a v2 'docker-compose'); "
                   "install it with: bash scripts/ensure-docker.sh")


def _docker(*args: str, timeout: float = CLI_TIMEOUT_S, check: bool = False,
            text: bool = True, **kwargs) -> subprocess.CompletedProcess:
    if "stdout" not in kwargs:
        kwargs["capture_output"] = True
    try:
        done = _cli(["docker", *args], timeout, text=text, **kwargs)
    except FileNotFoundError:
        raise LabError(DOCKER_MISSING) from None
    except subprocess.TimeoutExpired:
        raise LabError(f"docker {' '.join(args[:2])} did not answer within {timeout:g}s") from None
    if check and done.returncode != 0:
        raise LabError(f"docker {' '.join(args[:2])} failed: {_last_line(done.stderr)}")
    return done


def _docker_all(*calls: list[str], timeout: float = CLI_TIMEOUT_S, outputs: list | None = None,
                text: bool = True) -> list[subprocess.CompletedProcess]:
    """`docker ARGS` for every list of ARGS in `calls`, at once (each docker CLI start costs
    0.02-0.3 s of a small machine; in a row they add up), each in a session of its own as
    in `_cli` (collect.run_all); errors as `_docker`'s."""
    try:
        return run_all([["docker", *args] for args in calls], timeout, outputs, text)
    except FileNotFoundError:
        raise LabError(DOCKER_MISSING) from None
    except subprocess.TimeoutExpired as exc:
        raise LabError(f"docker {' '.join(exc.cmd[1:3])} did not answer within {timeout:g}s") from None


JOIN_REREAD_S = 1.0      # each join read starts this long before the last line read
# `docker exec` as the lab's user: a shaped node's container is configured as root (for its
# shaping step), and root without CAP_KILL / CAP_SYS_PTRACE may not signal or read uid 1000.
_AS_LAB_USER = ("--user", str(render_compose.IMAGE_UID))


def _since(epoch: float | None) -> list[str]:
    return ["--since", f"{epoch - JOIN_REREAD_S:.6f}"] if epoch else []


def _last_timestamp(data: bytes) -> float:
    """When the last whole line of `data` was logged (Unix seconds, from the stamp
    `docker logs --timestamps` puts before it), or 0."""
    end = data.rfind(b"\n")
    if end < 0:
        return 0.0
    stamp = data[data.rfind(b"\n", 0, end) + 1:end].split(b" ", 1)[0]
    when = _when(stamp.decode("ascii", "replace"))
    return when.timestamp() if when else 0.0


def _check_engine_and_image(image: str, needs_gpu: bool = False) -> None:
    """Refuse before starting: no Compose v2, no engine, no image, or nccl on an engine
    without GPUs. The engine (`docker version`: `docker info` starts every CLI plugin
    to list it, 0.2 s of CPU) and image questions go out while Compose is looked for;
    the runtimes (`docker info`) only for nccl."""
    calls = [["docker", "version", "--format", "{{.Server.Version}}"],
             ["docker", "image", "inspect", "--format", "{{.Id}}", image]]
    if needs_gpu:
        calls.append(["docker", "info", "--format", "{{json .Runtimes}}"])
    try:
        procs = [subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, start_new_session=True, text=True)
                 for argv in calls]
    except FileNotFoundError:
        procs = []                    # no docker: compose_command says so in one line
    try:
        try:
            compose_command()
        except LabError as exc:
            raise PreflightError(str(exc)) from None
        if not procs:
            raise PreflightError("docker not found on PATH; the compose backend needs Docker "
                                 "(install: bash scripts/ensure-docker.sh)")
        outputs = [p.communicate(timeout=30) for p in procs]
        engine, inspected, *info = (subprocess.CompletedProcess(argv, p.returncode, *out)
                                    for argv, p, out in zip(calls, procs, outputs))
    except subprocess.TimeoutExpired:
        raise PreflightError("no Docker engine answers (docker version did not answer within 30s); "
                             "start one with: bash scripts/ensure-docker.sh") from None
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if engine.returncode != 0:
        raise PreflightError(f"no Docker engine answers ({_last_line(engine.stderr)}); "
                             "start one with: bash scripts/ensure-docker.sh")
    if inspected.returncode != 0:
        hint = "make images-cuda" if image == DEFAULT_CUDA_IMAGE else "make images"
        raise PreflightError(f"image {image} not found; build it with: {hint} (or pass --image)")
    if info and "nvidia" not in info[0].stdout:
        raise PreflightError("dist_backend nccl needs GPUs in the containers, and this Docker "
                             "engine has no NVIDIA runtime (docker info: runtimes "
                             f"{info[0].stdout.strip() or 'none'}); use --dist-backend gloo, or a "
                             "machine with the NVIDIA Container Toolkit")


# Containers share this machine's kernel: what tc can do in them is what it was built with.
# (kernel config option, module, where the module lives under /lib/modules/<release>/kernel)
KERNEL_FEATURES = {
    "netem": ("CONFIG_NET_SCH_NETEM", "sch_netem", "net/sched"),
    "htb": ("CONFIG_NET_SCH_HTB", "sch_htb", "net/sched"),
    "ingress": ("CONFIG_NET_SCH_INGRESS", "sch_ingress", "net/sched"),
    "u32": ("CONFIG_NET_CLS_U32", "cls_u32", "net/sched"),
    "mirred": ("CONFIG_NET_ACT_MIRRED", "act_mirred", "net/sched"),
    "ifb": ("CONFIG_IFB", "ifb", "drivers/net"),
    "bfifo": ("CONFIG_NET_SCH_FIFO", "sch_fifo", "net/sched"),
}
# What `links:` needs: every rate is an htb class with a byte FIFO, and a node's incoming
# traffic is redirected (ingress qdisc, u32 filter, mirred action) to an ifb device and
# shaped there.
LINK_RATE_FEATURES = ("htb", "bfifo", "ingress", "u32", "mirred", "ifb")


def kernel_has(feature: str) -> bool | None:
    """Whether this machine's kernel can do tc `feature` (KERNEL_FEATURES): loaded, shipped
    as a module, or built in; None when it cannot be told (a remote engine, no config)."""
    option, module, folder = KERNEL_FEATURES[feature]
    if os.environ.get("DOCKER_HOST", "unix://").startswith(("tcp://", "ssh://")):
        return None
    release = os.uname().release
    if os.path.isdir(f"/sys/module/{module}") or any(
            os.path.exists(f"/lib/modules/{release}/kernel/{folder}/{module}.ko{ext}")
            for ext in ("", ".xz", ".zst", ".gz")):
        return True
    config = _kernel_config()
    if config is None:
        return None
    return f"{option}=y" in config or f"{option}=m" in config


@functools.cache
def _kernel_config() -> str | None:
    try:
        import gzip

        with gzip.open("/proc/config.gz", "rt") as f:
            return f.read()
    except OSError:
        return None


def kernel_has_netem() -> bool | None:
    """Whether this machine's kernel can do `tc ... netem` (the delay fault, link latency)."""
    return kernel_has("netem")


def links_kernel_refusal(spec: LabSpec) -> str | None:
    """Why this kernel cannot shape the lab's links (one line), or None: checked before
    anything starts, so a lab never half-starts on a missing qdisc."""
    links = spec.links
    if links is None:
        return None
    release = os.uname().release
    if links.has_latency and kernel_has("netem") is False:
        return (f"links: a latency needs tc netem, and this machine's kernel ({release}) has none "
                "(CONFIG_NET_SCH_NETEM is not set); leave the latency out, or run on a kernel "
                "with sch_netem")
    missing = [f for f in LINK_RATE_FEATURES if kernel_has(f) is False]
    if missing:
        options = ", ".join(KERNEL_FEATURES[f][0] for f in missing)
        return (f"links: shaping a link needs tc {', '.join(missing)}, and this machine's kernel "
                f"({release}) lacks {'it' if len(missing) == 1 else 'them'} ({options} not set); "
                "leave links out, or run on a kernel with them")
    return None


class _Project:
    """One compose project: the fixed part of every `docker compose` call for a run."""

    def __init__(self, run_id: str, compose_file: Path | None, project_dir: str,
                 name: str | None = None):
        self.name = name or render_compose.project_name(run_id)
        argv = [*compose_command(), "-p", self.name]
        if compose_file is not None:
            argv += ["-f", str(compose_file), "--project-directory", project_dir]
        self.argv = argv

    def __call__(self, *args: str, timeout: float = CLI_TIMEOUT_S) -> subprocess.CompletedProcess:
        try:
            return _cli([*self.argv, *args], timeout, capture_output=True, text=True)
        except subprocess.TimeoutExpired:
            raise LabError(f"docker compose {args[0]} did not finish within {timeout:g}s "
                           f"(project {self.name})") from None

    def containers(self, known: list[str] | None = None) -> list["_Container"]:
        """Every container of the project, running or not, from one `docker inspect` of
        `known` ids (those of the last call); listed again (`docker ps`) when there are
        none or one is gone. The `docker` CLI, not `docker compose ps`: one start of
        the compose CLI costs several of docker's, and a poll runs every second."""
        if known:
            rows, ok = _inspect(known)
            if ok:
                return rows
        ids = _docker("ps", "--all", "--quiet", "--no-trunc", "--filter",
                      f"label=com.docker.compose.project={self.name}", "--filter",
                      "label=com.docker.compose.oneoff=False").stdout.split()
        return _inspect(ids)[0] if ids else []


class _Events:
    """The engine's events for one compose project, read as they come (`docker events`):
    a poll needs to ask the engine again only after something happened to a container,
    and a wait ends as soon as one dies. One stream, not a `docker inspect` and a new
    `docker events` every second: each docker CLI start costs 0.05 s of CPU, which the
    lab's own processes are short of on a small machine. The stream is renewed every
    SPAN_S seconds (`--until`), so that one left behind by a killed labctl ends by itself;
    the next one starts where the last one ended (`--since`: the engine replays)."""

    SPAN_S = 30.0

    def __init__(self, project: str, since: float):
        self.project = project
        self.since = since
        self.changed = True                      # nothing read yet: ask the engine
        self.proc: subprocess.Popen | None = None
        self.until = since
        self.pending = b""
        self.broken = False                      # no stream could be had: sleep and ask

    def _open(self) -> None:
        self.until = max(time.time(), self.since) + self.SPAN_S
        try:
            self.proc = subprocess.Popen(
                ["docker", "events", "--since", f"{self.since:.3f}", "--until", f"{self.until:.3f}",
                 "--filter", "type=container", "--filter", f"label=com.docker.compose.project={self.project}",
                 "--format", "{{.Action}}"],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                start_new_session=True)
        except OSError:
            self.broken = True

    def wait(self, seconds: float) -> None:
        """At most `seconds`; less when a container of the project dies."""
        deadline = time.monotonic() + seconds
        while not self.broken:
            if self.proc is None:
                self._open()
                continue
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                return
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            if not chunk:                        # --until reached (or the engine went away)
                self.close()
                self.since = self.until
                self.changed = True
                continue
            *lines, self.pending = (self.pending + chunk).split(b"\n")
            if lines:
                self.changed = True
            if any(line.strip() == b"die" for line in lines):
                return
        time.sleep(max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.proc.stdout.close()
            self.proc = None


@dataclass(frozen=True)
class _Container:
    """One container of a compose project, as `docker inspect` sees it."""
    service: str
    id: str
    status: str                   # created, running, paused, restarting, removing, exited, dead
    exit_code: int | None         # when exited
    started: _dt.datetime | None
    finished: _dt.datetime | None

    @property
    def state(self) -> tuple[str, int | None]:
        return self.status, self.exit_code

    @property
    def ended(self) -> bool:
        return self.status == "exited"

    @property
    def running(self) -> bool:
        """docker's State.Running: its processes exist (paused ones too), its log may grow."""
        return self.status in ("running", "paused", "restarting")


_INSPECT = ('{{index .Config.Labels "com.docker.compose.service"}}\t{{.Id}}\t{{.State.Status}}\t'
            "{{.State.ExitCode}}\t{{.State.StartedAt}}\t{{.State.FinishedAt}}")


def _when(text: str) -> _dt.datetime | None:
    """A docker timestamp (RFC 3339, nanoseconds), or None (never, or unreadable here)."""
    try:
        when = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        head, dot, rest = text.partition(".")       # Python < 3.11: at most microseconds
        digits = "".join(c for c in rest if c.isdigit())
        zone = rest[len(digits):].replace("Z", "+00:00")
        try:
            when = _dt.datetime.fromisoformat(f"{head}.{digits[:6].ljust(6, '0')}{zone}" if dot else text)
        except ValueError:
            return None
    return when if when.year > 1 else None


def _inspect(ids: list[str]) -> tuple[list[_Container], bool]:
    """The containers `ids` (one `docker inspect`), and whether every one was found."""
    done = _docker("inspect", "--format", _INSPECT, *ids)
    rows = []
    for line in done.stdout.splitlines():
        parts = line.split("\t")
        if len(parts) != 6:
            continue
        service, cid, status, code, started, finished = parts
        rows.append(_Container(service, cid, status.lower(),
                               int(code) if status.lower() == "exited" and code.lstrip("-").isdigit()
                               else None, _when(started), _when(finished)))
    return rows, done.returncode == 0 and len(rows) == len(ids)


def _outcome(index: int, hostname: str, state: tuple[str, int | None] | None) -> NodeOutcome:
    if state is None:
        return NodeOutcome(index, hostname)
    status, code = state
    if status != "exited":
        return NodeOutcome(index, hostname, state=NodeState.PENDING if status == "created"
                           else NodeState.RUNNING, reason=None if status in ("running", "created")
                           else status)
    node_state, sig = from_exit_code(code, shell_convention=True)
    return NodeOutcome(index, hostname, code, node_state, signal=sig)


class ComposeBackend(Backend):
    name = "compose"
    renderer = "labctl.backends.compose.render"
    poll_interval = 1.0
    fault_kinds = ("kill-rank", "kill-node", "stop-node", "partition", "delay")
    hears_joins = True         # `docker logs` of the containers, until every rank joined

    @classmethod
    def shared_dir(cls, spec: LabSpec) -> str | None:
        return container_shared_dir(spec)

    @classmethod
    def links_refusal(cls, spec: LabSpec) -> str | None:
        return None        # tc in each container (workloads/_shape.py); the kernel: preflight

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.exit_times: dict[str, float] = {}     # service -> when it exited (seconds)
        self.started_at: _dt.datetime | None = None  # when start() began: the driver's t0
        self.known: list[str] = []                 # container ids of the last poll
        self.seen: list[_Container] = []           # the containers as the last poll saw them
        self.asked_at = 0.0                        # when the engine was last asked (monotonic)
        self.asked_epoch = time.time()             # the same, on the engine's (wall) clock
        self.events: _Events | None = None         # the project's event stream, once bound
        self.joins: dict[str, set[tuple[int | None, int | None]]] = {}  # container id -> (rank, pid) joined
        self.joins_read_to: dict[str, float] = {}  # container id -> when its last line read was logged

    def placement(self, spec: LabSpec, run_folder: Path | None = None) -> Placement:
        """Containers reach node 0 by its service hostname; the script must exist to be mounted."""
        if spec.script and not Path(spec.script).is_file():
            raise FileNotFoundError(f"script: no such file: {spec.script}")
        return container_placement(spec, "compose")

    def preflight(self, plan: LaunchPlan) -> None:
        refusal = links_kernel_refusal(plan.spec)
        if refusal:
            raise PreflightError(refusal)
        _check_engine_and_image(plan.spec.resolved_image, plan.spec.dist_backend == "nccl")
        delays = [f for f in plan.spec.faults if f.kind == "delay"]
        if delays and kernel_has_netem() is False:
            raise PreflightError(f"fault {delays[0]} needs tc netem, and this machine's kernel "
                                 f"({os.uname().release}) has none (CONFIG_NET_SCH_NETEM is not "
                                 "set); leave the delay out, or run on a kernel with sch_netem")

    def submit(self, plan: LaunchPlan, rundir: RunDir) -> BackendState:
        self.started_at = _dt.datetime.now(_dt.timezone.utc)   # exit times on the driver's clock
        # the run folder's records/, mounted in every node: the ranks' record files outlive
        # any death of a rank, as on the local backend (the lab's user writes there, not root)
        records = local_records_dir(rundir.path)
        debug = local_debug_server_dir(rundir.path) if plan.spec.debug_server is not None else None
        for folder in filter(None, (records, debug)):
            os.makedirs(folder, exist_ok=True)
            os.chmod(folder, 0o777)    # no sticky bit: whoever runs labctl may remove what the ranks wrote
        compose_file = rundir.write_rendered("compose.yaml", render_compose.text(plan, records, debug))
        self._bind(BoundRun.of_plan(plan, Bound.STARTED, rundir),
                   _Project(plan.run_id, compose_file, os.getcwd()))
        up = self.project("up", "--detach", "--no-build", "--pull", "never", "--quiet-pull")
        if up.returncode != 0:
            raise LabError(f"docker compose up failed for project {self.project.name}: "
                           f"{_last_line(up.stderr)}")
        self.progress(f"compose project {self.project.name} started ({len(plan.nodes)} containers)")
        return self.for_record                      # nothing for the record: the labels say it all

    def debug_server_at(self, plan: LaunchPlan) -> str | None:
        """The URL of node 0's published debug server port (the engine picked it)."""
        port = plan.placement.debug_server_port
        if port is None:
            return None
        done = self.project("port", plan.nodes[0].hostname, str(port))
        published = done.stdout.split()[-1] if done.returncode == 0 and done.stdout.split() else ""
        if not published:
            why = _last_line(done.stderr) or "docker compose port said nothing"
            return f"node 0 publishes no port for it ({why})"
        return f"http://{published}"

    def _bind(self, run: BoundRun, project: "_Project") -> None:
        """The run and the compose project every call of this instance names."""
        run = self.bind(run)
        self.project = project
        self.hostnames = run.hostnames
        self.run_id = run.run_id

    def describe(self, within: float = 0.0, joins: bool = False) -> RunView:
        """Wait first (`_wait`: a node that dies ends it; none before the first pause, as
        the stream starts where the engine was last asked), then the run, read when asked."""
        if within > 0 or self.events is not None:
            self._wait(within)
        return RunView(self._poll, self._alive, self._joined if joins else lambda: None)

    def _poll(self) -> list[NodeOutcome]:
        """The nodes now. The engine is asked again only when an event of the project came
        since it was last asked (or after ASK_AT_LEAST_S, or with no event stream)."""
        self.run                                    # LabError when nothing is bound yet
        events = self.events
        quiet = (events is not None and not events.broken and not events.changed
                 and time.monotonic() - self.asked_at < ASK_AT_LEAST_S
                 and set(self.hostnames.values()) <= {c.service for c in self.seen})
        if quiet:
            return self._outcomes(self.seen)
        if events is not None:
            events.changed = False                  # what comes from here on: ask again
        self.asked_at, self.asked_epoch = time.monotonic(), time.time()
        return self._outcomes(self._containers())

    def _outcomes(self, containers: list[_Container]) -> list[NodeOutcome]:
        states = {c.service: c.state for c in containers}
        outcomes = [_outcome(i, h, states.get(h)) for i, h in sorted(self.hostnames.items())]
        origin = self.started_at or min((c.started for c in containers if c.started), default=None)
        for c in containers:
            if c.status == "exited" and c.finished and origin and c.service not in self.exit_times:
                self.exit_times[c.service] = round((c.finished - origin).total_seconds(), 3)
        for o in outcomes:
            if o.state.ended:
                o.exited_s = self.exit_times.get(o.hostname)
        return outcomes

    def _wait(self, seconds: float) -> None:
        """Until the next poll: `seconds`, or less when a container of the run dies (the
        engine's event stream), so that the end of a lab is seen when it happens."""
        if not self.bound:
            time.sleep(seconds)
            return
        if self.events is None:
            self.events = _Events(self.project.name, self.asked_epoch - 0.5)   # none missed since
        self.events.wait(seconds)

    def _close_events(self) -> None:
        if self.events is not None:
            self.events.close()
            self.events = None

    def _containers(self) -> list[_Container]:
        """The project's containers now (one `docker inspect` of those seen last, when the
        same are all there still); a node with no container yet is listed again."""
        containers = self.project.containers(self.known)
        if not set(self.hostnames.values()) <= {c.service for c in containers} and self.known:
            containers = self.project.containers()
        self.known = [c.id for c in containers]
        self.seen = containers
        return containers

    def _joined(self) -> int:
        """The join lines in the containers' logs so far. Each `docker logs --timestamps`
        starts JOIN_REREAD_S before the last line the previous one read (stdout and stderr
        are logged apart: a line of one may land after a later line of the other; a line
        read twice is one join), so a rank that prints much before it joins is not read
        again on every poll. Counted per container: each has its own pid namespace, so
        two replicas' rank 0 may share a pid."""
        containers = [c for c in self.seen if c.status != "created"]
        calls = [["logs", "--timestamps", *_since(self.joins_read_to.get(c.id)), c.id] for c in containers]
        reads = _docker_all(*calls, text=False) if containers else []
        for container, read in zip(containers, reads):
            out, err = read.stdout or b"", read.stderr or b""
            self.joins.setdefault(container.id, set()).update(joins_in(out) | joins_in(err))
            last = max(_last_timestamp(out), _last_timestamp(err))
            if last:
                self.joins_read_to[container.id] = last
        return sum(len(found) for found in self.joins.values())

    def signal(self, action: Action) -> list[str]:
        return dispatch(self.name, action, stop=self._stop, stacks=self._take_stacks, begin=self._inject,
                        end=self._heal)

    def _stop(self, indices: tuple[int, ...]) -> None:
        self.project("stop", "--timeout", str(STOP_TIMEOUT_S),
                     *(self.hostnames[i] for i in indices))

    def stream(self, rundir: RunDir, strict: bool = False) -> list[NodeOutcome]:
        """Every node's log, streamed to its file and checked, or LabError (then the
        driver deletes nothing): always strict. `docker logs`, not `docker compose logs`:
        compose drops a last line without a newline and keeps the whole log in memory.
        The nodes' logs are read at once (labctl/collect.py). When the last poll saw every
        node's container ended (an ended container stays so: restart "no"), its view
        serves: the containers and the final outcomes need no new question."""
        self._close_events()
        by_service = {c.service: c for c in self.seen}
        ended = all(h in by_service and by_service[h].ended for h in self.hostnames.values())
        if not ended:
            by_service = {c.service: c for c in self._containers()}
        sources = []
        for index, hostname in sorted(self.hostnames.items()):
            if hostname not in by_service:
                raise LabError(f"no container for node {index} ({hostname})")
            sources.append(_log_source(index, by_service[hostname]))
        tally = Tally()
        read_by_processes(rundir, sources, LOGS_TIMEOUT_S, tally, not_found=DOCKER_MISSING)
        tally.check()
        return self._outcomes(self.seen) if ended else self._poll()

    def delete(self) -> str:
        """`compose down` of a project started here; of one started elsewhere, whatever is
        left of the run (by its label), saying what was removed."""
        self._close_events()
        if not self.bound:
            return ""
        if self.run.how is not Bound.STARTED:
            return self._remove_leftovers()
        down = self.project("down", "--volumes", "--remove-orphans", "--timeout", "0")
        left_containers, left_networks = _remove_by_label(self.run_id)
        if down.returncode != 0 and (left_containers or left_networks):
            raise LabError(f"docker compose down failed for project {self.project.name}: "
                           f"{_last_line(down.stderr)}")
        return f"removed compose project {self.project.name}"

    # ---- the failure lab -------------------------------------------------------------
    def _take_stacks(self) -> list[str]:
        """SIGUSR1 to every rank inside each container (python3 -m workloads._stacks)."""
        notes = []
        for index, hostname in sorted(self.hostnames.items()):
            done = self.project("exec", "-T", *_AS_LAB_USER, hostname, "python3", "-m",
                                "workloads._stacks", self.run_id, timeout=30)
            if done.returncode != 0:
                notes.append(f"node {index}: could not ask for stacks: {_last_line(done.stderr)}")
        time.sleep(1.5)
        return notes or ["asked every rank for its stack"]

    def _container(self, index: int) -> str:
        cid = next((c.id for c in self._containers() if c.service == self.hostnames[index]), None)
        if cid is None:
            raise LabError(f"no container for node {index} ({self.hostnames[index]})")
        return cid

    def _network(self) -> str:
        return f"{self.project.name}_{render_compose.NETWORK}"

    def _inject(self, fault: Fault) -> str:
        """kill-rank: SIGKILL inside the container (the rank is found by its environment;
        c10d decides which node holds which rank, so every container is asked); the
        others through the engine: kill, pause, network disconnect, tc netem."""
        if fault.kind == "kill-rank":
            for index in sorted(self.hostnames):
                done = _docker("exec", *_AS_LAB_USER, self._container(index), "python3", "-m",
                               "workloads._stacks", "kill-rank", self.run_id, str(fault.target),
                               timeout=30)
                if done.returncode == 0:
                    return (f"SIGKILL to rank {fault.target} (pid {done.stdout.strip()} in "
                            f"{self.hostnames[index]})")
            raise NotYet(f"rank {fault.target} is not running yet in any container")
        cid, host = self._container(fault.target), self.hostnames[fault.target]
        if fault.kind == "kill-node":
            _docker("kill", "--signal", "KILL", cid, check=True)
            return f"docker kill {host} (SIGKILL)"
        if fault.kind == "stop-node":
            _docker("pause", cid, check=True)
            return f"docker pause {host} (cgroup freezer)"
        if fault.kind == "partition":
            _docker("network", "disconnect", self._network(), cid, check=True)
            return f"docker network disconnect {self._network()} {host}"
        if fault.kind == "delay":
            _docker("exec", "--user", "0", cid, "tc", "qdisc", "add", "dev", "eth0", "root",
                    "netem", "delay", f"{fault.ms}ms", check=True)
            return f"tc qdisc add dev eth0 root netem delay {fault.ms}ms in {host}"
        raise LabError(f"the compose backend cannot do {fault.kind}")

    def _heal(self, fault: Fault) -> str:
        cid, host = self._container(fault.target), self.hostnames[fault.target]
        if fault.kind == "stop-node":
            _docker("unpause", cid, check=True)
            return f"docker unpause {host}"
        if fault.kind == "partition":
            # the service name is how the others resolve it: give it back as an alias
            _docker("network", "connect", "--alias", host, self._network(), cid, check=True)
            return f"docker network connect {self._network()} {host}"
        raise LabError(f"the compose backend cannot end {fault.kind}")

    # ---- runs started by `docker compose up` or by a labctl that died ------------
    def find_runs(self) -> list[str]:
        key = render_compose.RUN_LABEL
        fmt = f'{{{{.Label "{key}"}}}}'
        found = set(_docker("ps", "--all", "--filter", f"label={key}", "--format", fmt,
                            check=True).stdout.split())
        found |= set(_docker("network", "ls", "--filter", f"label={key}", "--format", fmt,
                             check=True).stdout.split())
        return sorted(found)

    def attach(self, target: RunDir | str) -> LaunchPlan | None:
        """A run id: the plan of a compose-started lab, from its network's `labctl.dev/spec`
        label. A run folder: the run its record names."""
        if isinstance(target, RunDir):
            self._bind(BoundRun.of_folder(target), _Project(target.record.run_id, None, os.getcwd()))
            return None
        run_id = target
        containers, networks = _labelled(run_id)
        if not containers and not networks:
            raise UnknownRun.of(run_id, "on this Docker engine", self.find_runs())
        stored = None
        if networks:
            inspected = json.loads(_docker("network", "inspect", *networks, check=True).stdout)
            stored = next((n["Labels"][SPEC_KEY] for n in inspected
                           if SPEC_KEY in (n.get("Labels") or {})), None)
        if stored is None:
            raise LabError(f"run {run_id}: no {SPEC_KEY} label on its network (gone, or rendered "
                           "by an older labctl); render and start it again with this labctl")
        spec = spec_from_stored(stored, f"the network of run {run_id}")
        the_plan = make_plan(spec, container_placement(spec, "compose"), run_id)
        expected = {n.hostname for n in (*the_plan.nodes, *the_plan.services)}
        rows = _docker("ps", "--all", "--filter", f"label={render_compose.RUN_LABEL}={run_id}", "--format",
                       '{{.Label "com.docker.compose.service"}} {{.Label "com.docker.compose.project"}}',
                       check=True).stdout.split("\n")
        services = {r.split(" ")[0] for r in rows if r.strip()}
        projects = {r.split(" ")[1] for r in rows if len(r.split(" ")) > 1 and r.split(" ")[1]}
        if services - expected:
            strangers = ", ".join(sorted(services - expected))
            raise LabError(f"run {run_id}: containers of service(s) {strangers} are not in its "
                           f"lab description (nodes {', '.join(sorted(expected))})")
        # `docker compose -p NAME up` may have renamed the project: follow the containers
        self._bind(BoundRun.of_plan(the_plan, Bound.FOUND),
                   _Project(run_id, None, os.getcwd(), name=projects.pop() if len(projects) == 1 else None))
        return the_plan

    def _alive(self) -> bool:
        containers, networks = _labelled(self.run_id)
        return bool(containers or networks)

    def _remove_leftovers(self) -> str:
        containers, networks = _labelled(self.run_id)
        if not containers and not networks:
            return f"nothing left of run {self.run_id}: no containers or networks"
        self.project("down", "--volumes", "--remove-orphans", "--timeout", "0")
        # Whatever compose did not remove (e.g. a project renamed by hand) goes by label.
        left_containers, left_networks = _remove_by_label(self.run_id)
        if left_containers or left_networks:
            raise LabError(f"could not remove {len(left_containers)} container(s) and "
                           f"{len(left_networks)} network(s) of run {self.run_id}; see: docker ps -a "
                           f"--filter label={render_compose.RUN_LABEL}={self.run_id}")
        return (f"removed {len(containers)} container(s) and {len(networks)} network(s) "
                f"of run {self.run_id} (compose project {self.project.name})")


def _log_source(index: int, c: _Container) -> ProcessSource:
    """Where a container's log comes from: `docker logs`, byte for byte as its processes
    wrote it (stdout and stderr in the engine's order: both go to the one file). A stopped
    container's log no longer changes, so its last entry is asked for while the whole log
    is read (`--tail 1`, the witness): the file must end with it (empty only when the
    container printed nothing)."""
    witness = None if c.running else ["docker", "logs", "--tail", "1", c.id]  # a running one grows on
    return ProcessSource(index, c.service, ["docker", "logs", c.id], f"docker logs {c.service}",
                         witness, f"docker logs --tail 1 {c.service}", holder="the engine")


def _labelled(run_id: str) -> tuple[list[str], list[str]]:
    """Ids of the containers and networks that carry the run's label (asked at once)."""
    label = f"label={render_compose.RUN_LABEL}={run_id}"
    ps, nets = _docker_all(["ps", "--all", "--quiet", "--filter", label],
                           ["network", "ls", "--quiet", "--filter", label])
    for done in (ps, nets):
        if done.returncode != 0:
            raise LabError(f"docker {' '.join(done.args[1:3])} failed: {_last_line(done.stderr)}")
    return ps.stdout.split(), nets.stdout.split()


def _remove_by_label(run_id: str) -> tuple[list[str], list[str]]:
    """Force-remove the run's labelled containers and networks; returns what could not be removed."""
    containers, networks = _labelled(run_id)
    if not containers and not networks:
        return [], []
    if containers:
        _docker("rm", "--force", "--volumes", *containers)
    if networks:
        _docker("network", "rm", *networks)
    return _labelled(run_id)
