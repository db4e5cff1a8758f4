"""The α–β cost model (workloads/_costmodel.py), its report section and `labctl predict`."""
from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labctl.errors import LabError
from labctl import draw
from labctl.reports import benchpredict
from labctl.rundir import RunDir
from workloads import _costmodel as cm
from workloads._benchmath import busbw_factor
from workloads._report import bench

GLOO, NCCL = cm.MODELS["gloo"], cm.MODELS["nccl"]
SIZES = (1 << 16, 1 << 18, 1 << 20, 1 << 22)


def test_the_ring_model_is_nccl_tests_busbw_factor_and_its_latency_steps():
    for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce",
               "pingpong", "ring"):
        for n in (2, 3, 8):
            assert NCCL[op].factor(n) == pytest.approx(busbw_factor(op, n))
    assert NCCL["all_reduce"].steps(4) == 6 and NCCL["all_gather"].steps(4) == 3
    # ring all_reduce: 2(n-1)/n S/B + 2(n-1) α
    p = cm.predict(NCCL["all_reduce"], 1e-4, 1e8, 4, 8e6)
    assert p.beta_term_s == pytest.approx(1.5 * 8e6 / 1e8) and p.alpha_term_s == pytest.approx(6e-4)


def test_gloo_departs_from_the_ring_where_it_was_measured_to():
    assert GLOO["broadcast"].factor(4) == 3          # the root sends the whole buffer to each rank
    assert GLOO["reduce_scatter"].factor(4) == NCCL["all_reduce"].factor(4)
    assert GLOO["all_reduce"] is not None and GLOO["all_reduce"].factor(3) == pytest.approx(4 / 3)
    assert cm.model_for("gloo") is GLOO and cm.model_for("nccl") is NCCL and cm.model_for(None) is NCCL


@pytest.mark.parametrize("op", ["all_reduce", "broadcast", "pingpong"])
def test_a_fit_of_exact_times_gives_back_alpha_and_b(op):
    algo = GLOO[op]
    alpha, bandwidth = 250e-6, 12.5e6
    points = [(s, cm.predict(algo, alpha, bandwidth, 3, s).seconds) for s in SIZES]
    fit = cm.fit(algo, 3, points)
    assert fit.alpha_s == pytest.approx(alpha, rel=1e-6)
    assert fit.bandwidth_Bps == pytest.approx(bandwidth, rel=1e-6)
    assert fit.rms_error < 1e-9 and fit.points == 4
    # and it predicts another world size with the algorithm's own steps and factor
    assert fit.at(5, 1 << 20).seconds == pytest.approx(cm.predict(algo, alpha, bandwidth, 5, 1 << 20).seconds)


def test_a_fit_says_how_far_the_line_is_from_noisy_points():
    algo = GLOO["all_reduce"]
    noisy = [(s, cm.predict(algo, 1e-4, 1e7, 2, s).seconds * k) for s, k in zip(SIZES, (1.3, 0.9, 1.05, 1.0))]
    fit = cm.fit(algo, 2, noisy)
    assert 0.01 < fit.rms_error < 0.3 and fit.max_error >= fit.rms_error
    assert fit.bandwidth_Bps == pytest.approx(1e7, rel=0.1)


def test_what_cannot_make_a_line_is_no_fit():
    algo = GLOO["all_reduce"]
    assert cm.fit(algo, 2, [(1024, 0.1)]) is None                        # one size
    assert cm.fit(algo, 2, [(1024, 0.2), (4096, 0.1), (16384, 0.05)]) is None   # faster with size
    fit = cm.fit(algo, 2, [(1024, 0.001), (2048, 0.002), (4096, 0.004)])   # no intercept: α = 0
    assert fit.alpha_s == 0 and fit.bandwidth_Bps == pytest.approx(1024 / 0.001)


def test_the_dominant_term_is_the_larger_one():
    algo = GLOO["all_reduce"]
    assert cm.predict(algo, 1e-3, 1e9, 16, 1024).dominant == "latency (α)"
    assert cm.predict(algo, 1e-6, 1e7, 16, 1 << 26).dominant == "bandwidth (β)"


