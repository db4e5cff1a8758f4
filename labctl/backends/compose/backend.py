"""Compose backend: every node is a container of one docker compose project.

`submit` renders the plan (render.py beside this module) and starts the project;
`describe` reads every container's state (waiting on the engine's events);
`signal(Stop)` stops containers; `stream` copies each node's log into the run
folder; `delete` is `docker compose down -v`. The driver calls them in that
order, always: logs before teardown. The compose project is named after the run
id, and every container and network carries the run label, so a run started by
`docker compose up` can be attached to (collect, down). The verbs only: the CLI
calls are docker.py, the containers' state engine.py, the logs logsources.py and
the checks before a start preflight.py.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import time
from pathlib import Path

from ...collect import Tally, last_line, read_by_processes
from ...errors import LabError
from ...faults import Fault, NotYet
from ...outcome import NodeOutcome
from ...plan import LaunchPlan, Placement, plan as make_plan
from ...rendered import SPEC_KEY
from ...rundir import RunDir
from ...spec import LabSpec
from .. import spec_from_stored
from ..base import (Action, Backend, BackendState, Bound, BoundRun, PreflightError, RunView,
                    UnknownRun, dispatch)
from ..containers import container_placement, container_shared_dir
from ..runfolder import local_debug_server_dir, local_records_dir
from . import render as render_compose
from .docker import DOCKER_MISSING, Project, docker, labelled, remove_by_label
from .engine import Container, Events, outcome, project_containers
from .logsources import LOGS_TIMEOUT_S, JoinReader, log_source
from .preflight import check_engine_and_image, kernel_has_netem, links_kernel_refusal

STOP_TIMEOUT_S = 5         # docker stop: SIGTERM, then SIGKILL after this many seconds
ASK_AT_LEAST_S = 10.0      # a poll asks the engine this often even when no event came
# `docker exec` as the lab's user: a shaped node's container is configured as root (for its
# shaping step), and root without CAP_KILL / CAP_SYS_PTRACE may not signal or read uid 1000.
_AS_LAB_USER = ("--user", str(render_compose.IMAGE_UID))


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
        self.seen: list[Container] = []           # the containers as the last poll saw them
        self.asked_at = 0.0                        # when the engine was last asked (monotonic)
        self.asked_epoch = time.time()             # the same, on the engine's (wall) clock
        self.events: Events | None = None         # the project's event stream, once bound
        self.joins = JoinReader()                  # the join lines read so far, per container

    def placement(self, spec: LabSpec, run_folder: Path | None = None) -> Placement:
        """Containers reach node 0 by its service hostname; the script must exist to be mounted."""
        if spec.script and not Path(spec.script).is_file():
            raise FileNotFoundError(f"script: no such file: {spec.script}")
        return container_placement(spec, "compose")

    def preflight(self, plan: LaunchPlan) -> None:
        refusal = links_kernel_refusal(plan.spec)
        if refusal:
            raise PreflightError(refusal)
        check_engine_and_image(plan.spec.resolved_image, plan.spec.dist_backend == "nccl")
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
                   Project(plan.run_id, compose_file, os.getcwd()))
        up = self.project("up", "--detach", "--no-build", "--pull", "never", "--quiet-pull")
        if up.returncode != 0:
            raise LabError(f"docker compose up failed for project {self.project.name}: "
                           f"{last_line(up.stderr)}")
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
            why = last_line(done.stderr) or "docker compose port said nothing"
            return f"node 0 publishes no port for it ({why})"
        return f"http://{published}"

    def _bind(self, run: BoundRun, project: Project) -> None:
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

    def _outcomes(self, containers: list[Container]) -> list[NodeOutcome]:
        states = {c.service: c.state for c in containers}
        outcomes = [outcome(i, h, states.get(h)) for i, h in sorted(self.hostnames.items())]
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
            self.events = Events(self.project.name, self.asked_epoch - 0.5)   # none missed since
        self.events.wait(seconds)

    def _close_events(self) -> None:
        if self.events is not None:
            self.events.close()
            self.events = None

    def _containers(self) -> list[Container]:
        """The project's containers now (one `docker inspect` of those seen last, when the
        same are all there still); a node with no container yet is listed again."""
        containers = project_containers(self.project, self.known)
        if not set(self.hostnames.values()) <= {c.service for c in containers} and self.known:
            containers = project_containers(self.project)
        self.known = [c.id for c in containers]
        self.seen = containers
        return containers

    def _joined(self) -> int:
        """The ranks that joined so far, from the containers' logs (logsources.JoinReader)."""
        return self.joins.count(self.seen)

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
            sources.append(log_source(index, by_service[hostname]))
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
        left_containers, left_networks = remove_by_label(self.run_id)
        if down.returncode != 0 and (left_containers or left_networks):
            raise LabError(f"docker compose down failed for project {self.project.name}: "
                           f"{last_line(down.stderr)}")
        return f"removed compose project {self.project.name}"

    # ---- the failure lab -------------------------------------------------------------
    def _take_stacks(self) -> list[str]:
        """The stack signal (SIGRTMIN+6) to every rank inside each container (python3 -m workloads._stacks)."""
        notes = []
        for index, hostname in sorted(self.hostnames.items()):
            done = self.project("exec", "-T", *_AS_LAB_USER, hostname, "python3", "-m",
                                "workloads._stacks", self.run_id, timeout=30)
            if done.returncode != 0:
                notes.append(f"node {index}: could not ask for stacks: {last_line(done.stderr)}")
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
                done = docker("exec", *_AS_LAB_USER, self._container(index), "python3", "-m",
                               "workloads._stacks", "kill-rank", self.run_id, str(fault.target),
                               timeout=30)
                if done.returncode == 0:
                    return (f"SIGKILL to rank {fault.target} (pid {done.stdout.strip()} in "
                            f"{self.hostnames[index]})")
            raise NotYet(f"rank {fault.target} is not running yet in any container")
        cid, host = self._container(fault.target), self.hostnames[fault.target]
        if fault.kind == "kill-node":
            docker("kill", "--signal", "KILL", cid, check=True)
            return f"docker kill {host} (SIGKILL)"
        if fault.kind == "stop-node":
            docker("pause", cid, check=True)
            return f"docker pause {host} (cgroup freezer)"
        if fault.kind == "partition":
            docker("network", "disconnect", self._network(), cid, check=True)
            return f"docker network disconnect {self._network()} {host}"
        if fault.kind == "delay":
            docker("exec", "--user", "0", cid, "tc", "qdisc", "add", "dev", "eth0", "root",
                    "netem", "delay", f"{fault.ms}ms", check=True)
            return f"tc qdisc add dev eth0 root netem delay {fault.ms}ms in {host}"
        raise LabError(f"the compose backend cannot do {fault.kind}")

    def _heal(self, fault: Fault) -> str:
        cid, host = self._container(fault.target), self.hostnames[fault.target]
        if fault.kind == "stop-node":
            docker("unpause", cid, check=True)
            return f"docker unpause {host}"
        if fault.kind == "partition":
            # the service name is how the others resolve it: give it back as an alias
            docker("network", "connect", "--alias", host, self._network(), cid, check=True)
            return f"docker network connect {self._network()} {host}"
        raise LabError(f"the compose backend cannot end {fault.kind}")

    # ---- runs started by `docker compose up` or by a labctl that died ------------
    def find_runs(self) -> list[str]:
        key = render_compose.RUN_LABEL
        fmt = f'{{{{.Label "{key}"}}}}'
        found = set(docker("ps", "--all", "--filter", f"label={key}", "--format", fmt,
                            check=True).stdout.split())
        found |= set(docker("network", "ls", "--filter", f"label={key}", "--format", fmt,
                             check=True).stdout.split())
        return sorted(found)

    def attach(self, target: RunDir | str) -> LaunchPlan | None:
        """A run id: the plan of a compose-started lab, from its network's `labctl.dev/spec`
        label. A run folder: the run its record names."""
        if isinstance(target, RunDir):
            self._bind(BoundRun.of_folder(target), Project(target.record.run_id, None, os.getcwd()))
            return None
        run_id = target
        containers, networks = labelled(run_id)
        if not containers and not networks:
            raise UnknownRun.of(run_id, "on this Docker engine", self.find_runs())
        stored = None
        if networks:
            inspected = json.loads(docker("network", "inspect", *networks, check=True).stdout)
            stored = next((n["Labels"][SPEC_KEY] for n in inspected
                           if SPEC_KEY in (n.get("Labels") or {})), None)
        if stored is None:
            raise LabError(f"run {run_id}: no {SPEC_KEY} label on its network (gone, or rendered "
                           "by an older labctl); render and start it again with this labctl")
        spec = spec_from_stored(stored, f"the network of run {run_id}")
        the_plan = make_plan(spec, container_placement(spec, "compose"), run_id)
        expected = {n.hostname for n in (*the_plan.nodes, *the_plan.services)}
        rows = docker("ps", "--all", "--filter", f"label={render_compose.RUN_LABEL}={run_id}", "--format",
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
                   Project(run_id, None, os.getcwd(), name=projects.pop() if len(projects) == 1 else None))
        return the_plan

    def _alive(self) -> bool:
        containers, networks = labelled(self.run_id)
        return bool(containers or networks)

    def _remove_leftovers(self) -> str:
        containers, networks = labelled(self.run_id)
        if not containers and not networks:
            return f"nothing left of run {self.run_id}: no containers or networks"
        self.project("down", "--volumes", "--remove-orphans", "--timeout", "0")
        # Whatever compose did not remove (e.g. a project renamed by hand) goes by label.
        left_containers, left_networks = remove_by_label(self.run_id)
        if left_containers or left_networks:
            raise LabError(f"could not remove {len(left_containers)} container(s) and "
                           f"{len(left_networks)} network(s) of run {self.run_id}; see: docker ps -a "
                           f"--filter label={render_compose.RUN_LABEL}={self.run_id}")
        return (f"removed {len(containers)} container(s) and {len(networks)} network(s) "
                f"of run {self.run_id} (compose project {self.project.name})")

