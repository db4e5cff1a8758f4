"""Compose backend: every node is a container of one docker compose project.

`run` renders the plan (labctl.render.compose), starts the project, watches
each container until all exit, the first one fails, the deadline passes or
Ctrl-C, and then — always, in a `finally` — stops the containers, copies each
node's log into the run folder and removes containers and network with
`docker compose down -v`. Only the docker CLI is used (no Python docker lib).
"""
from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Callable

from ..errors import LabError
from ..plan import LaunchPlan, Placement, container_placement
from ..render import compose as render_compose
from ..rundir import NodeOutcome, RunDir
from ..spec import DEFAULT_CUDA_IMAGE, LabSpec

FAILURE_GRACE_S = 8.0      # after the first failing node, let the others notice and exit
STOP_TIMEOUT_S = 5         # docker stop: SIGTERM, then SIGKILL after this many seconds
POLL_S = 1.0
CLI_TIMEOUT_S = 120.0      # any single docker/compose call


def placement(spec: LabSpec) -> Placement:
    """Containers reach node 0 by its service hostname; the script must exist to be mounted."""
    if spec.script and not Path(spec.script).is_file():
        raise FileNotFoundError(f"script: no such file: {spec.script}")
    return container_placement(spec, "compose")


@functools.lru_cache(maxsize=None)
def compose_command() -> tuple[str, ...]:
    """`docker compose` (v2 plugin) or a `docker-compose` v2 binary, whichever works."""
    candidates = [("docker", "compose"), ("docker-compose",)]
    for argv in candidates:
        if shutil.which(argv[0]) is None:
            continue
        try:
            done = subprocess.run([*argv, "version", "--short"], capture_output=True, text=True,
                                  timeout=30)
        except subprocess.TimeoutExpired:
            continue
        if done.returncode == 0 and done.stdout.strip().lstrip("v").startswith(("2.", "3.")):
            return argv
    if shutil.which("docker") is None:
        raise LabError("docker not found on PATH; the compose backend needs Docker and "
                       "Compose v2 (install both: bash scripts/ensure-docker.sh)")
    raise LabError("Compose v2 not found (neither 'docker compose' nor a v2 'docker-compose'); "
                   "install it with: bash scripts/ensure-docker.sh")


def _docker(*args: str, timeout: float = CLI_TIMEOUT_S, check: bool = False) -> subprocess.CompletedProcess:
    try:
        done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise LabError("docker not found on PATH (install: bash scripts/ensure-docker.sh)") from None
    except subprocess.TimeoutExpired:
        raise LabError(f"docker {' '.join(args[:2])} did not answer within {timeout:g}s") from None
    if check and done.returncode != 0:
        raise LabError(f"docker {' '.join(args[:2])} failed: {_last_line(done.stderr)}")
    return done


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no output"


def _check_engine_and_image(image: str) -> None:
    info = _docker("info", "--format", "{{.ServerVersion}}", timeout=30)
    if info.returncode != 0:
        raise LabError(f"no Docker engine answers ({_last_line(info.stderr)}); "
                       "start one with: bash scripts/ensure-docker.sh")
    if _docker("image", "inspect", image).returncode != 0:
        hint = "bash images/build.sh cuda" if image == DEFAULT_CUDA_IMAGE else "make images"
        raise LabError(f"image {image} not found; build it with: {hint} (or pass --image)")


