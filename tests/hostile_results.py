"""A script that prints hostile `@@labctl-result` lines (issue 52 item 2): huge, negative,
NaN, infinite, nested and wrongly typed values in the fields labctl computes with, for
every workload whose plugin reads them, and beside them a small honest bench sweep.

Shared by tests/test_hostile_results.py (a real lab) and benchmarks/hostile_results.py
(labctl's peak RSS). Every hostile line must be left out and counted, the honest ones
kept: `labctl up` ends as the script did, in flat memory, and `report`, the page,
`predict` and `compare` answer from the honest rows.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

# (workload, name, the honest record's other fields, the fields to spoil): one record of
# each kind labctl's plugins read, as the workloads write it
FAMILIES: list[tuple[str, str, dict, tuple[str, ...]]] = [
    ("bench", "all_reduce", {"size_bytes": 4096, "count": 1024, "dtype": "float32", "wrong": 0, "iters": 10,
                             "world_size": 2, "time_us_median": 50.0, "time_us_p99": 60.0, "algbw_GBps": 0.08,
                             "busbw_GBps": 0.08, "times_us": [50.0] * 10},
     ("size_bytes", "count", "wrong", "iters", "world_size", "time_us_median", "time_us_p99", "algbw_GBps",
      "busbw_GBps", "times_us")),
    ("bench", "bench_env", {"world_size": 2, "nodes": 1, "nproc_per_node": 2, "dist_backend": "gloo",
                            "min_bytes": 1024, "max_bytes": 4096, "factor": 2, "iters": 10, "warmup_iters": 1,
                            "nccl": None, "ranks": [{"rank": 0, "pid": 1}]},
     ("world_size", "nodes", "nproc_per_node", "min_bytes", "max_bytes", "factor", "iters", "ranks")),
    ("bench", "link", {"bytes": 1 << 20, "seconds": 0.01, "GBps": 0.1, "src_node": 0, "dst_node": 0, "dst_rank": 1},
     ("bytes", "seconds", "GBps", "src_node", "dst_node", "dst_rank")),
    ("links", "pair", {"src_node": 0, "dst_node": 1, "src_rank": 0, "dst_rank": 1, "p2p_Bps": 1e8,
                       "one_way_us": 80.0, "bytes": 1 << 20, "iters": 3},
     ("src_node", "dst_node", "p2p_Bps", "one_way_us", "bytes", "iters")),
    ("links", "links_env", {"nodes": {"0": {"rank": 0}}, "rounds": [[[0, 1]]], "round_seconds": [1.0],
                            "slow_fraction": 0.5},
     ("nodes", "rounds", "round_seconds", "slow_fraction")),
    ("elastic", "attempt", {"node": 0, "local_rank": 0, "pid": 10, "time": 1.0, "restart_count": 0, "first_step": 0},
     ("node", "local_rank", "pid", "time", "restart_count", "first_step")),
    ("preflight", "port", {"node": 0, "peer": 0, "value": "a:1"}, ("node", "peer")),
    ("pp", "gpipe-matches-single-process", {"max_diff": 0.0, "tolerance": 1e-6, "bitwise": True},
     ("tolerance:shown", "max_diff:shown")),
    ("pp", "data", {"call": "gpipe-schedule", "ranks": 2, "microbatches": 2, "stages_per_rank": 1, "compute_ms": 1,
                    "intervals": [[0, 0, 0, "F", 1.0, 2.0]]},
     ("ranks", "microbatches", "stages_per_rank", "compute_ms", "intervals")),
    ("env", "env", {}, ("seconds", "world_size", "ok")),
]
_DEEP = "[" * 40 + "1" + "]" * 40
# each spoils any field above: a number out of every bound, not a number, not finite, nested
SPOILED = ("1e308", "-1e308", "-5", "NaN", "Infinity", "-Infinity", "1" + "0" * 30, "1e20", '"7"',
           '{"v": [7]}', _DEEP, "[NaN]", '["x"]')
# a field only shown (a pattern's largest difference may be NaN or huge): no number there is
# wrong, but anything else is, and an int no float can hold
NOT_A_NUMBER = ('"7"', '{"v": [7]}', _DEEP, "[NaN]", '["x"]', "1" + "0" * 400)


def hostile_lines(count: int) -> list[str]:
    """`count` result lines, each one field of one family spoiled (JSON text, as a script
    prints it: NaN and Infinity are what Python's json writes)."""
    cases = [(w, n, base, f.split(":")[0], v) for w, n, base, fields in FAMILIES for f in fields
             for v in (NOT_A_NUMBER if f.endswith(":shown") else SPOILED)]
    lines = []
    for i in range(count):
        workload, name, base, field, value = cases[i % len(cases)]
        honest = {"workload": workload, "name": name, "ok": True, **base}
        honest.pop(field, None)
        # the spoiled field last, written as text (as a script may print it: 10^400 is no float)
        lines.append(json.dumps(honest)[:-1] + f', "{field}": {value}}}')
    return lines


def honest_sweep() -> list[dict]:
    """A small bench sweep (pingpong and all_reduce, 4 sizes, times growing with size) and
    its environment: what `predict` and `compare` answer from."""
    out = [{"workload": "bench", "name": "bench_env", "ok": True, "dist_backend": "gloo", "world_size": 2,
            "nodes": 1, "nproc_per_node": 2, "dtype": "float32", "links": None},
           {"workload": "bench", "name": "link", "ok": True, "bytes": 1 << 20, "seconds": 0.001, "GBps": 1.05,
            "src_node": 0, "dst_node": 0, "dst_rank": 1}]
    for op, alpha, steps in (("pingpong", 100.0, 1), ("all_reduce", 100.0, 2)):
        for size in (1 << 14, 1 << 16, 1 << 18, 1 << 20):
            t = steps * alpha + size / 1e3        # µs: α plus 1 GB/s
            out.append({"workload": "bench", "name": op, "ok": True, "size_bytes": size, "count": size // 4,
                        "dtype": "float32", "wrong": 0, "iters": 10, "world_size": 2, "time_us_median": t,
                        "time_us_p99": t * 1.1, "algbw_GBps": size / t / 1e3, "busbw_GBps": size / t / 1e3,
                        "times_us": [t * (0.9 + 0.02 * i) for i in range(10)]})
    return out


def script(count: int = 1000) -> str:
    """The rank script: rank 0 prints the honest sweep and `count` hostile lines."""
    return (
        "import os, sys\n"
        f"LINES = {hostile_lines(count)!r}\n"
        f"HONEST = {[json.dumps(r) for r in honest_sweep()]!r}\n"
        "if os.environ.get('RANK', '0') == '0':\n"
        "    for line in HONEST + LINES:\n"
        "        sys.stdout.write('@@labctl-result ' + line + '\\n')\n"
        "    sys.stdout.flush()\n"
    )


def peak_rss(argv: list[str], out: Path, cwd: Path, kill_above_mib: int = 2048, timeout: float = 600
             ) -> tuple[int, float, str, str]:
    """Run `argv` with stdout and stderr in files; its own peak RSS (VmHWM, read until it
    exits) in MiB. A process past `kill_above_mib` is killed (the code before this fix grew
    to 23 GB on a machine others share), and so is one past `timeout`."""
    stdout, stderr = out / "stdout.txt", out / "stderr.txt"
    with open(stdout, "w") as o, open(stderr, "w") as e:
        proc = subprocess.Popen(argv, cwd=cwd, stdout=o, stderr=e)
    peak, started = 0.0, time.monotonic()
    status = Path(f"/proc/{proc.pid}/status")
    while proc.poll() is None:
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
            peak = max(peak, int(fields["VmHWM"].split()[0]) / 1024)
            if int(fields["VmRSS"].split()[0]) / 1024 > kill_above_mib or time.monotonic() - started > timeout:
                os.kill(proc.pid, signal.SIGKILL)
        except (OSError, KeyError, ValueError):
            pass
        time.sleep(0.02)         # sampling a process's memory: there is no event to wait on
    return proc.returncode, peak, stdout.read_text(), stderr.read_text()
