"""torch's debug server inside the lab (`labctl up --debug-server`, docs/diagnosis.md).

One real lab per backend that can run here, each held to the same assertions
(`_up_and_look`): labctl prints where to open it, its frontend answers with every
rank's stacks while the lab runs, its periodic dumps land in the run folder, the lab
passes and leaves nothing behind. Kubernetes (no API server here): the command labctl
prints and what the pods are given. Then the refusals, each one line and exit 2.
"""
from __future__ import annotations

import json
import queue
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import LABCTL, REPO, assert_nothing_left, labctl
from labctl.rendered import RUN_LABEL

# Both ranks wait in the script (after a collective) until the test has looked, then
# finish together. The go file is in the folder the dumps land in: the run folder's
# debug-server/, which compose mounts in every node too.
WAITS = """\
import os, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
go = os.path.join(os.environ["LAB_DEBUG_SERVER_DIR"], "go")
deadline = time.monotonic() + 300
while not os.path.exists(go) and time.monotonic() < deadline:   # the test says when
    time.sleep(0.05)
dist.all_reduce(t)
assert t.item() == 4.0
dist.destroy_process_group()
"""
SCRIPT = "waits_for_the_test.py"
DEADLINE_S = 240


def _get(url: str, deadline: float) -> str:
    """The page at `url`, asked until it answers 200 or the deadline passes."""
    last: object = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=30) as answer:
                if answer.status == 200:
                    return answer.read().decode(errors="replace")
                last = answer.status
        except (urllib.error.URLError, ConnectionError, OSError) as exc:
            last = exc
        time.sleep(0.1)
    raise AssertionError(f"{url} did not answer 200 in time (last: {last})")


def _lines(stream, into: queue.Queue) -> None:
    for line in stream:
        into.put(line)
    into.put(None)


def _up_and_look(tmp_path: Path, *args: str) -> dict:
    """`labctl up --debug-server` of the waiting script; while it waits, the frontend's
    index and stacks pages and the first dump; then the lab's end. What was seen."""
    (tmp_path / SCRIPT).write_text(WAITS)
    out = tmp_path / "run"
    proc = subprocess.Popen([*LABCTL, "up", "--debug-server", "--script", SCRIPT, "--nodes", "2",
                             "--nproc-per-node", "1", "--timeout", str(DEADLINE_S), "--out", str(out),
                             *args], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=_env())
    lines: queue.Queue = queue.Queue()        # its progress lines (stderr), as they come
    report: list[str] = []
    threading.Thread(target=_lines, args=(proc.stderr, lines), daemon=True).start()
    threading.Thread(target=lambda: report.append(proc.stdout.read()), daemon=True).start()
    deadline = time.monotonic() + DEADLINE_S
    said, url = [], None
    try:
        while url is None:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            assert line is not None, "labctl ended before it said where the debug server is:\n" + \
                "".join(said)
            said.append(line)
            found = re.search(r"^debug server: (http://127\.0\.0\.1:\d+)", line)
            url = found.group(1) if found else None
        index = _get(url + "/", deadline)
        stacks = _get(url + "/stacks", deadline)
        dumps = out / "debug-server"
        # the first round of dumps, its last one (torch's handler order) included
        while not (list(dumps.glob("stacks_*.txt")) and list(dumps.glob("tcpstore_*.txt"))) \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        first = sorted(dumps.glob("stacks_*.txt"))
        dumped = first[0].read_text() if first else ""
        (dumps / "go").touch()
        proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    while (line := lines.get(timeout=30)) is not None:
        said.append(line)
    status = json.loads((out / "status.json").read_text())
    return {"rc": proc.returncode, "url": url, "index": index, "stacks": stacks, "dump": dumped,
            "status": status, "out": out, "stderr": "".join(said) + "".join(report)}


def _env() -> dict:
    import os
    return {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}   # each line as said


def _assert_it_served_and_dumped(seen: dict) -> None:
    assert seen["rc"] == 0, seen["stderr"][-2000:]
    assert seen["status"]["state"] == "passed"
    assert "Torch Distributed Debug Server" in seen["index"]
    for rank in (0, 1):           # every rank's stack, each in the script's wait
        page = seen["stacks"].split(f"Rank {rank}:")[1].split("Rank ")[0]
        assert SCRIPT in page and "Failed to fetch" not in page, seen["stacks"][-3000:]
        dump = seen["dump"].split(f"=== Rank {rank}:")[1].split("=== Rank")[0]
        assert SCRIPT in dump, seen["dump"][-3000:]
    folder = seen["out"] / "debug-server"
    assert list(folder.glob("tcpstore_*.txt")) and (folder / "frontend.log").is_file()
    # the frontend's own log (a failed dump's traceback) is not in rank 0's: not its error
    rank0 = (seen["out"] / "ranks" / "rank-0.log").read_text()
    assert "labctl: debug server started" in rank0 and "Traceback" not in rank0