# ---- the report and `labctl predict` -------------------------------------------------
def bench_results(n: int, alpha: float, bandwidth: float, links: str | None = "100mbit") -> list[dict]:
    """What the bench workload records, with times the gloo model gives exactly."""
    out = [{"workload": "bench", "name": "bench_env", "rank": 0, "ok": True, "dist_backend": "gloo",
            "nodes": n, "world_size": n, "links": json.dumps(links) if links else None}]
    for op in ("all_reduce", "broadcast", "pingpong"):
        for s in SIZES:
            t = cm.predict(GLOO[op], alpha, bandwidth, n, s).seconds
            out.append({"workload": "bench", "name": op, "rank": 0, "ok": True, "size_bytes": s,
                        "count": s // 4, "dtype": "float32", "wrong": 0, "world_size": n, "iters": 5,
                        "time_us_median": t * 1e6, "time_us_p99": t * 1e6,
                        "algbw_GBps": s / t / 1e9, "busbw_GBps": busbw_factor(op, n) * s / t / 1e9})
    return out


def test_the_report_puts_the_model_next_to_every_busbw():
    results = bench_results(3, 100e-6, 12.5e6)
    md = draw.markdown(bench.views(results)) + "\n"
    assert "| busbw (GB/s) | model (GB/s) | busbw / model |" in md
    assert "the configured 100 Mbit/s" in md and "### Cost model" in md
    data = bench.as_json(results)
    assert data["model"]["configured_link_Bps"] == 12.5e6
    assert data["model"]["algorithms"] == "gloo"
    for row in data["rows"]:            # times made by the model from the configured link: ratio 1
        assert row["busbw_over_model"] == pytest.approx(1.0, rel=1e-3)
    fit = data["model"]["fits"]["broadcast"]
    assert fit["bandwidth_Bps"] == pytest.approx(12.5e6, rel=1e-6) and fit["n"] == 3
    assert fit["bandwidth_over_link"] == pytest.approx(1.0, rel=1e-3)


def test_without_a_link_there_is_no_model_column():
    results = [r for r in bench_results(2, 1e-4, 1e7, links=None)]
    assert "model (GB/s)" not in draw.markdown(bench.views(results)) + "\n"
    assert bench.as_json(results)["model"]["link"] is None


def _run_folder(tmp_path, results) -> str:
    folder = tmp_path / "run"
    folder.mkdir(parents=True)
    world = max([r.get("world_size") or 2 for r in results if r.get("workload") == "bench"] or [2])
    (folder / "status.json").write_text(json.dumps({"run_id": "r", "lab": "lab", "state": "passed",
                                                    "backend": "compose", "world_size": world}))
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results))
    return str(folder)


