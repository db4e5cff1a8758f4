"""Scale: `labctl render` of a 1,024-node lab, and what `labctl --help` imports.

For every render target that exists (plan always; compose and k8s when their
renderers are installed) this times a fresh `labctl render <target>` process
(what a user waits for) and the render call alone in this process (plan +
renderer, median of 5). Then it checks in a subprocess that `labctl --help`
and `labctl render plan` import neither torch nor kubernetes, with
`python -X importtime` totals for the CLI's start.

    python benchmarks/scale.py [--nodes 1024]
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time

from _harness import LABCTL, REPO, median, table

TARGETS = ("plan", "compose", "k8s")
HEAVY = ("torch", "kubernetes", "matplotlib", "docker")


def in_process_seconds(target: str, nodes: int) -> tuple[float, int]:
    from labctl import backends, lab, spec

    the_spec = spec.load(None, {"nodes": nodes, "backend": "local" if target == "plan" else target})
    times, size = [], 0
    for _ in range(5):
        started = time.perf_counter()
        text = backends.render_text(target, lab.make_plan(the_spec, run_id="scale-0"))
        times.append(time.perf_counter() - started)
        size = len(text)
    return median(times), size


def heavy_imports(argv: list[str]) -> tuple[list[str], float]:
    """Heavy modules a CLI call imports, and the -X importtime total (ms) of its imports."""
    code = ("import sys\nfrom labctl.cli import main\n"
            f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
            f"print('HEAVY=' + ','.join(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True,
                          text=True, cwd=REPO, timeout=120)
    heavy = re.search(r"^HEAVY=(.*)$", done.stderr, re.M).group(1)
    # importtime lines: "import time: self [us] | cumulative | imported package"; sum top-level ones
    total_us = sum(int(m.group(1)) for m in re.finditer(r"^import time:\s+\d+ \|\s+(\d+) \| \S", done.stderr, re.M))
    return [h for h in heavy.split(",") if h], total_us / 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1024)
    args = parser.parse_args()
    rows = []
    for target in TARGETS:
        argv = [*LABCTL, "render", target, "--nodes", str(args.nodes)]
        started = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=300)
        cli_s = time.perf_counter() - started
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            rows.append([target, "-", "-", "-", f"not available: {last[:120]}"])
            continue
        call_s, size = in_process_seconds(target, args.nodes)
        rows.append([target, f"{cli_s:.3f}", f"{call_s:.3f}", f"{size / 1e3:.1f}",
                     "met" if call_s < 1.0 else "MISSED"])
    print(f"## Scale: render a {args.nodes}-node lab\n")
    print(table(["target", "CLI wall (s, fresh process)", "plan+render call (s, median of 5)",
                 "output (kB)", "call < 1 s"], rows))
    print("\n## Light CLI: heavy modules imported\n")
    checks = []
    for argv in (["--help"], ["render", "plan", "--nodes", "4"]):
        heavy, ms = heavy_imports(argv)
        checks.append([f"labctl {' '.join(argv)}", ", ".join(heavy) or "none", f"{ms:.0f}",
                       "met" if not {"torch", "kubernetes"} & set(heavy) else "MISSED"])
    print(table(["command", "heavy modules imported", "imports, cumulative (ms, -X importtime)",
                 "no torch/kubernetes"], checks))
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
