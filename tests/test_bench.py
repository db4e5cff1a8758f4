"""workloads._report.bench, the bench report hook (and the math it re-exports from workloads._benchmath): pure, fast tests."""
from __future__ import annotations

import csv
import io
import json
import math
import socket
import subprocess
import sys
import threading

import pytest

from workloads._report import bench
from labctl import draw
from labctl.reports import benchcompare, benchfiles
from labctl.errors import LabError
from labctl.rundir import RunDir
from workloads import _benchmath as bm
from workloads import _link

from conftest import REPO


def _markdown(results: list[dict]) -> str:
    """The bench's section as report.md draws it."""
    return draw.markdown(bench.views(results)) + "\n"


# ---- the math, against nccl-tests' definitions ------------------------------
@pytest.mark.parametrize("n", [2, 3, 4, 8, 16])
def test_busbw_factors_are_nccl_tests_definitions(n):
    """nccl-tests doc/PERFORMANCE.md, "Summary":

    To obtain a bus bandwidth which should be independent of the number of
    ranks n, we apply a correction factor to the algorithm bandwidth:
      AllReduce: 2*(n-1)/n · ReduceScatter: (n-1)/n · AllGather: (n-1)/n ·
      Broadcast: 1 · Reduce: 1 · AlltoAll: (n-1)/n
    and point-to-point (SendRecv) reports busbw = algbw.
    """
    assert bench.busbw_factor("all_reduce", n) == pytest.approx(2 * (n - 1) / n)
    for op in ("all_gather", "reduce_scatter", "all_to_all"):
        assert bench.busbw_factor(op, n) == pytest.approx((n - 1) / n)
    for op in ("broadcast", "reduce", "pingpong", "ring"):
        assert bench.busbw_factor(op, n) == 1.0


def test_busbw_factor_rejects_unknown_op_and_zero_ranks():
    with pytest.raises(ValueError, match="unknown op 'allreduce'"):
        bench.busbw_factor("allreduce", 4)
    with pytest.raises(ValueError, match="n >= 1"):
        bench.busbw_factor("all_reduce", 0)


def test_algbw_is_size_over_time_in_1e9_bytes_per_second():
    """nccl-tests: `algbw = S/t`, reported in GB/s (1e9 bytes/s, not GiB/s)."""
    assert bench.algbw_GBps(1e9, 1.0) == 1.0
    assert bench.algbw_GBps(2**20, 1e-3) == pytest.approx(1.048576)
    assert bench.algbw_GBps(1024, 0.0) == 0.0
    # all_reduce of 64 MiB in 0.1 s on 4 ranks: algbw 0.671 GB/s, busbw x 1.5
    assert bench.busbw_GBps("all_reduce", 64 * 2**20, 0.1, 4) == pytest.approx(0.67108864 * 1.5)


def test_sizes_follow_b_e_f():
    """nccl-tests -b 8 -e 128M -f 2: 8, 16, ... up to and including the max."""
    assert bench.sizes(1024, 1 << 20, 4) == [1024, 4096, 16384, 65536, 262144, 1048576]
    assert bench.sizes(8, 100, 2) == [8, 16, 32, 64]
    assert bench.sizes(64, 64, 2) == [64]


def test_element_count_uses_total_size_for_blocked_ops():
    """nccl-tests: for AllGather/ReduceScatter S is the total array
    (count per rank x n x sizeof): count is rounded down to a multiple of n."""
    assert bm.element_count("all_reduce", 1000, 4, 3) == 250
    assert bm.element_count("all_gather", 1000, 4, 3) == 249
    assert bm.element_count("reduce_scatter", 1024, 4, 4) == 256
    assert bm.element_count("all_to_all", 8, 4, 4) == 0


def test_percentile_matches_linear_interpolation():
    assert bench.percentile([3, 1, 2], 50) == 2
    assert bench.percentile([1, 2, 3, 4], 50) == 2.5
    assert bench.percentile(list(range(101)), 99) == pytest.approx(99)
    assert bench.percentile([5.0], 99) == 5.0
    with pytest.raises(ValueError):
        bench.percentile([], 50)


