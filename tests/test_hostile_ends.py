"""How a lab ends when a script does something odd, said right (issue 52 item 11), real
labs: bad trace records counted and said where people read (report.md, the page), the
first failure's own rank not "stopped after another failure", `raise SystemExit("...")`
reported with its message, and a traced rank on a full disk that goes on untraced instead
of dying of SIGBUS."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, labctl

LAB = ["--nodes", "1", "--nproc-per-node", "2", "--timeout", "120"]


def up(tmp_path: Path, body: str, *args: str) -> tuple[subprocess.CompletedProcess, Path, dict]:
    script = tmp_path / "script.py"
    script.write_text(body)
    out = tmp_path / "run"
    done = labctl("up", "-q", "--script", str(script), *LAB, *args, "--out", str(out), timeout=300)
    return done, out, json.loads((out / "status.json").read_text())


BAD_RECORDS = """
import torch, torch.distributed as dist
from workloads._trace import sink
dist.init_process_group("gloo")
t = torch.ones(4)
dist.all_reduce(t)
sink.out(b'@@labctl-trace {"k": "S", "s": "x"}\\n@@labctl-trace B 1 2\\n@@labctl-trace {garbled\\n')
dist.all_reduce(t)
dist.destroy_process_group()
"""


def test_bad_trace_records_are_counted_and_said_in_report_md_and_on_the_page(tmp_path):
    """status.json counted them (trace.bad_records); neither report.md nor the page said a word."""
    done, out, status = up(tmp_path, BAD_RECORDS, "--launcher", "direct")
    assert done.returncode == 0, done.stderr
    assert status["trace"]["bad_records"] == 6
    said = [n for n in status["notes"] if n.startswith("trace: 6 trace record(s) could not be used")]
    assert len(said) == 1 and re.search(r"\.rec:\d+: trace record with an unusable site: x\)", said[0])
    assert f"`labctl trace {out}` lists them" in said[0]
    assert said[0] in (out / "report.md").read_text()
    assert "trace: 6 trace record(s) could not be used" in (out / "report.html").read_text()


SELF_KILL = """
import os, signal, torch.distributed as dist
dist.init_process_group("gloo")
if dist.get_rank() == 1:
    os.kill(os.getpid(), signal.SIGKILL)
dist.barrier()
"""


def test_the_first_failure_s_own_rank_is_not_said_stopped_after_another_failure(tmp_path):
    done, out, status = up(tmp_path, SELF_KILL, "--launcher", "torchrun")
    assert done.returncode == 1
    assert status["first_failure"]["rank"] == 1 and status["rank_exit_codes"]["1"] == -9
    report = (out / "report.md").read_text()
    assert f"- rank 1 exited with code -9 (killed by SIGKILL: the first failure): {out}/ranks/rank-1.log" in report
    assert "- rank 1 exited with code -9 (stopped by its launcher after another failure)" not in report


SYSTEM_EXIT = """
import os
if os.environ.get("RANK") == "1":
    raise SystemExit("bad config: the learning rate must be above 0")
import torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()
"""


def test_a_system_exit_with_a_message_before_init_is_reported_with_its_message(tmp_path):
    """Python prints a SystemExit's message alone, no traceback: the first failure said
    'rank 1 on node 0 exited with code 1' and nothing of why."""
    # rank 0 waits in init_process_group for rank 1, who never comes, until --pg-timeout: the
    # node (direct: both ranks under one guard) ends then; 5 s (was 15), rank 1 has long exited
    done, out, status = up(tmp_path, SYSTEM_EXIT, "--launcher", "direct", "--pg-timeout", "5")
    assert done.returncode == 1
    want = ("rank 1 on node 0 exited with code 1: SystemExit: bad config: the learning rate must be above 0 "
            f"at {tmp_path / 'script.py'}:4")
    assert want in done.stderr and want in (out / "report.md").read_text()
    assert status["first_failure"]["error"]["exception"] == \
        "SystemExit: bad config: the learning rate must be above 0"
    log = (out / "ranks" / "rank-1.log").read_text()
    assert "_script.py" not in log and "runpy" not in log        # the lab's frames left out


@pytest.fixture
def tmpfs(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    path = tmp_path / "small"
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


FILL = """
import os, sys
from workloads._protocol import records
from workloads._trace import sink
sink.open_channel()                                               # its first segment, then
fd = os.open(os.path.join(sys.argv[1], "filler"), os.O_WRONLY | os.O_CREAT)     # the disk, full
try:
    while True:
        os.write(fd, b"x" * 65536)
