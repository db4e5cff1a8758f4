"""The α–β cost model (workloads/_costmodel.py), its report section and `labctl predict`."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from labctl.errors import LabError
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
    md = bench.markdown(results)
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
    assert "model (GB/s)" not in bench.markdown(results)
    assert bench.as_json(results)["model"]["link"] is None


def _run_folder(tmp_path, results) -> str:
    folder = tmp_path / "run"
    folder.mkdir(parents=True)
    (folder / "status.json").write_text(json.dumps({"run_id": "r", "lab": "lab", "state": "passed",
                                                    "backend": "compose", "world_size": 2}))
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results))
    return str(folder)


def test_predict_scales_a_two_node_fit_to_another_world_size(tmp_path):
    folder = _run_folder(tmp_path, bench_results(2, 200e-6, 12.5e6))
    text = bench.predict(RunDir.open(folder), 4, [1 << 20], "json")
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
        data = json.loads(bench.predict(run, 4, [1 << 22], "json", **links))
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
    data = json.loads(bench.predict(RunDir.open(folder), 3, [1 << 22], "json"))
    rows = {r["op"]: r for r in data["rows"]}
    assert "pair matrix measured (6 directions; slow: 1->2, 2->1)" in data["links"]
    assert data["fit"]["efficiency"] == pytest.approx(1.0, rel=1e-6)
    assert rows["pingpong"]["beta_term_us"] == pytest.approx((1 << 22) / 12e6 * 1e6, rel=1e-6)
    assert rows["ring"]["beta_term_us"] == pytest.approx((1 << 22) / 4e6 * 1e6, rel=1e-6)
    bare = _run_folder(tmp_path / "u", bench_results(2, 1e-4, 12e6, links=None))
    with pytest.raises(LabError, match="no link rate to replay over"):
        bench.predict(RunDir.open(bare), 4, None, "md")