def test_summarize_pingpong_reports_one_way_time():
    """p2p: one-way latency = round trip / 2; bandwidth = bytes / one-way time."""
    s = bm.summarize("pingpong", 250_000, 4, 2, [2e-3, 2e-3, 4e-3])
    assert s["time_us_median"] == pytest.approx(1000.0)
    assert s["algbw_GBps"] == pytest.approx(1.0)
    assert s["busbw_GBps"] == pytest.approx(1.0)
    s = bm.summarize("all_reduce", 250_000, 4, 4, [1e-3] * 9 + [5e-3])
    assert s["time_us_median"] == pytest.approx(1000.0)
    assert s["time_us_p99"] > 4000
    assert s["busbw_GBps"] == pytest.approx(1.5)


@pytest.mark.parametrize("kw, message", [
    (dict(min_bytes=0), "min_bytes: expected an integer >= 1"),
    (dict(factor=1), "factor: expected an integer >= 2"),
    (dict(max_bytes=10), "max_bytes (10) is smaller than min_bytes (1024)"),
    (dict(iters="5"), "iters: expected an integer >= 1, given '5'"),
])
def test_validate_sweep_one_clear_line(kw, message):
    args = dict(min_bytes=1024, max_bytes=4096, factor=2, iters=5, warmup_iters=1) | kw
    with pytest.raises(ValueError) as exc:
        bm.validate_sweep(**args)
    assert message in str(exc.value) and "\n" not in str(exc.value)


# ---- tables from synthetic records --------------------------------------------
def _row(op, size, t_us, rank=0, wrong=0, n=4, dtype="float32"):
    count = bm.element_count(op, size, 4, n)
    return {"workload": "bench", "name": op, "rank": rank, "ok": wrong == 0, "wrong": wrong,
            "count": count, "dtype": dtype, "world_size": n, "iters": 5,
            **bm.summarize(op, count, 4, n, [t_us * 1e-6] * 5)}


ENV = {"workload": "bench", "name": "bench_env", "rank": 0, "ok": True, "torch": "2.13.0",
       "dist_backend": "gloo", "world_size": 4, "nodes": 2, "nproc_per_node": 2,
       "OMP_NUM_THREADS": "1", "ops": ["all_reduce", "pingpong"]}
LINK = {"workload": "bench", "name": "link", "rank": 0, "ok": True, "src_node": 0, "dst_node": 1,
        "dst_rank": 2, "address": "127.0.0.1", "bytes": 2_000_000_000, "seconds": 1.0, "GBps": 2.0}


def synthetic(scale: float = 1.0, wrong: int = 0) -> list[dict]:
    return [ENV, LINK,
            _row("all_reduce", 4096, 100 * scale), _row("all_reduce", 1 << 20, 1000 * scale, wrong=wrong),
            _row("pingpong", 4096, 50 * scale),
            _row("all_reduce", 4096, 999, rank=1),          # a second rank's copy: not counted
            {"workload": "bench", "name": "workload_done", "rank": 0, "ok": True, "seconds": 1.0},
            {"workload": "env", "name": "env", "rank": 0, "ok": True}]


def test_rows_keep_one_record_per_op_and_size_from_the_lowest_rank():
    data = bench.rows(synthetic())
    assert [(r["op"], r["size_bytes"]) for r in data] == [
        ("all_reduce", 4096), ("all_reduce", 1 << 20), ("pingpong", 4096)]
    assert data[0]["time_us_median"] == pytest.approx(100.0)


def test_markdown_has_nccl_tests_columns_env_and_link():
    md = _markdown(synthetic(wrong=3))
    assert "### all_reduce (busbw factor 2(n-1)/n)" in md
    assert "### pingpong (busbw factor 1; one-way time = round trip / 2)" in md
    assert ("| size (B) | count (elements) | type | time median (us) | time p99 (us) | "
            "algbw (GB/s) | busbw (GB/s) | model (GB/s) | busbw / model | % link | #wrong |") in md
    # 1 MiB all_reduce in 1 ms on 4 ranks: algbw 1.049, busbw 1.573, 78.6 % of a 2 GB/s link, 3 wrong;
    # the ring model expects busbw = B = 2 GB/s from that link (no pingpong measured: α = 0)
    assert "| 1048576 | 262144 | float32 | 1000.0 | 1000.0 | 1.049 | 1.573 | 2.0000 | 0.79 | 78.6 | 3 |" in md
    assert "| torch | 2.13.0 |" in md and "| OMP_NUM_THREADS | 1 |" in md
    assert "| 0 | 1 (2) | 127.0.0.1 | 2000000000 | 1.000 | 2.000 |" in md
    assert "all_gather" not in md.split("| ops |")[0]      # no table for an op never measured


