"""DDP on 2 nodes: step time and its communication share at a shaped link vs unshaped.

Runs benchmarks/ddp_step.py as the script of a compose lab of 2 nodes x 1 process,
once per --link value ("none": unshaped), and prints one row each: the median step
with DDP's gradient all_reduce, the same step without it (`no_sync()`), the share
of the step that is communication, and what the α–β model expects the gradient
all_reduce to take on that link (ring, n = 2: S / B, with B the configured rate).

    python benchmarks/ddp_link.py [--links 1gbit,none] [--hidden 2048] [--steps 8] [--image TAG]
"""
from __future__ import annotations

import argparse
import json
import os

from _harness import labctl, scratch, table

from labctl import links as linkmod
from workloads import _costmodel

HERE = os.path.dirname(os.path.abspath(__file__))


def run(link: str, hidden: int, steps: int, out, image: str | None) -> dict:
    args = ["up", "--backend", "compose", "--nodes", "2", "--nproc-per-node", "1", "--name", "ddplink",
            "--out", str(out), "-q", "--script", os.path.join(HERE, "ddp_step.py")]
    if image:
        args += ["--image", image]
    if link != "none":
        args += ["--link", link]
    done, seconds = labctl(*args, "--", "--hidden", str(hidden), "--steps", str(steps), timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"labctl {' '.join(args)} failed: {done.stderr.strip()[-800:]}")
    for line in (out / "results.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("workload") == "ddp_step" and record.get("name") == "step":
            return {**record, "lab_seconds": seconds}
    raise SystemExit(f"no ddp_step result in {out}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--links", default="1gbit,none", help="comma list of --link values; none: unshaped")
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--image", help="the labs' image (default: labctl-cpu:latest)")
    args = parser.parse_args()
    folder = scratch()
    rows = []
    for i, link in enumerate(args.links.split(",")):
        r = run(link, args.hidden, args.steps, folder / f"run-{i}", args.image)
        expected = ""
        if link != "none":
            bps = linkmod.parse_rate(link, "--links")
            p = _costmodel.predict(_costmodel.MODELS["gloo"]["all_reduce"], 0.0, bps / 8, r["world_size"],
                                   r["grad_bytes"])
            expected = f"{p.seconds * 1e3:.0f}"
        rows.append([link, f"{r['params'] / 1e6:.1f} M ({r['grad_bytes'] / 1e6:.1f} MB)",
                     f"{r['step_s_median'] * 1e3:.0f}", f"{r['compute_s_median'] * 1e3:.0f}",
                     f"{100 * r['communication_share']:.0f} %", expected])
    print(table(["link", "parameters (gradients)", "DDP step (ms)", "compute alone, no_sync (ms)",
                 "communication share", "model: gradient all_reduce (ms)"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
