"""The docker and compose CLI as labctl calls it: one process per call, in a session of
its own, with a timeout and one line on failure. Which Compose works is found once
(`compose_command`); a `Project` is the fixed part of every `docker compose` call of a
run; the run's labelled containers and networks are found and removed here. Only the
docker CLI is used (no Python docker lib)."""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

from ...collect import last_line, run_all
from ...errors import LabError
from . import render as render_compose

CLI_TIMEOUT_S = 120.0      # any single docker/compose call
DOCKER_MISSING = "docker not found on PATH (install: bash scripts/ensure-docker.sh)"


def cli(argv: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
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
            done = cli([*argv, "version", "--short"], 30, capture_output=True, text=True)
        except subprocess.TimeoutExpired:
            continue
        if done.returncode == 0 and done.stdout.strip().lstrip("v").startswith(("2.", "3.")):
            return argv
    if shutil.which("docker") is None:
        raise LabError("docker not found on PATH; the compose backend needs Docker and "
                       "Compose v2 (install both: bash scripts/ensure-docker.sh)")
    raise LabError("Compose v2 not found (neither 'docker compose' nor a v2 'docker-compose'); "
                   "install it with: bash scripts/ensure-docker.sh")


def docker(*args: str, timeout: float = CLI_TIMEOUT_S, check: bool = False,
           text: bool = True, **kwargs) -> subprocess.CompletedProcess:
    if "stdout" not in kwargs:
        kwargs["capture_output"] = True
    try:
        done = cli(["docker", *args], timeout, text=text, **kwargs)
    except FileNotFoundError:
        raise LabError(DOCKER_MISSING) from None
    except subprocess.TimeoutExpired:
        raise LabError(f"docker {' '.join(args[:2])} did not answer within {timeout:g}s") from None
    if check and done.returncode != 0:
        raise LabError(f"docker {' '.join(args[:2])} failed: {last_line(done.stderr)}")
    return done


def docker_all(*calls: list[str], timeout: float = CLI_TIMEOUT_S, outputs: list | None = None,
               text: bool = True) -> list[subprocess.CompletedProcess]:
    """`docker ARGS` for every list of ARGS in `calls`, at once (each docker CLI start costs
    0.02-0.3 s of a small machine; in a row they add up), each in a session of its own as
    in `cli` (collect.run_all); errors as `docker`'s."""
    try:
        return run_all([["docker", *args] for args in calls], timeout, outputs, text)
    except FileNotFoundError:
        raise LabError(DOCKER_MISSING) from None
    except subprocess.TimeoutExpired as exc:
        raise LabError(f"docker {' '.join(exc.cmd[1:3])} did not answer within {timeout:g}s") from None


class Project:
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
            return cli([*self.argv, *args], timeout, capture_output=True, text=True)
        except subprocess.TimeoutExpired:
            raise LabError(f"docker compose {args[0]} did not finish within {timeout:g}s "
                           f"(project {self.name})") from None


def labelled(run_id: str) -> tuple[list[str], list[str]]:
    """Ids of the containers and networks that carry the run's label (asked at once)."""
    label = f"label={render_compose.RUN_LABEL}={run_id}"
    ps, nets = docker_all(["ps", "--all", "--quiet", "--filter", label],
                          ["network", "ls", "--quiet", "--filter", label])
    for done in (ps, nets):
        if done.returncode != 0:
            raise LabError(f"docker {' '.join(done.args[1:3])} failed: {last_line(done.stderr)}")
    return ps.stdout.split(), nets.stdout.split()


def remove_by_label(run_id: str) -> tuple[list[str], list[str]]:
    """Force-remove the run's labelled containers and networks; returns what could not be removed."""
    containers, networks = labelled(run_id)
    if not containers and not networks:
        return [], []
    if containers:
        docker("rm", "--force", "--volumes", *containers)
    if networks:
        docker("network", "rm", *networks)
    return labelled(run_id)
