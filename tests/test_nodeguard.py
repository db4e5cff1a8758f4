"""The local node guard on its own, with real processes (the lab around it:
tests/test_backend_local.py, tests/test_local_hostile.py)."""
import json
import signal
import subprocess
import sys
import time

import pytest

from labctl import logs
from labctl.backends.local import nodeguard


def test_the_idle_agent_line_is_the_one_the_log_reader_knows():
    assert nodeguard.AGENT_IDLE_LINE.startswith(logs.AGENT_IDLE_LINE)
    reader = logs.NodeLogReader()
    reader.feed_line(nodeguard.AGENT_IDLE_LINE.encode())
    assert reader.workers_succeeded


# `: > started` is the shell's own (no child): the file says the agent runs and, in the
# second, that its worker was forked
@pytest.mark.parametrize("agent, idle", [
    (": > started; exec sleep 60", True),         # like torchrun at its exit barrier
    ("sleep 60 & : > started; wait", False),      # an agent whose worker still runs
])
def test_a_stopped_agent_with_no_workers_left_is_said_to_be_idle(tmp_path, agent, idle):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"nodes": [{"processes": [
        {"rank": None, "argv": ["sh", "-c", agent], "env": {}}]}]}))
    log = tmp_path / "node-0.log"
    with open(log, "wb") as out:
        guard = subprocess.Popen([sys.executable, nodeguard.__file__, "--plan", str(plan),
                                  "--node", "0", "--status", str(tmp_path / "exit.json"),
                                  "--grace", "5"], stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
        deadline = time.monotonic() + 60
        while not (tmp_path / "started").exists():   # the agent (and its worker) started
            assert guard.poll() is None and time.monotonic() < deadline, "the agent never started"
            time.sleep(0.02)
        # one SIGTERM, as soon as the agent runs: the guard may still be starting its processes
        # (was dropped then, 5 runs in 20 here; nodeguard.main keeps it now)
        guard.send_signal(signal.SIGTERM)
        assert guard.wait(timeout=30) != 0
    assert (nodeguard.AGENT_IDLE_LINE in log.read_text()) is idle
    assert json.loads((tmp_path / "exit.json").read_text())["stopped"] == "stopped by labctl"


def test_a_rank_log_keeps_an_over_long_line_as_the_rank_printed_it(tmp_path):
    """3 MiB and a bit in one line, no newline anywhere: the rank's own log holds exactly
    those bytes (was: a newline inserted every 1,048,577 bytes); only the node log, a
    prefixed view, ends its pieces (readers split long lines, the files keep them)."""
    printed = b"0123456789abcdef" * (3 << 16) + b"tail"
    code = ("import sys; b = b'0123456789abcdef' * (3 << 16) + b'tail'\n"
            "for i in range(0, len(b), 4096): sys.stdout.buffer.write(b[i:i + 4096]); sys.stdout.flush()")
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"nodes": [{"processes": [
        {"rank": 0, "argv": [sys.executable, "-c", code], "env": {}}]}]}))
    (tmp_path / "ranks").mkdir()
    with open(tmp_path / "node-0.log", "wb") as out:
        done = subprocess.run([sys.executable, nodeguard.__file__, "--plan", str(plan), "--node", "0",
                               "--status", str(tmp_path / "exit.json"), "--rank-logs",
                               str(tmp_path / "ranks"), "--own-log", str(tmp_path / "guard.txt")],
                              stdout=out, timeout=120)
    assert done.returncode == 0
    assert (tmp_path / "ranks" / "rank-0.log").read_bytes() == printed
    node = (tmp_path / "node-0.log").read_bytes()
    pieces = [line for line in node.split(b"\n") if line.startswith(b"[rank0]:")]
    assert b"".join(p[len(b"[rank0]:"):] for p in pieces) == printed
    assert max(map(len, pieces)) <= nodeguard.MAX_PIECE + len(b"[rank0]:") + nodeguard.PUMP_READ