def test_markdown_without_link_has_no_link_column():
    md = _markdown([r for r in synthetic() if r.get("name") != "link"])
    assert "% link" not in md and "| 4096 | 1024 | float32 | 100.0 |" in md


def test_csv_and_json_carry_the_same_rows():
    results = synthetic()
    table = list(csv.DictReader(io.StringIO(draw.csv(bench.table(results)))))
    assert [r["op"] for r in table] == ["all_reduce", "all_reduce", "pingpong"]
    assert table[1]["busbw_GBps"] == "1.572864" and table[1]["link_GBps"] == "2.0"
    data = bench.as_json(results)
    json.dumps(data)
    assert data["link_GBps"] == 2.0 and data["environment"]["torch"] == "2.13.0"
    assert [r["size_bytes"] for r in data["rows"]] == [4096, 1 << 20, 4096]


# ---- compare ------------------------------------------------------------------
def fake_run(path, results, **meta) -> RunDir:
    path.mkdir(parents=True)
    status = {"lab": "lab", "backend": "local", "dist_backend": "gloo", "nodes": 2,
              "nproc_per_node": 2, "state": "passed", **meta}
    (path / "status.json").write_text(json.dumps(status))
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results))
    return RunDir.open(path)


def test_compare_gives_b_over_a_per_op_and_size(tmp_path):
    a = fake_run(tmp_path / "a", synthetic())
    b = fake_run(tmp_path / "b", synthetic(scale=2.0)[:3])       # B: twice as slow, fewer rows
    data = benchcompare.comparison(a, b)
    assert [(r["op"], r["size_bytes"]) for r in data] == [("all_reduce", 4096)]
    assert data[0]["time_ratio"] == 2.0 and data[0]["busbw_ratio"] == 0.5
    md = benchcompare.compare(a, b, "md")
    assert "| all_reduce | 4096 | float32 | 100.0 | 200.0 | 2.000 |" in md
    rows = list(csv.DictReader(io.StringIO(benchcompare.compare(a, b, "csv"))))
    assert rows[0]["busbw_ratio"] == "0.5"
    assert json.loads(benchcompare.compare(a, b, "json"))["rows"][0]["time_ratio"] == 2.0