except OSError:
    os.close(fd)
line = records.encode(records.Alive(123456789))
for _ in range((3 << 20) // len(line)):                           # 3 MiB of records: past what was reserved
    sink.out(line)
print("went on", flush=True)
"""


def test_a_record_file_that_cannot_grow_ends_the_trace_with_a_note_not_a_sigbus(tmpfs):
    """The recorder's mapped segment on a full disk: a page written that has no block
    killed the process with SIGBUS. Blocks are reserved ahead; when no more can be, the
    trace ends there, said once on stderr, and the process goes on."""
    records = tmpfs / "records"
    env = {**os.environ, "LAB_TRACE_DIR": str(records), "RANK": "0", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", FILL, str(tmpfs)], capture_output=True, text=True, env=env,
                          timeout=120, cwd=REPO)
    assert done.returncode == 0, (done.returncode, done.stderr)           # -7 (SIGBUS) before
    assert done.stdout == "went on\n"
    assert done.stderr.count("labctl: rank 0: its trace ends here: its record file cannot grow "
                             "(No space left on device)") == 1
    segment, = records.glob("rank-0.*.rec")
    assert segment.read_bytes().startswith(b"@@labctl-trace {")          # what fitted is there


FILL_LAB = """
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(4)
dist.all_reduce(t)
if dist.get_rank() == 0:
    try:
        with open("filler", "wb") as f:
            while True:
                f.write(b"\\0" * 65536)
                f.flush()
    except OSError:
        pass
dist.barrier()
for _ in range(2000):
    dist.all_reduce(t)
"""


def test_a_traced_lab_whose_disk_fills_is_stopped_by_its_storage_guard_and_no_rank_dies_of_sigbus(
        tmpfs, tmp_path):
    script = tmp_path / "fill.py"
    script.write_text(FILL_LAB)
    out = tmpfs / "run"
    done = labctl("up", "-q", "--script", str(script), *LAB, "--launcher", "direct", "--out", str(out), timeout=300)
    assert done.returncode == 1
    status = json.loads((out / "status.json").read_text())
    assert status["state"] == "error" and "no space left on device" in status["message"]
    # the node's ranks were stopped by labctl (SIGTERM: 143), none killed by SIGBUS (135) first
    assert [n["exit_code"] for n in status["node_outcomes"]] != [135]
    assert "SIGBUS" not in json.dumps(status)


@pytest.mark.parametrize("sink", ["_GilFileSink", "_FileSink"])
def test_threads_and_a_signal_handler_lose_no_record_while_the_sink_reserves_disk(tmp_path, sink):
    """The contended writers of tests/test_trace_witness.py with 4 KiB reserved at a time:
    a writer that reserves makes a call, where the others write; every record is there
    once, whole, in its thread's order."""
    from labctl import trace
    from test_trace_witness import CONTENDED

    body = CONTENDED.replace("_trace.SEGMENT = 1 << 16", "_trace.SEGMENT = 1 << 16\n_trace.RESERVE = 4096")
    if sink == "_FileSink":
        body = body.replace("sink = _trace._new_sink()",
                            "_trace._gil_writes_are_atomic = lambda: False\nsink = _trace._new_sink()")
    done = subprocess.run([sys.executable, "-c", body, sink], capture_output=True, text=True, timeout=300,
                          cwd=REPO, env={**os.environ, "LAB_TRACE_DIR": str(tmp_path), "RANK": "0"})
    assert done.returncode == 0, done.stderr
    handled = int(done.stdout.split()[-1])
    seen: dict[int, list[int]] = {}
    for path in sorted(tmp_path.glob("*.rec")):
        for line, whole in trace._source_lines(path):
            assert whole and trace.TORN not in line, line
            parts = line.split()
            if parts[1] == b"E":
                seen.setdefault(int(parts[2]), []).append(int(parts[3]))
    assert {k: v for k, v in seen.items() if k != 99} == {k: list(range(20000)) for k in range(5)}
    assert sorted(seen.get(99, [])) == list(range(handled))
