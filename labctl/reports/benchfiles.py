"""The files a bench run adds next to report.md: nccl-tests' JSON per op (-J, read by
nccl-tests' own tools) and the PNG plots (matplotlib, an extra). The host writes them
(atomically: a signal mid-write leaves no half file); what they hold is read from the
plugin's rows and environment (workloads/_report/bench.py).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from workloads._protocol.algorithms import NCCL_TESTS_PROGRAM

from ..atomicfile import atomic_open
from ..errors import LabError
from ..plugins import part
from .benchcompare import layout

bench = part("bench")
PLOTS = ("bench_busbw.png", "bench_latency.png")


def write_files(run) -> list[Path]:
    """The nccl-tests JSON files, then the plots, when the run has bench rows; a missing
    matplotlib is a note, not an error (the JSON files are written before it is said)."""
    written = write_nccl_tests(run)
    return written + write_plots(run)


# ---- nccl-tests' JSON (-J), one file per op --------------------------------------------
# The schema nccl-tests 2.19 writes (src/util.cu, JSON_FILE_VERSION 3; a copy of its shape:
# tests/golden/nccl-tests/all_reduce_perf.json). A file holds one program's run, so one op:
# bench-nccl-tests-<program>.json in the run folder, read by nccl-tests' own tools
# (tools/analyze_perf_json.py reads the per-iteration blocks).
NCCL_TESTS_VERSION = 3
NCCL_TESTS_FILE = "bench-nccl-tests-{program}.json"
NCCL_TYPES = {"float32": "float", "float": "float", "float16": "half", "half": "half", "bfloat16": "bfloat16",
              "float64": "double", "double": "double", "int32": "int32", "int": "int32", "int64": "int64",
              "int8": "int8", "uint8": "uint8"}
# What the bench times: torch's in-place call (all_reduce, broadcast, reduce write their input)
# or out-of-place (separate output); nccl-tests times both and writes both, null where not run.
IN_PLACE = ("all_reduce", "broadcast", "reduce")


def _nccl_stats(times_us: list[float]) -> dict[str, Any]:
    """nccl-tests' computeIterStats and writePerIterReport (src/util.cu), on microseconds."""
    import math

    xs = sorted(times_us)
    n = len(xs)
    avg = sum(xs) / n
    stdev = math.sqrt(sum((x - avg) ** 2 for x in xs) / n)
    at = lambda pct: xs[min(n - 1, (n * pct + 99) // 100 - 1)]     # noqa: E731  percentileIndex
    return {"skipped_iterations": 0, "min_us": xs[0], "max_us": xs[-1], "avg_us": avg, "p50_us": xs[n // 2],
            "p95_us": at(95), "p99_us": at(99), "stdev_us": stdev,
            "cv_pct": stdev / avg * 100.0 if avg > 0 else 0.0, "times_us": list(times_us)}


def _nccl_count(op: str, count: int, n: int) -> int:
    """nccl-tests' `count` column: the op's parameter count (per rank for the gathers)."""
    return count // n if op in ("all_gather", "reduce_scatter", "all_to_all") and n else count


def _nccl_time(seconds: str) -> str:
    """An ISO time (the run record's) as nccl-tests writes times: %Y-%m-%d %H:%M:%S."""
    from datetime import datetime

    try:
        return datetime.fromisoformat(seconds).astimezone().strftime("%Y-%m-%d %H:%M:%S")
    except (TypeError, ValueError):
        return seconds or ""


def nccl_tests_documents(results: list[dict], started: str = "", ended: str = "") -> dict[str, dict]:
    """Each op's measurements as nccl-tests' JSON document for its program (-J), keyed by
    the program name. Times are nccl-tests': the mean over the timed iterations, from the
    per-iteration times the bench records (the bench's own tables use the median)."""
    env = bench.environment(results)
    raw = [r for r in bench.bench_records(results) if r.get("name") in bench.OPS and "size_bytes" in r and r.get("rank", 0) == 0]
    if not raw:
        return {}
    n = int(raw[0].get("world_size") or env.get("world_size") or 0)
    nccl = env.get("nccl")
    version = 0
    if nccl:
        x, y, z = (list(map(int, str(nccl).split(".")[:3])) + [0, 0, 0])[:3]
        version = x * 10000 + y * 100 + z if (x, y) >= (2, 9) else x * 1000 + y * 100 + z
    ranks = env.get("ranks") or [{"rank": r} for r in range(n)]
    devices = [{"rank": int(d.get("rank", i)), "group": 0, "pid": int(d.get("pid") or 0),
                "hostname": str(d.get("hostname") or (env.get("hostname") if i == 0 else "") or ""),
                "device": int(d.get("device", -1) if d.get("device") is not None else -1),
                "device_hex": "", "device_info": str(env.get("device") or "cpu")} for i, d in enumerate(ranks)]
    env_lines = [f"{k}={env[k]}" for k in ("OMP_NUM_THREADS", "GLOO_SOCKET_IFNAME") if env.get(k) is not None]
    env_lines += [f"LAB_DIST_BACKEND={env['dist_backend']}"] if env.get("dist_backend") else []
    env_lines += [f"LAB_LINKS={env['links']}"] if env.get("links") else []
    docs: dict[str, dict] = {}
    for op in bench.OPS:
        mine = sorted((r for r in raw if r["name"] == op), key=lambda r: r["size_bytes"])
        if not mine:
            continue
        program = NCCL_TESTS_PROGRAM[op]
        dtype = str(mine[0].get("dtype") or env.get("dtype") or "float32")
        args = [program, "-b", str(env.get("min_bytes", mine[0]["size_bytes"])),
                "-e", str(env.get("max_bytes", mine[-1]["size_bytes"])), "-f", str(env.get("factor", 2)),
                "-w", str(env.get("warmup_iters", 0)), "-n", str(mine[0].get("iters") or env.get("iters", 1)),
                "-d", NCCL_TYPES.get(dtype, dtype), "-g", "1", "-I", "1"]
        if op in ("all_reduce", "reduce_scatter", "reduce", "ring"):
            args += ["-o", "sum"]
        if op in ("broadcast", "reduce"):
            args += ["-r", "0"]
        args += ["-J", NCCL_TESTS_FILE.format(program=program)]
        results_out, wrong, busbws = [], 0, []
        for r in mine:
            times = r.get("times_us") or [r["time_us_median"]]
            stats = _nccl_stats(times)
            size = int(r["size_bytes"])
            avg_s = stats["avg_us"] / 1e6
            algbw = size / avg_s / 1e9 if avg_s > 0 else 0.0
            busbw = algbw * bench.busbw_factor(op, n) if n else 0.0
            busbws.append(busbw)
            wrong += int(r.get("wrong") or 0)
            body = {"time": stats["avg_us"], "alg_bw": algbw, "bus_bw": busbw, "nwrong": float(r.get("wrong") or 0)}
            if r.get("rank_times_us"):
                stats[PROCESS_TIMES_KEY] = r["rank_times_us"]
            row: dict[str, Any] = {
                "size": size, "count": _nccl_count(op, int(r.get("count") or 0), n),
                "type": NCCL_TYPES.get(dtype, dtype),
                "redop": "sum" if op in ("all_reduce", "reduce_scatter", "reduce", "ring") else "none",
                "root": f"{0 if op in ('broadcast', 'reduce') else -1:6d}"}
            if op in IN_PLACE:
                row.update({"out_of_place": None, "in_place": body, "in_place_per_iter": stats})
            else:
                row.update({"out_of_place": body, "out_of_place_per_iter": stats, "in_place": None})
            row.update({"actual_iterations": len(times), "experiment_name": ""})
            results_out.append(row)
        docs[program] = {
            "version": NCCL_TESTS_VERSION, "start_time": _nccl_time(started) or str(env.get("start_time") or ""),
            "args": args, "env": env_lines, "nccl_version": version,
            "config": {"nthreads": 1, "ngpus": 1, "minimum_bytes": int(env.get("min_bytes", mine[0]["size_bytes"])),
                       "maximum_bytes": int(env.get("max_bytes", mine[-1]["size_bytes"])),
                       "step_factor": int(env.get("factor", 2)), "warmup_iters": int(env.get("warmup_iters", 0)),
                       "iterations": int(mine[0].get("iters") or env.get("iters", 1)), "aggregated_iterations": 1,
                       "validation": 1, "graph": 0, "blocking_collectives": False, "per_iter_timing": True,
                       "per_iter_skip": 0, "parallel_init": False, "devices": devices},
            "results": results_out,
            "out_of_bounds": {"count": wrong, "okay": wrong == 0},
            "average_bus_bandwidth": {"bandwidth": sum(busbws) / len(busbws), "okay": "unchecked"},
            "errors": [],
            "end_time": _nccl_time(ended),
        }
    return docs


PROCESS_TIMES_KEY = "per_process_max_times_us"


def write_nccl_tests(run) -> list[Path]:
    """bench-nccl-tests-<program>.json per op in the run folder (nccl-tests' -J schema)."""
    from datetime import datetime, timedelta

    record = run.record
    started = record.started or ""
    ended = ""
    try:
        if started and record.seconds is not None:
            ended = (datetime.fromisoformat(started) + timedelta(seconds=float(record.seconds))).isoformat()
    except (TypeError, ValueError):
        ended = ""
    written = []
    for program, doc in nccl_tests_documents(run.results(), started, ended).items():
        target = Path(run.path) / NCCL_TESTS_FILE.format(program=program)
        with atomic_open(target, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        written.append(target)
    return written


def write_plots(run) -> list[Path]:
    """busbw and median time vs size (log-2 x axis), one line per op, into the run folder."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise LabError(bench.NO_PLOT) from None
    results = run.results()
    data, link = bench.rows(results), bench.link_GBps(results)
    if not data:
        return []
    n = data[0].get("world_size")
    written = []
    for name, field, label, log_y in (
            (PLOTS[0], "busbw_GBps", "busbw (GB/s)", False),
            (PLOTS[1], "time_us_median", "time, median (us)", True)):
        fig = Figure(figsize=(8, 5), dpi=100)
        ax = fig.subplots()
        for op in bench.OPS:
            mine = [r for r in data if r["op"] == op and r.get(field) is not None]
            if mine:
                ax.plot([r["size_bytes"] for r in mine], [r[field] for r in mine], marker="o", label=op)
        if field == "busbw_GBps" and link:
            ax.axhline(link, linestyle="--", color="grey", label=f"TCP link {link:.2f} GB/s")
        ax.set_xscale("log", base=2)
        if log_y:
            ax.set_yscale("log")
        ax.set_xlabel("size (bytes)")
        ax.set_ylabel(label)
        ax.set_title(f"{run.record.lab}: {label} vs size ({layout(run)}, n = {n})",
                     fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        target = Path(run.path) / name
        with atomic_open(target, "wb") as f:     # a signal mid-write leaves no half picture
            fig.savefig(f, format="png")
        written.append(target)
    return written