def _timed(op: str, size: int, times: list[float]) -> dict:
    """A bench row with its iterations' times (the bench's `times_us`), the median its own."""
    row = _row(op, size, sorted(times)[len(times) // 2])
    return {**row, "times_us": times}


def test_compare_marks_the_ratios_two_runs_of_the_same_lab_fall_within_as_noise(tmp_path):
    """Issue 53 item 7: two runs of one lab gave ratios from 0.25 to 3.98 with no word about
    noise. Each row's iterations (times_us) say how far apart two such runs' medians fall."""
    import random
    rng = random.Random(7)
    noisy = lambda: [rng.lognormvariate(math.log(100), 0.6) for _ in range(10)]     # noqa: E731
    tight = lambda k: [k * (1 + 0.01 * i) for i in range(10)]                         # noqa: E731
    a = fake_run(tmp_path / "a", [ENV, _timed("all_reduce", 4096, noisy()), _timed("pingpong", 4096, tight(50)),
                                  _row("all_reduce", 1 << 20, 1000)])
    b = fake_run(tmp_path / "b", [ENV, _timed("all_reduce", 4096, noisy()), _timed("pingpong", 4096, tight(150)),
                                  _row("all_reduce", 1 << 20, 1000)])
    rows = {(r["op"], r["size_bytes"]): r for r in benchcompare.comparison(a, b)}
    same = rows[("all_reduce", 4096)]          # the same distribution: whatever the ratio, noise
    assert same["same_lab_low"] < 1 < same["same_lab_high"] and same["noise"] is True
    assert same["same_lab_low"] <= same["time_ratio"] <= same["same_lab_high"]
    slower = rows[("pingpong", 4096)]          # three times as slow, 1 % apart within each run
    assert slower["time_ratio"] == pytest.approx(3.0, rel=0.01) and slower["noise"] is False
    assert slower["same_lab_high"] < 1.1
    old = rows[("all_reduce", 1 << 20)]        # a row without its iterations: not judged
    assert old["noise"] is None and old["same_lab_low"] is None
    md = benchcompare.compare(a, b, "md")
    ratios = sorted(r["time_ratio"] for r in rows.values())
    assert (f"**1 of 2 time ratios ({ratios[0]:.2f} to {ratios[-1]:.2f} in all) are inside the spread of the same "
            "lab: noise. 1 row(s) without 6 iterations' times or more are not judged.**") in md
    assert f"| {same['time_ratio']:.3f} noise | {same['same_lab_low']:.2f}–{same['same_lab_high']:.2f} |" in md
    assert f"| {slower['time_ratio']:.3f} | {slower['same_lab_low']:.2f}–{slower['same_lab_high']:.2f} |" in md
    assert "same lab: how far apart the medians of two runs of the same lab fall (about 95 % of them)" in md
    rows_csv = list(csv.DictReader(io.StringIO(benchcompare.compare(a, b, "csv"))))
    assert [r["noise"] for r in rows_csv] == ["True", "", "False"]


def test_the_spread_of_the_same_lab_holds_95_percent_of_the_ratios_of_two_such_runs():
    import random
    import statistics
    rng = random.Random(3)
    for spread, n in ((0.5, 10), (0.3, 6), (0.8, 40)):
        inside = 0
        for _ in range(1000):
            a = [rng.lognormvariate(0, spread) for _ in range(n)]
            b = [rng.lognormvariate(0, spread) for _ in range(n)]
            lo, hi = bench.same_lab_spread(a, b)
            inside += lo <= statistics.median(b) / statistics.median(a) <= hi
        assert 0.9 <= inside / 1000 <= 0.99, (spread, n, inside)
    assert bench.same_lab_spread([1.0] * 5, [1.0] * 10) is None       # fewer than 6 times: not judged


def test_compare_errors_are_one_clear_line(tmp_path):
    a = fake_run(tmp_path / "a", synthetic())
    empty = fake_run(tmp_path / "e", [{"workload": "env", "name": "env", "rank": 0, "ok": True}])
    with pytest.raises(LabError, match=r"no bench results to compare \(make some with: labctl up"):
        benchcompare.compare(a, empty, "md")
    other = fake_run(tmp_path / "o", [_row("broadcast", 512, 10)])
    with pytest.raises(LabError, match="share no .op, size, dtype.: A has all_reduce/pingpong at "
                                       "4096..1048576 B, B has broadcast at 512..512 B"):
        benchcompare.compare(a, other, "md")


def test_cli_compare_exit_code_and_output(tmp_path):
    a = fake_run(tmp_path / "a", synthetic())
    b = fake_run(tmp_path / "b", synthetic(scale=0.5))
    ok = subprocess.run([sys.executable, "-m", "labctl.cli", "compare", str(a.path), str(b.path)],
                        capture_output=True, text=True, cwd=REPO)
    assert ok.returncode == 0, ok.stderr
    assert "| pingpong | 4096 | float32 | 25.0 | 12.5 | 0.500 |" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "labctl.cli", "compare", str(a.path), str(tmp_path)],
                         capture_output=True, text=True, cwd=REPO)
    assert bad.returncode == 2 and bad.stderr.startswith("error: ") and "Traceback" not in bad.stderr


# ---- plots ----------------------------------------------------------------------
def test_write_plots_writes_two_pngs(tmp_path):
    run = fake_run(tmp_path / "r", synthetic())
    paths = benchfiles.write_plots(run)
    assert [p.name for p in paths] == list(benchfiles.PLOTS)
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000
    assert benchfiles.write_plots(fake_run(tmp_path / "none", [ENV])) == []


