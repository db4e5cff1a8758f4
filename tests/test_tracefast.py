"""The recorder's C fast path (workloads/_tracefast.c): built by the project's install,
in use when it is, and writing exactly the records the Python wrappers write, call for
call, on the paths it takes and on those it hands back to Python (a list input, keywords,
a tensor that needs grad, a coalescing block, a recv from any source, an op that raises,
the call-site table cleared, a new segment file). Real processes: two ranks under
torchrun, the same script once with LAB_TRACE_FAST=1 and once with 0."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from workloads._protocol import records
from workloads._protocol.ports import free_port

BUILT = any(REPO.joinpath("workloads").glob("_tracefast*.so"))

# Every branch of the wrapper, on 2 ranks. The table of call sites is cleared every 5 sites
# (MAX_SITES) and the record file changes segment every 4 KiB, so the fast path's site
# cache and its writes into the mapping meet both.
SCRIPT = """
import os, sys
import torch, torch.distributed as dist
from workloads import _trace
_trace.MAX_SITES = 5
_trace.SEGMENT = 4096
dist.init_process_group("gloo")
r = dist.get_rank(); peer = 1 - r
fast = type(dist.ProcessGroup.send).__name__
with open(f"wrappers-{r}.txt", "w") as f:              # a file each: the ranks' stdout interleave
    f.write(f"{fast} {type(dist.Work.wait).__name__}")
t = torch.ones(4)
for i in range(30):                                     # a loop at the script's top level
    for w in (dist.isend(t, peer), dist.irecv(torch.empty(4), peer)):
        w.wait()
    dist.all_reduce(t)
    if i % 7 == 0:
        dist.all_reduce(t, op=dist.ReduceOp.MAX)        # another site of the same method
def inner(x):
    dist.broadcast(x, src=1)                            # a root, as a global rank
    dist.send(x, peer) if r == 0 else dist.recv(x, peer)
    dist.barrier()                                      # no input
for _ in range(3):
    inner(torch.zeros(3, dtype=torch.float64))
try:
    dist.broadcast(t, src=7)                            # raises before it is issued
except (ValueError, RuntimeError):
    pass
g = dist.new_group([0, 1])
dist.all_reduce(t, group=g)
out = [torch.zeros(4) for _ in range(2)]
dist.all_gather(out, t)                                 # a list input: the Python wrapper
g.allreduce([t]).wait()                                 # a list of one tensor
dist.ProcessGroup.allreduce(dist.group.WORLD, tensors=[t]).wait()   # keywords: the Python wrapper
dist.all_reduce(torch.ones(2, requires_grad=True) * 1)  # a tensor that needs grad: the Python wrapper
ops = [dist.P2POp(dist.isend, t, peer), dist.P2POp(dist.irecv, torch.empty(4), peer)]
for w in dist.batch_isend_irecv(ops):                   # a coalescing block: the Python wrapper
    w.wait()
if r == 0:
    dist.recv(torch.empty(4))                           # from any source
else:
    dist.send(t, 0)
w = dist.all_reduce(t, async_op=True)
w.is_completed(); w.wait()
dist.barrier()
dist.destroy_process_group()
"""


def run(tmp_path: Path, fast: str) -> dict[int, list[str]]:
    """Each rank's record lines, times and process ids taken out, in file order."""
    script, folder = tmp_path / "ops.py", tmp_path / f"records-{fast}"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO), "LAB_TRACE": "1", "LAB_TRACE_DIR": str(folder),
           "LAB_TRACE_FAST": fast, "OMP_NUM_THREADS": "1"}
    # a rendezvous port below the kernel's ephemeral range, as a local lab takes it
    # (workloads/_protocol/ports.py), not --standalone's port 0
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
                           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}",
                           "-m", "workloads._script", str(script)], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    wrappers = {tuple((tmp_path / f"wrappers-{rank}.txt").read_text().split()) for rank in (0, 1)}
    assert wrappers == ({("Traced", "Wait")} if fast == "1" else {("function", "function")}), wrappers
    lines: dict[int, list[str]] = {}
    for rank in (0, 1):
        files = sorted(folder.glob(f"rank-{rank}.*.rec"))
        assert len(files) > 2, f"rank {rank}: {len(files)} segment file(s); the script wanted several"
        text = b"".join(f.read_bytes().rstrip(b"\0") for f in files).decode()
        lines[rank] = [normalize(x) for x in text.splitlines() if x.startswith(records.TRACE_MARKER)
                       and '"k":"C"' not in x]          # the clock offsets are measured values
    return lines


def normalize(line: str) -> str:
    line = re.sub(r'"(t0|t|pid|ms|rtt_ms)":[-0-9.e]+', r'"\1":_', line)
    fields = line.split(" ")
    if len(fields) >= 3 and fields[1] == "B":          # B <id> <site> <seq> <t>
        fields[5] = "_"
    elif len(fields) >= 3 and fields[1] == "E":        # E <id> <t> [<peer>]
        fields[3] = "_"
    return " ".join(fields)


@pytest.mark.skipif(not BUILT and not os.environ.get("CI"),
                    reason="workloads/_tracefast.c is not built here (`make setup` builds it)")
def test_the_fast_path_is_built_by_the_install_and_writes_what_the_python_wrappers_write(tmp_path):
    """Under CI the install must have built it (a C compiler is there): not skipped."""
    assert BUILT, "workloads/_tracefast*.so is missing: `make setup` (pip install -e .) builds it"
    fast, python = run(tmp_path, "1"), run(tmp_path, "0")
    for rank in (0, 1):
        assert len(fast[rank]) > 150, len(fast[rank])
        assert fast[rank] == python[rank], "\n".join(
            f"{a!r} != {b!r}" for a, b in zip(fast[rank], python[rank]) if a != b)
        # every op's site was described in the rank's records before the op (after the
        # table was cleared too), and every op began before it ended
        described, begun = set(), set()
        for line in fast[rank]:
            fields = line.split(" ")
            if fields[1].startswith('{"k":"S"'):
                described.add(int(re.search(r'"s":(\d+)', line).group(1)))
            elif fields[1] == "B":
                assert int(fields[3]) in described, line
                begun.add(int(fields[2]))
            elif fields[1] == "E":
                assert int(fields[2]) in begun, line
        assert len([x for x in fast[rank] if '"k":"S"' in x]) > 10      # the clears made sites anew
        assert any('"k":"R"' in x for x in fast[rank])                  # the raised broadcast