@pytest.mark.slow
def test_a_local_lab_serves_every_rank_s_stacks_on_loopback_and_dumps_into_the_run_folder(tmp_path):
    seen = _up_and_look(tmp_path)
    _assert_it_served_and_dumped(seen)
    assert_nothing_left(seen["status"]["run_id"])        # the frontend went with rank 0


@pytest.mark.docker
def test_a_compose_lab_publishes_it_on_loopback_and_dumps_into_the_run_folder(tmp_path):
    from docker_support import require_compose, require_image

    require_compose()
    require_image()
    seen = _up_and_look(tmp_path, "--backend", "compose")
    _assert_it_served_and_dumped(seen)
    rendered = (seen["out"] / "rendered" / "compose.yaml").read_text()
    assert "host_ip: 127.0.0.1" in rendered and "LAB_DEBUG_SERVER_DIR: /lab/debug-server" in rendered
    left = subprocess.run(["docker", "ps", "-aq", "--filter",
                           f"label={RUN_LABEL}={seen['status']['run_id']}"],
                          capture_output=True, text=True).stdout
    assert left.strip() == ""


def test_kubernetes_says_the_port_forward_and_the_pods_get_the_server(tmp_path):
    from labctl import lab, spec as specmod
    from labctl.backends.k8s import render as k8s_render

    spec = specmod.from_dict({"name": "dbg", "backend": "k8s", "debug_server": {"interval": 5}})
    plan = lab.make_plan(spec, run_id="dbg-1")
    command = k8s_render.port_forward(plan, "team", "ctx")
    assert command == ("kubectl port-forward --context ctx -n team $(kubectl get pods --context ctx "
                       "-n team -l labctl.dev/run-id=dbg-1,batch.kubernetes.io/job-completion-index=0 "
                       "-o name) 25999:25999, then http://127.0.0.1:25999")
    assert k8s_render.port_forward(plan, "team", pod="dbg-0-abcde").startswith(
        "kubectl port-forward -n team pod/dbg-0-abcde 25999:25999")
    env = {e["name"]: e.get("value") for obj in k8s_render.render(plan) if obj["kind"] == "Job"
           for e in obj["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["LAB_DEBUG_SERVER"] == "25999" and env["LAB_DEBUG_SERVER_INTERVAL"] == "5"
    assert env["LAB_DEBUG_SERVER_DIR"] == "/tmp/labctl-debug-server"     # stays in the pod


@pytest.mark.parametrize("args, says", [
    (["--debug-server", "--replicas", "2"], "debug_server: expected a lab of one replica"),
    (["--debug-server", "--init-method", "file", "--launcher", "direct"], "has none"),
    (["--env", "LAB_DEBUG_SERVER=1"], "use debug_server (--debug-server) instead"),
])
def test_what_it_cannot_do_is_refused_in_one_line(args, says):
    done = labctl("validate", *args, timeout=60)
    assert done.returncode == 2 and says in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_a_lab_file_s_settings_are_kept_and_round_trip(tmp_path):
    from labctl import spec as specmod

    path = tmp_path / "lab.yaml"
    path.write_text("debug_server: {port: 26001, interval: 2.5}\n")
    spec = specmod.load(path, {"debug_server": True})       # --debug-server keeps them
    assert spec.debug_server == specmod.DebugServer(port=26001, interval=2.5)
    assert specmod.from_dict(spec.to_dict()) == spec
    bad = tmp_path / "bad.yaml"
    bad.write_text("debug_server: {port: 0}\n")
    done = labctl("validate", "-f", str(bad), timeout=60)
    assert done.returncode == 2 and "debug_server.port: expected a port number" in done.stderr


def test_locally_a_python_without_its_dependencies_is_refused_before_the_start(monkeypatch):
    from labctl import lab, spec as specmod
    from labctl.backends.base import PreflightError
    from labctl.backends.local import backend as local

    monkeypatch.setattr(local, "debug_server_missing", lambda: ["tabulate"])
    spec = specmod.from_dict({"debug_server": True})
    backend = local.LocalBackend()
    plan = lab.make_plan(spec, backend=backend)
    with pytest.raises(PreflightError, match=r"needs tabulate, which this Python .* lacks; pip install "
                                             r"'labctl\[debug\]'"):
        backend.preflight(plan)


def test_in_a_rank_without_them_rank_0_says_so_in_one_line_and_goes_on(monkeypatch, capsys):
    from workloads import _debugserver

    monkeypatch.setattr(_debugserver, "debug_server_missing", lambda: ["jinja2", "tabulate"])
    monkeypatch.setattr(_debugserver, "_started", False)
    monkeypatch.setenv("RANK", "0")
    _debugserver.start()                                     # no process group needed: it stops first
    err = capsys.readouterr().err
    assert err == ("labctl: debug server not started: this Python lacks jinja2, tabulate (torch's "
                   "frontend needs them; the lab's images have them; pip install 'labctl[debug]')\n")


def test_labctl_preflight_runs_without_it():
    from labctl import lab, spec as specmod

    spec = specmod.from_dict({"debug_server": True})
    assert lab.preflight_spec(spec).debug_server is None