# ---- nccl-tests' JSON -------------------------------------------------------------
GOLDEN_NCCL = REPO / "tests" / "golden" / "nccl-tests" / "all_reduce_perf.json"


def _timed(op, size, times_us, n=2, ranks=None):
    row = _row(op, size, sorted(times_us)[len(times_us) // 2], n=n)
    row.update(times_us=times_us, iters=len(times_us))
    if ranks:
        row["rank_times_us"] = ranks
    return row


def _swept() -> list[dict]:
    env = {**ENV, "world_size": 2, "nodes": 2, "nproc_per_node": 1, "min_bytes": 4096, "max_bytes": 16384,
           "factor": 4, "warmup_iters": 1, "iters": 2, "dtype": "float32", "start_time": "2026-11-26 10:00:00",
           "ranks": [{"rank": 0, "hostname": "n0", "pid": 7, "device": -1},
                     {"rank": 1, "hostname": "n1", "pid": 8, "device": -1}]}
    return [env,
            _timed("all_reduce", 4096, [100.0, 300.0], ranks=[[90.0, 300.0], [100.0, 250.0]]),
            _timed("all_reduce", 16384, [400.0, 400.0], ranks=[[400.0, 390.0], [380.0, 400.0]]),
            _timed("all_gather", 4096, [50.0, 70.0], ranks=[[50.0, 60.0], [40.0, 70.0]])]


def _shape(value):
    """Keys (in order) and value types, all the way down; a list by its first item."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(value[0])] if value else []
    return "number" if isinstance(value, (int, float)) and not isinstance(value, bool) else type(value).__name__


def test_nccl_tests_json_has_nccl_tests_fields_in_their_order():
    """The bench's file per op is nccl-tests' -J document (src/util.cu, version 3: a copy
    of its shape in tests/golden/nccl-tests/, README.md there says where it came from)."""
    golden = json.loads(GOLDEN_NCCL.read_text())
    docs = benchfiles.nccl_tests_documents(_swept(), "2026-11-26T10:00:00+00:00", "2026-11-26T10:00:05+00:00")
    assert list(docs) == ["all_reduce_perf", "all_gather_perf"]
    mine, theirs = _shape(docs["all_reduce_perf"]), _shape(golden)
    assert list(mine) == list(theirs)
    for key in theirs:
        if key != "results":
            assert mine[key] == theirs[key], key
    # a result: nccl-tests times out-of-place, then in-place; the bench times one of them (the
    # other is null, as nccl-tests writes a body it did not run), with its per-iteration block
    want = list(theirs["results"][0])
    in_place = docs["all_reduce_perf"]["results"][0]
    assert list(in_place) == [k for k in want if k != "out_of_place_per_iter"]
    assert in_place["out_of_place"] is None
    assert _shape(in_place["in_place"]) == theirs["results"][0]["in_place"]
    assert _shape(in_place["in_place_per_iter"]) == theirs["results"][0]["in_place_per_iter"]
    out_of_place = docs["all_gather_perf"]["results"][0]
    assert list(out_of_place) == [k for k in want if k != "in_place_per_iter"] and out_of_place["in_place"] is None
    assert _shape(out_of_place["out_of_place_per_iter"]) == theirs["results"][0]["out_of_place_per_iter"]


def test_nccl_tests_json_numbers_are_nccl_tests_own():
    doc = benchfiles.nccl_tests_documents(_swept())["all_reduce_perf"]
    first, second = doc["results"]
    per_iter = first["in_place_per_iter"]
    # computeIterStats: mean, population stdev, p50 = sorted[n/2], p99 = sorted[ceil(n*.99)-1]
    assert (per_iter["avg_us"], per_iter["p50_us"], per_iter["p99_us"]) == (200.0, 300.0, 300.0)
    assert per_iter["stdev_us"] == pytest.approx(100.0) and per_iter["cv_pct"] == pytest.approx(50.0)
    # the time is the mean (nccl-tests'), busbw = algbw x 2(n-1)/n
    assert first["in_place"]["time"] == 200.0
    assert first["in_place"]["alg_bw"] == pytest.approx(4096 / 200e-6 / 1e9)
    assert first["in_place"]["bus_bw"] == pytest.approx(first["in_place"]["alg_bw"] * 1.0)
    assert (first["size"], first["count"], first["type"], first["redop"], first["root"]) == (
        4096, 1024, "float", "sum", "    -1")
    gathered = benchfiles.nccl_tests_documents(_swept())["all_gather_perf"]["results"][0]
    assert (gathered["count"], gathered["redop"]) == (512, "none")          # per rank, as nccl-tests
    # what tools/analyze_perf_json.py reads: per-process rows whose max is times_us
    rows = per_iter["per_process_max_times_us"]
    assert [max(r[i] for r in rows) for i in range(2)] == per_iter["times_us"]
    assert doc["config"]["devices"][1] == {"rank": 1, "group": 0, "pid": 8, "hostname": "n1", "device": -1,
                                           "device_hex": "", "device_info": "cpu"}
    assert doc["args"][:3] == ["all_reduce_perf", "-b", "4096"] and "-J" in doc["args"]
    assert doc["average_bus_bandwidth"]["bandwidth"] == pytest.approx(
        (first["in_place"]["bus_bw"] + second["in_place"]["bus_bw"]) / 2)
    assert doc["out_of_bounds"] == {"count": 0, "okay": True} and doc["nccl_version"] == 0


def test_the_run_folder_gets_one_nccl_tests_file_per_op(tmp_path):
    run = fake_run(tmp_path / "r", _swept(), started="2026-11-26T10:00:00+00:00", seconds=5.0)
    paths = benchfiles.write_files(run)
    names = [p.name for p in paths]
    assert names[:2] == ["bench-nccl-tests-all_reduce_perf.json", "bench-nccl-tests-all_gather_perf.json"]
    doc = json.loads(paths[0].read_text())
    assert doc["version"] == 3 and doc["end_time"] and doc["start_time"]
    assert benchfiles.write_nccl_tests(fake_run(tmp_path / "none", [ENV])) == []


# ---- the TCP link helper ----------------------------------------------------------
def test_link_send_for_counts_every_byte_on_loopback():
    server = _link.listen("127.0.0.1")
    got = {}
    t = threading.Thread(target=lambda: got.setdefault("n", _link.serve_once(server, timeout=10)))
    t.start()
    n, seconds = _link.send_for("127.0.0.1", server.getsockname()[1], 3 * _link.CHUNK + 5, 10.0)
    t.join(10)
    server.close()
    assert n == got["n"] == 3 * _link.CHUNK + 5 and seconds > 0


def test_gloo_address_follows_gloo_socket_ifname():
    assert _link.gloo_address({"GLOO_SOCKET_IFNAME": "lo"}) == "127.0.0.1"
    assert _link.gloo_address({}) == socket.gethostbyname(socket.gethostname())
    with pytest.raises(ValueError, match="GLOO_SOCKET_IFNAME=nosuch0: no IPv4 address"):
        _link.gloo_address({"GLOO_SOCKET_IFNAME": "nosuch0"})


# ---- light imports --------------------------------------------------------------
@pytest.mark.parametrize("argv", [["--help"], ["render", "plan", "--nodes", "3"]])
def test_cli_imports_neither_torch_nor_kubernetes(argv):
    code = ("import sys\nfrom labctl.cli import main\n"
            f"try:\n    main({argv!r})\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "heavy = sorted(m for m in ('torch', 'kubernetes', 'matplotlib') if m in sys.modules)\n"
            "print('HEAVY=' + ','.join(heavy), file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert "HEAVY=\n" in done.stderr


def test_a_traced_bench_says_its_small_times_carry_the_recorder():
    """Traced (the default), the recorder is in every timed call: the report says so, and
    how to measure without it; untraced, it says nothing of it."""
    traced = [dict(r, traced=True) if r.get("name") == "bench_env" else r for r in synthetic()]
    assert bench.TRACED_NOTE in _markdown(traced)
    assert "--no-trace" not in _markdown(synthetic())
