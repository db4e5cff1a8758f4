"""Link: the lab's busbw as a fraction of what loopback TCP carries on this machine.

The reference is iperf3 over 127.0.0.1 when iperf3 is installed (apt-get
install iperf3), else the bench workload's own `link` measurement. The lab
runs 2 nodes x 1 process (one rank per node, so the ranks talk over the
"link" and do not share it with a node-local peer).

    python benchmarks/link.py [--seconds 3] [--max-bytes 67108864]
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import threading

from _harness import labctl, scratch, table, write_lab

from labctl.backends.local.backend import free_port
from workloads._report.bench import link_GBps, rows
from labctl.rundir import RunDir


def iperf3_GBps(seconds: float) -> float | None:
    """Loopback TCP throughput (received) measured by iperf3, or None without iperf3."""
    if shutil.which("iperf3") is None:
        return None
    port = str(free_port())
    server = subprocess.Popen(["iperf3", "-s", "-1", "--forceflush", "-B", "127.0.0.1", "-p", port],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    watchdog = threading.Timer(seconds + 60, server.kill)     # never wait forever on iperf3
    watchdog.start()
    try:
        # wait for its banner: a probe connection would use up this one-off server's test
        for line in server.stdout:
            if "Server listening" in line:
                break
        done = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", port, "-t", str(seconds), "-J"],
                              capture_output=True, text=True, timeout=seconds + 30)
    finally:
        watchdog.cancel()
        try:
            server.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    if done.returncode != 0:
        raise SystemExit(f"iperf3 failed: {done.stdout[-500:]} {done.stderr[-500:]}")
    return json.loads(done.stdout)["end"]["sum_received"]["bits_per_second"] / 8 / 1e9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="iperf3 duration")
    parser.add_argument("--min-bytes", type=int, default=1 << 20)
    parser.add_argument("--max-bytes", type=int, default=64 << 20)
    parser.add_argument("--iters", type=int, default=10)
    args = parser.parse_args()
    iperf = iperf3_GBps(args.seconds)
    folder = scratch()
    try:
        spec = write_lab(folder, name="link", nodes=2, nproc_per_node=1, timeout=900, workloads=[{
            "name": "bench", "options": {
                "ops": ["all_reduce", "broadcast", "pingpong", "ring"], "min_bytes": args.min_bytes,
                "max_bytes": args.max_bytes, "factor": 8, "iters": args.iters, "warmup_iters": 2,
                "link_bytes": 1 << 30, "link_seconds": args.seconds}}])
        done, _ = labctl("up", "-f", str(spec), "-q", "--out", str(folder / "run"))
        if done.returncode != 0:
            raise SystemExit(f"labctl up failed: {done.stderr.strip()[-2000:]}")
        results = RunDir.open(folder / "run").results()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    own = link_GBps(results)
    reference, source = (iperf, "iperf3 -c 127.0.0.1") if iperf else (own, "bench workload link test")
    print("## Link: lab busbw vs loopback TCP (2x1 gloo, local backend)\n")
    print(table(["link measurement", "GB/s"], [
        ["iperf3 over 127.0.0.1" + ("" if iperf else " (not installed)"), f"{iperf:.3f}" if iperf else "-"],
        ["bench workload `link` (rank 0 -> node 1, same address as gloo)", f"{own:.3f}" if own else "-"],
    ]))
    print(f"\nreference: {source}\n")
    print(table(["op", "size (B)", "time median (us)", "busbw (GB/s)", "busbw / reference"],
                ([r["op"], r["size_bytes"], f"{r['time_us_median']:.1f}", f"{r['busbw_GBps']:.3f}",
                  f"{r['busbw_GBps'] / reference:.3f}"] for r in rows(results))))
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