class _Project:
    """One compose project: the fixed part of every `docker compose` call for a run."""

    def __init__(self, run_id: str, compose_file: Path | None, project_dir: str):
        self.name = render_compose.project_name(run_id)
        argv = [*compose_command(), "-p", self.name]
        if compose_file is not None:
            argv += ["-f", str(compose_file), "--project-directory", project_dir]
        self.argv = argv

    def __call__(self, *args: str, timeout: float = CLI_TIMEOUT_S) -> subprocess.CompletedProcess:
        try:
            return subprocess.run([*self.argv, *args], capture_output=True, text=True,
                                  timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise LabError(f"docker compose {args[0]} did not finish within {timeout:g}s "
                           f"(project {self.name})") from None

    def states(self) -> dict[str, tuple[str, int | None]]:
        """{service: (state, exit code)} for every container of the project, running or not."""
        done = self("ps", "--all", "--format", "json")
        if done.returncode != 0:
            return {}
        text = done.stdout.strip()
        rows = json.loads(text) if text.startswith("[") else [json.loads(l) for l in text.splitlines() if l.strip()]
        return {r["Service"]: (r.get("State", "").lower(),
                               r.get("ExitCode") if r.get("State", "").lower() == "exited" else None)
                for r in rows}


def _describe(plan: LaunchPlan, states: dict[str, tuple[str, int | None]]) -> str:
    parts = []
    for node in plan.nodes:
        state, code = states.get(node.hostname, ("pending", None))
        parts.append(f"node-{node.index}: {state}" + (f"({code})" if code is not None else ""))
    return "  ".join(parts)


def run(plan: LaunchPlan, rundir: RunDir, deadline: float,
        progress: Callable[[str], None] = lambda line: None) -> tuple[list[NodeOutcome], str, str]:
    """Start every node as a container, wait, collect logs, remove everything.

    Returns (node outcomes, state, message), state passed|failed|timeout|interrupted.
    """
    compose_command()
    _check_engine_and_image(plan.spec.resolved_image)
    compose_file = rundir.write_rendered("compose.yaml", render_compose.text(plan))
    project = _Project(plan.run_id, compose_file, os.getcwd())
    state, message = "passed", ""
    t0 = time.monotonic()
    exited_at: dict[str, float] = {}
    states: dict[str, tuple[str, int | None]] = {}
    stopped: set[str] = set()          # services still running when labctl stopped them
    final = states
    started = False
    try:
        up = project("up", "--detach", "--no-build", "--pull", "never", "--quiet-pull")
        started = True
        if up.returncode != 0:
            raise LabError(f"docker compose up failed for project {project.name}: "
                           f"{_last_line(up.stderr)}")
        progress(f"compose project {project.name} started ({len(plan.nodes)} containers)")
        first_failure: float | None = None
        last = ""
        while True:
            states = project.states()
            # ---- [init-methods] plan.services (the replica store) never count: watch the nodes
            states = {k: v for k, v in states.items() if k not in {svc.hostname for svc in plan.services}}
            # ---- [/init-methods]
            now = time.monotonic()
            for service, (st, _) in states.items():
                if st == "exited" and service not in exited_at:
                    exited_at[service] = round(now - t0, 3)
            line = _describe(plan, states)
            if line != last:
                progress(f"[{now - t0:6.1f}s] {line}")
                last = line
            if len(states) == len(plan.nodes) and all(st == "exited" for st, _ in states.values()):
                break
            failed = sorted(s for s, (st, code) in states.items() if st == "exited" and code != 0)
            if failed and first_failure is None:
                first_failure = now
                progress(f"{', '.join(failed)} failed; stopping the lab in {FAILURE_GRACE_S:g}s "
                         "unless the others finish")
            if first_failure is not None and now - first_failure > FAILURE_GRACE_S:
                break
            if now > deadline:
                state, message = "timeout", f"deadline of {plan.spec.timeout:g}s passed"
                progress(f"timeout: {message}; stopping the lab")
                break
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        state, message = "interrupted", "interrupted (Ctrl-C)"
        progress("interrupted: stopping the lab")
    finally:
        if started:
            try:
                stopped, final = _stop_collect_and_remove(plan, rundir, project)
            except KeyboardInterrupt:       # a second Ctrl-C: still remove everything
                project("down", "--volumes", "--remove-orphans", "--timeout", "0")
                raise

    outcomes = []
    for node in plan.nodes:
        st, code = final.get(node.hostname, ("pending", None))
        if node.hostname in stopped:
            outcomes.append(NodeOutcome(node.index, node.hostname, None, "killed",
                                        exited_at.get(node.hostname)))
        elif st == "exited":
            outcomes.append(NodeOutcome(node.index, node.hostname, code,
                                        "succeeded" if code == 0 else "failed",
                                        exited_at.get(node.hostname)))
        else:
            outcomes.append(NodeOutcome(node.index, node.hostname, None, "pending"))
    if state == "passed" and any(o.state != "succeeded" for o in outcomes):
        state = "failed"
    return outcomes, state, message


def _stop_collect_and_remove(plan: LaunchPlan, rundir: RunDir, project: _Project
                             ) -> tuple[set[str], dict[str, tuple[str, int | None]]]:
    """Stop what still runs, write every node's log, then `down -v`: logs before teardown.

    Returns the services labctl had to stop and every container's final state.
    """
    running = {s for s, (st, _) in project.states().items() if st != "exited"}
    if running:
        project("stop", "--timeout", str(STOP_TIMEOUT_S), timeout=CLI_TIMEOUT_S)
    final = project.states()
    try:
        for node in plan.nodes:
            logs = project("logs", "--no-log-prefix", "--no-color", node.hostname)
            rundir.write_node_log(node.index, logs.stdout + logs.stderr if logs.returncode == 0
                                  else f"labctl: no log for {node.hostname}: {_last_line(logs.stderr)}\n")
    finally:
        down = project("down", "--volumes", "--remove-orphans", "--timeout", "0")
        if down.returncode != 0 and any(_remove_by_label(plan.run_id)):
            raise LabError(f"docker compose down failed for project {project.name}: "
                           f"{_last_line(down.stderr)}; remove it with: labctl down {rundir.path}")
    return running, final


def _labelled(run_id: str) -> tuple[list[str], list[str]]:
    """Ids of the containers and networks that carry the run's label."""
    label = f"label={render_compose.RUN_LABEL}={run_id}"
    return (_docker("ps", "--all", "--quiet", "--filter", label, check=True).stdout.split(),
            _docker("network", "ls", "--quiet", "--filter", label, check=True).stdout.split())


def _remove_by_label(run_id: str) -> tuple[list[str], list[str]]:
    """Force-remove the run's labelled containers and networks; returns what could not be removed."""
    containers, networks = _labelled(run_id)
    if containers:
        _docker("rm", "--force", "--volumes", *containers)
    if networks:
        _docker("network", "rm", *networks)
    return _labelled(run_id)


def down(rundir: RunDir) -> str:
    """Remove whatever is left of a run's project (idempotent); one line on what was done."""
    run_id = rundir.meta["run_id"]
    containers, networks = _labelled(run_id)
    if not containers and not networks:
        return f"nothing left of run {run_id}: no containers or networks"
    project = _Project(run_id, None, os.getcwd())
    project("down", "--volumes", "--remove-orphans", "--timeout", "0")
    # Whatever compose did not remove (e.g. a project renamed by hand) goes by label.
    left_containers, left_networks = _remove_by_label(run_id)
    if left_containers or left_networks:
        raise LabError(f"could not remove {len(left_containers)} container(s) and "
                       f"{len(left_networks)} network(s) of run {run_id}; see: docker ps -a "
                       f"--filter label={render_compose.RUN_LABEL}={run_id}")
    return (f"removed {len(containers)} container(s) and {len(networks)} network(s) "
            f"of run {run_id} (compose project {project.name})")