def test_predict_scales_a_two_node_fit_to_another_world_size(tmp_path):
    folder = _run_folder(tmp_path, bench_results(2, 200e-6, 12.5e6))
    text = benchpredict.predict(RunDir.open(folder), 4, [1 << 20], "json")
    rows = {r["op"]: r for r in json.loads(text)["rows"]}
    expected = cm.predict(GLOO["broadcast"], 200e-6, 12.5e6, 4, 1 << 20)
    assert rows["broadcast"]["time_us"] == pytest.approx(expected.seconds * 1e6, rel=1e-5)
    assert rows["all_reduce"]["fitted_n"] == 2 and rows["all_reduce"]["n"] == 4
    assert rows["all_reduce"]["dominant"] == "bandwidth (β)"
    done = subprocess.run([sys.executable, "-m", "labctl.cli", "predict", folder, "--world-size", "64",
                           "--size", "4KiB", "--size", "64MiB"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "## Predicted at world size 64 (fitted at n = 2" in done.stdout
    assert f"| all_reduce | {GLOO['all_reduce'].name} | 4096 |" in done.stdout


def test_predict_replays_each_op_over_other_links(tmp_path):
    """--link: a faster default halves a bandwidth-bound time; one slow node sets a ring's
    pace; α and the links' efficiency stay the run's (fitted on its pingpong)."""
    folder = _run_folder(tmp_path, bench_results(2, 200e-6, 12.5e6))
    run = RunDir.open(folder)

    def rows(**links):
        data = json.loads(benchpredict.predict(run, 4, [1 << 22], "json", **links))
        return data, {r["op"]: r for r in data["rows"]}

    data, base = rows()
    assert data["fit"]["alpha_s"] == pytest.approx(200e-6, rel=1e-6) and data["fit"]["efficiency"] == pytest.approx(1)
    assert "pingpong at n = 2" in data["fit"]["on"] and "every node: 100 Mbit/s" in data["links"]
    ring = base["all_reduce"]
    assert ring["model"] == "replay" and ring["messages"] == 48 and ring["bytes_per_rank_max"] == 6 << 20  # 2(n-1)/n S
    assert ring["beta_term_us"] == pytest.approx(1.5 * (1 << 22) / 12.5e6 * 1e6, rel=1e-6)
    _, fast = rows(links={"default": "200mbit"})
    assert fast["all_reduce"]["beta_term_us"] == pytest.approx(ring["beta_term_us"] / 2, rel=1e-6)
    _, slow = rows(links={"nodes": {3: "50mbit"}})
    assert slow["all_reduce"]["beta_term_us"] == pytest.approx(2 * ring["beta_term_us"], rel=1e-6)
    # the binomial broadcast: 0 -> {1, 2} at once (2 S / B), then 1 -> 3 at the slow node's rate
    assert slow["broadcast"]["beta_term_us"] == pytest.approx(4 * (1 << 22) / 12.5e6 * 1e6, rel=1e-6)
    _, pair = rows(links={"pairs": {"0-3": "50mbit"}})     # the pingpong's own pair
    assert pair["pingpong"]["beta_term_us"] == pytest.approx(2 * base["pingpong"]["beta_term_us"], rel=1e-6)
    done = subprocess.run([sys.executable, "-m", "labctl.cli", "predict", folder, "-n", "4", "--size", "4MiB",
                           "--link", "3=50mbit", "--format", "csv"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f",{slow['broadcast']['time_us']}," in done.stdout


def test_predict_refuses_a_run_without_a_sweep_and_bad_sizes_and_links(tmp_path):
    empty = _run_folder(tmp_path / "a", [{"workload": "env", "name": "env", "rank": 0, "ok": True}])
    swept = _run_folder(tmp_path / "b", bench_results(2, 200e-6, 12.5e6))
    for folder, args, says in (
            (empty, ["-n", "4"], "nothing to predict from"),
            (empty, ["-n", "4", "--size", "lots"], "--size: expected a size in bytes"),
            (empty, ["-n", "1"], "--world-size: expected an integer between 2"),
            (swept, ["-n", "4", "--link", "2=fast"], "--link: links.nodes.2: expected a rate with its unit"),
            (swept, ["-n", "4", "--link", "9=1gbit"], "--link: links.nodes: expected a node of this lab: 0 to 3"),
            (swept, ["-n", "4", "--link", "x=1gbit"], "--link: expected [NODE=|A-B=]RATE")):
        done = subprocess.run([sys.executable, "-m", "labctl.cli", "predict", folder, *args],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode in (1, 2) and says in done.stderr, done.stderr
        assert done.stderr.count("\n") == 1


def test_predict_reads_the_measured_pair_matrix_and_refuses_links_it_cannot_know(tmp_path):
    """No `links:`: the links workload's pair matrix in the same run gives each node's cable
    (its best measured pair) and a pair well below it as a pair cap; nothing measured at
    all is one line."""
    results = bench_results(3, 0.0, 12e6, links=None)
    for a in range(3):
        for b in range(3):
            if a != b:
                slow = {a, b} == {1, 2}
                results.append({"workload": "links", "name": "pair", "rank": a, "ok": True, "src_node": a,
                                "dst_node": b, "p2p_Bps": 4e6 if slow else 12e6})
    for r in results:            # a ring over the slow pair, and a pingpong (0 <-> 2) that misses it
        if r.get("name") == "pingpong":
            results.append({**r, "name": "ring"})
    folder = _run_folder(tmp_path / "m", results)
    data = json.loads(benchpredict.predict(RunDir.open(folder), 3, [1 << 22], "json"))
    rows = {r["op"]: r for r in data["rows"]}
    assert "pair matrix measured (6 directions; slow: 1->2, 2->1)" in data["links"]
    assert data["fit"]["efficiency"] == pytest.approx(1.0, rel=1e-6)
    assert rows["pingpong"]["beta_term_us"] == pytest.approx((1 << 22) / 12e6 * 1e6, rel=1e-6)
    assert rows["ring"]["beta_term_us"] == pytest.approx((1 << 22) / 4e6 * 1e6, rel=1e-6)
    bare = _run_folder(tmp_path / "u", bench_results(2, 1e-4, 12e6, links=None))
    with pytest.raises(LabError, match="no link rate to replay over"):
        benchpredict.predict(RunDir.open(bare), 4, None, "md")


# ---- edited results: one line and exit 2, or the answer of the rows that are right --------
LINK = {"workload": "bench", "name": "link", "rank": 0, "ok": True, "bytes": 1 << 20, "seconds": 0.0839,
        "GBps": 0.0125, "src_node": 0, "dst_node": 1, "dst_rank": 1}


def _edited(results: list[dict], name: str, size: int | None, field: str, value: str) -> list[str]:
    """results.jsonl's lines with one record's `field` written as `value` (JSON text, as a
    hand or a script would: NaN, Infinity, 1e308)."""
    lines = []
    for r in results:
        if r.get("name") == name and (size is None or r.get("size_bytes") == size):
            r = dict(r)
            r.pop(field, None)
            lines.append(json.dumps(r)[:-1] + f', "{field}": {value}}}')
            size = -1                       # one record only
        else:
            lines.append(json.dumps(r))
    return lines


EDITS = [   # (what, record name, its size, field, the text written, what predict must do)
    ("a time of Infinity", "pingpong", 1 << 18, "time_us_median", "Infinity", "skip"),
    ("a time of 1e308", "pingpong", 1 << 18, "time_us_median", "1e308", "skip"),
    ("a time of NaN", "pingpong", 1 << 18, "time_us_median", "NaN", "skip"),
    ("a size as a string", "all_reduce", 1 << 18, "size_bytes", '"262144"', "skip"),
    ("a size of 1e20", "all_reduce", 1 << 18, "size_bytes", "1e20", "skip"),
    ("a world size of 1e9", "all_reduce", 1 << 18, "world_size", "1000000000", "skip"),
    ("a link of 1e-300 GB/s", "link", None, "GBps", "1e-300", "no link rate to replay over"),
    ("a negative link", "link", None, "GBps", "-0.5", "no link rate to replay over"),
    ("a link as a string", "link", None, "GBps", '"fast"', "no link rate to replay over"),
    ("an environment of world size 1e9", "bench_env", None, "world_size", "1e9", "no usable bench_env record"),
    ("a row at another run's world size", "all_reduce", 1 << 18, "world_size", "65536",
     "say world size 65,536 in a run of 2 ranks"),
]


@pytest.mark.parametrize("what,name,size,field,value,expect", EDITS, ids=[e[0] for e in EDITS])
def test_predict_and_report_on_edited_bench_results_answer_or_refuse_in_one_line(
        tmp_path, what, name, size, field, value, expect):
    """Issue 52 item 6: tracebacks (Infinity, 1e308, strings, a link of 1e-300 GB/s), hangs
    (a size of 1e20, a world of 1e9, a negative link) and silent garbage (NaN: every time
    0.0, exit 0) on a hand-edited results.jsonl. Each row is read once, against the lab's
    bounds: a bad one is skipped and named, and predict answers as if it were not there;
    what leaves nothing to answer from is one line, exit 2."""
    results = bench_results(2, 200e-6, 12.5e6, links=None) + [LINK]
    folder = Path(_run_folder(tmp_path / "edited", []))
    (folder / "results.jsonl").write_text("\n".join(_edited(results, name, size, field, value)) + "\n")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "labctl.cli", "predict", str(folder), "-n", "4", "--format", "json"],
                          capture_output=True, text=True, timeout=120)
    assert time.monotonic() - started < 30
    assert "Traceback" not in done.stderr
    if expect == "skip":
        assert done.returncode == 0, done.stderr
        assert f"'{field}' should be" in done.stderr and done.stderr.count("\n") == 1, done.stderr
        kept = [r for r in results if not (r.get("name") == name and r.get("size_bytes") == size)]
        clean = json.loads(benchpredict.predict(RunDir.open(_run_folder(tmp_path / "clean", kept)), 4, None, "json"))
        assert json.loads(done.stdout)["rows"] == clean["rows"]
        assert all(math.isfinite(r["time_us"]) and r["time_us"] > 0 for r in clean["rows"])
    else:
        assert done.returncode == 2 and expect in done.stderr, done.stderr
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1
    from labctl import report                      # report.md, as `labctl report` makes it (in process: faster)
    assert report.render(RunDir.open(folder), "md").startswith("# Lab lab:")


def test_a_size_a_row_may_name_is_predicted_without_replaying_millions_of_messages(tmp_path):
    """1 TiB (the largest size a row may name, `--size`'s bound): gloo's ring cuts it into
    1 MiB segments, two million messages at 2 ranks; the replay stops at REPLAY_MAX_MESSAGES
    and the closed form stands in, said in the row."""
    results = bench_results(2, 200e-6, 12.5e6)
    for r in [r for r in results if r.get("size_bytes") == SIZES[-1]]:
        t = cm.predict(GLOO[r["name"]], 200e-6, 12.5e6, 2, 1 << 40).seconds * 1e6
        results.append({**r, "size_bytes": 1 << 40, "count": 1 << 38, "time_us_median": t, "time_us_p99": t,
                        "algbw_GBps": (1 << 40) / t / 1e3, "busbw_GBps": (1 << 40) / t / 1e3})
    folder = _run_folder(tmp_path, results)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "labctl.cli", "predict", folder, "-n", "8", "--format", "json"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 60
    rows = {(r["op"], r["size_bytes"]): r for r in json.loads(done.stdout)["rows"]}
    huge = rows[("all_reduce", 1 << 40)]
    assert huge["model"] == f"closed form (more than {benchpredict.REPLAY_MAX_MESSAGES:,} messages to replay)"
    expected = cm.predict(GLOO["all_reduce"], 200e-6, 12.5e6, 8, 1 << 40)
    assert huge["beta_term_us"] == pytest.approx(expected.beta_term_s * 1e6, rel=1e-3)
    assert rows[("all_reduce", SIZES[-1])]["model"] == "replay"


def test_a_noisy_sweep_is_refused_for_its_noise_not_its_sizes(tmp_path):
    """A real 2x1 sweep on a loaded 2-core machine: the small pingpongs took longer than
    the large ones. The fit finds no rate for the link; the message says that, with the
    sweep's own times (it blamed the sweep's sizes: "it needs two sizes or more")."""
    results = [r for r in bench_results(2, 200e-6, 12.5e6, links=None) if r.get("name") != "pingpong"] + [LINK]
    for size, t in zip(SIZES, (2400.0, 1900.0, 350.0, 700.0)):      # µs, as such a run measured them
        results.append({"workload": "bench", "name": "pingpong", "rank": 0, "ok": True, "size_bytes": size,
                        "count": size // 4, "dtype": "float32", "wrong": 0, "world_size": 2, "iters": 5,
                        "time_us_median": t, "time_us_p99": t, "algbw_GBps": size / t / 1e3,
                        "busbw_GBps": size / t / 1e3})
    folder = _run_folder(tmp_path, results)
    done = subprocess.run([sys.executable, "-m", "labctl.cli", "predict", folder, "-n", "4"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "two sizes" not in done.stderr
    assert "its times do not grow with the size" in done.stderr
    assert "64 KiB 2,400 µs, 256 KiB 1,900 µs, 1 MiB 350 µs, 4 MiB 700 µs" in done.stderr
    assert "timing noise" in done.stderr


def test_the_cost_model_table_says_each_op_it_could_not_fit_and_why():
    """Issue 53 item 7: all_reduce and reduce, on noisy 2-core timings, left the table with
    no word. An op with one size, or whose time does not grow with its size, is named."""
    results = bench_results(2, 200e-6, 12.5e6)
    for size, t in zip(SIZES, (900.0, 700.0, 650.0, 400.0)):        # µs: shrinking as the size grows
        results = [r for r in results if not (r.get("name") == "all_reduce" and r.get("size_bytes") == size)]
        results.append({"workload": "bench", "name": "all_reduce", "rank": 0, "ok": True, "size_bytes": size,
                        "count": size // 4, "dtype": "float32", "wrong": 0, "world_size": 2, "iters": 5,
                        "time_us_median": t, "time_us_p99": t, "algbw_GBps": 1.0, "busbw_GBps": 1.0})
    results.append({"workload": "bench", "name": "reduce", "rank": 0, "ok": True, "size_bytes": 1 << 16,
                    "count": 1 << 14, "dtype": "float32", "wrong": 0, "world_size": 2, "iters": 5,
                    "time_us_median": 300.0, "time_us_p99": 300.0, "algbw_GBps": 0.2, "busbw_GBps": 0.2})
    section = draw.markdown(bench.cost_model_views(results))
    assert "| broadcast |" in section and "| pingpong |" in section and "| all_reduce |" not in section
    assert ("Not fitted: **all_reduce**: its time does not grow with the size (64 KiB 900 µs, 256 KiB 700 µs, "
            "1 MiB 650 µs, 4 MiB 400 µs): noise larger than what the bytes cost") in section
    assert "**reduce**: 1 size with a time: a line needs two or more." in section
    data = bench.as_json(results)["model"]
    assert set(data["not_fitted"]) == {"all_reduce", "reduce"} and "all_reduce" not in data["fits"]
