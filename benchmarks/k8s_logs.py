"""labctl's peak memory while it brings a big pod log home (the k8s backend, issue 28).

No API server runs here, so the pod is the in-memory API of
tests/test_backend_k8s.py: its log is made as the real client reads it (a real
urllib3 response over a fake socket, 1 KiB lines), and `labctl collect --backend
k8s` runs on it in a child process: the log streamed into the node log, then
split per rank (finalize), the report written. For each size the table gives
the child's peak RSS (VmHWM) before the collection (imports, the fakes) and at
the end, the growth, and the seconds of the collection. `--old` reads the log
as the backend did before issue 28 (`read_namespaced_pod_log` without
`_preload_content=False`: the client holds the bytes and decodes them into one
string), for comparison.

    python benchmarks/k8s_logs.py [--sizes 1,100,1024] [--old]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from labctl.report import table  # noqa: E402

CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, {tests!r})
from labctl import lab
from labctl.backends.k8s import backend as k8s
import test_backend_k8s as fakes

mib, old, out = {mib}, {old}, {out!r}
k8s.POLL_S = 0.01
state = fakes.FakeState()
fakes.applied(None, state, ticks=4)
line = b"[rank0]:" + b"x" * 1015 + b"\n"
results = state.pod_logs["lab-0-x0z"]              # the ranks' result lines, then the output
def log():
    yield results
    for _ in range(mib * 16):
        yield line * 64                             # 64 KiB pieces
state.pod_logs["lab-0-x0z"] = log
if old:                   # before issue 28: the whole log as one string, then written
    def save_pod_log(self, pod, container, path):
        text = self.core.read_namespaced_pod_log(pod, self.namespace, container=container)
        path.write_text(text)
        return len(text)
    k8s.Cluster.save_pod_log = save_pod_log
rss = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
before = rss()
t0 = time.perf_counter()
run = lab.collect("k8s", "lab-applied", out=out, progress=lambda line: None,
                  cluster=fakes.fake_cluster(state))
seconds = time.perf_counter() - t0
assert run.node_log(0).stat().st_size == (mib << 20) + len(results), run.node_log(0).stat().st_size
print(json.dumps({{"before": before, "peak": rss(), "seconds": seconds,
                   "state": run.status["state"]}}))
"""


def measure(mib: int, old: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        code = CHILD.format(tests=str(REPO / "tests"), mib=mib, old=old, out=str(Path(tmp) / "run"))
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              cwd=REPO, timeout=3600)
        if done.returncode != 0:
            raise SystemExit(f"the child failed:\n{done.stderr[-3000:]}")
        return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,100", help="pod log sizes in MiB (default 1,100)")
    parser.add_argument("--old", action="store_true", help="also the read before issue 28")
    args = parser.parse_args()
    rows = []
    for mib in (int(s) for s in args.sizes.split(",")):
        for old in ([False, True] if args.old else [False]):
            r = measure(mib, old)
            rows.append([f"{mib} MiB", "one string (before)" if old else "streamed",
                         f"{r['before']:.0f}", f"{r['peak']:.0f}", f"{r['peak'] - r['before']:.0f}",
                         f"{r['seconds']:.1f}", r["state"]])
    print(table(["pod log", "read", "RSS before (MiB)", "peak RSS (MiB)", "growth (MiB)",
                 "collect (s)", "state"], rows))


if __name__ == "__main__":
    main()
