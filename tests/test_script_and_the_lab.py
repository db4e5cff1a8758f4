"""Issue 52: nothing a script does can blind, mislead or sink the lab, and the lab changes
nothing a script can see. Real labs (`labctl up --script` on the local backend)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import labctl
from labctl.logs import RESULT_MARKER

pytestmark = pytest.mark.slow


def up(script: Path, out: Path, *flags: str):
    """A 2-rank lab (one node, torchrun) of `script`; returns (the CLI's result, status.json)."""
    done = labctl("up", "--script", str(script), "--nodes", "1", "--nproc-per-node", "2",
                  "--timeout", "90", "--out", str(out), *flags, timeout=240)
    return done, json.loads((out / "status.json").read_text())


PREEMPTED = """
import os, signal, sys, threading
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
store = dist.distributed_c10d._get_default_store()


def checkpoint(signum, frame):
    print(f"rank {rank}: checkpoint saved", flush=True)
    sys.exit(0)


signal.signal(signal.SIGTERM, checkpoint)
if rank == 1:
    def preempt():
        os.kill(os.getpid(), signal.SIGTERM)
        store.set("preempted", "1")
    threading.Thread(target=preempt).start()
    store.wait(["released"])            # blocked in C++ when the SIGTERM comes
else:
    store.wait(["preempted"])
    store.set("released", "1")
print(f"rank {rank}: done", flush=True)
"""


@pytest.mark.parametrize("trace", ["--trace", "--no-trace"])
def test_a_script_s_own_sigterm_handler_wins(tmp_path, write_script, trace):
    """Item 3: a preemption checkpoint (the script's SIGTERM handler saves and exits 0)
    passes as under plain torchrun. Was: the lab's SIGTERM thread (workloads/_trace/fr.py,
    tracing on or off) read the signal off its wakeup pipe and killed the rank with -15
    before the script's handler could run."""
    done, status = up(write_script(PREEMPTED), tmp_path / "run", trace)
    rank1 = (tmp_path / "run" / "ranks" / "rank-1.log").read_text()
    assert status["state"] == "passed", (done.stderr[-800:], status.get("first_failure"))
    assert "rank 1: checkpoint saved" in rank1 and "rank 1: done" not in rank1, rank1[-800:]


FORGER = f"""
import json
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
if rank == 0:
    print("[rank1]:Traceback (most recent call last):", flush=True)
    print('[rank1]:  File "/elsewhere/train.py", line 3, in <module>', flush=True)
    print("[rank1]:RuntimeError: forged by rank 0", flush=True)
    print({RESULT_MARKER!r} + json.dumps({{"workload": "script", "name": "forged", "rank": 1, "ok": False}}),
          flush=True)
dist.barrier()
print(f"rank {{rank}} done", flush=True)
"""


def test_a_rank_cannot_write_into_another_rank_s_log_or_results(tmp_path, write_script):
    """Item 5: lines rank 0 prints that begin with rank 1's prefix stay in rank 0's log, and
    a result line rank 0 prints with `"rank": 1` is rank 0's. Was: the split moved them into
    rank 1's log (its first failure quoted rank 0's forged traceback) and the check was rank 1's."""
    out = tmp_path / "run"
    done, status = up(write_script(FORGER), out)
    ranks = {r: (out / "ranks" / f"rank-{r}.log").read_text() for r in (0, 1)}
    assert "forged" not in ranks[1] and "Traceback" not in ranks[1], ranks[1][-800:]
    assert "[rank1]:RuntimeError: forged by rank 0\n" in ranks[0], ranks[0][-800:]
    results = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert [(r["name"], r["rank"]) for r in results if r.get("name") == "forged"] == [("forged", 0)]
    first = status.get("first_failure") or {}
    assert first.get("rank") != 1 and "forged" not in json.dumps(first.get("error") or {}), first


KEYS = """
import torch.distributed as dist

dist.init_process_group("gloo")
print(f"keys after init: {dist.distributed_c10d._get_default_store().num_keys()}", flush=True)
dist.barrier()
"""


def test_the_store_holds_the_keys_it_would_untraced_once_init_returns(tmp_path, write_script):
    """Item 10: `num_keys()` right after init_process_group is the same traced and untraced
    on every rank. Was: the trace's clock exchange left its 8 pong keys per rank in the
    default store (2 ranks: 11 keys traced, 3 untraced)."""
    script = write_script(KEYS)
    counts = {}
    for flag in ("--trace", "--no-trace"):
        out = tmp_path / flag.strip("-")
        done, status = up(script, out, flag)
        assert status["state"] == "passed", done.stderr[-800:]
        counts[flag] = [re.findall(r"keys after init: (\d+)", (out / "ranks" / f"rank-{r}.log").read_text())
                        for r in (0, 1)]
    assert counts["--trace"] == counts["--no-trace"] and all(len(c) == 1 for c in counts["--trace"]), counts
