"""The `bench` and `barrier` workloads, run for real on the local backend (slow)."""
from __future__ import annotations

import json

import pytest

from labctl.rundir import RunDir
from labctl import draw
from labctl.reports import benchfiles

from conftest import assert_nothing_left, labctl

SMALL = {"min_bytes": 256, "max_bytes": 16384, "factor": 8, "warmup_iters": 1, "iters": 3,
         "link_bytes": 8 << 20, "link_seconds": 0.5}


def up_bench(tmp_path, nodes: int, nproc: int, options: dict) -> tuple[RunDir, str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    lab = tmp_path / "lab.yaml"
    lab.write_text(json.dumps({"name": "bench", "nodes": nodes, "nproc_per_node": nproc,
                               "timeout": 120, "workloads": [{"name": "bench", "options": options}]}))
    out = tmp_path / "run"
    done = labctl("up", "-f", str(lab), "--out", str(out), "-q", timeout=180)
    run = RunDir.open(out)
    assert_nothing_left(run.status["run_id"])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return run, done.stdout


@pytest.mark.slow
@pytest.mark.parametrize("nodes, nproc, dtype", [(2, 2, "float32"), (4, 1, "bfloat16")])
def test_bench_sweep_tables_plots_and_no_wrong_elements(tmp_path, nodes, nproc, dtype):
    run, stdout = up_bench(tmp_path, nodes, nproc, {**SMALL, "dtype": dtype})
    from workloads._report import bench

    results = run.results()
    rows = bench.rows(results)
    sizes = [256, 2048, 16384]
    # every op at every size, once (rank 0 only), none with a wrong element
    assert {(r["op"], r["size_bytes"]) for r in rows} == {(op, s) for op in bench.OPS for s in sizes}
    assert len(rows) == len([r for r in results if r.get("name") in bench.OPS])
    assert all(r["wrong"] == 0 and r["ok"] and r["dtype"] == dtype for r in rows)
    assert all(r["time_us_median"] > 0 and r["busbw_GBps"] > 0 for r in rows)
    env = bench.environment(results)
    assert env["world_size"] == 4 and env["nodes"] == nodes and env["nproc_per_node"] == nproc
    links = bench.links(results)
    assert [m["dst_node"] for m in links] == list(range(1, nodes))
    assert all(m["address"] == "127.0.0.1" and m["bytes"] > 0 for m in links)
    for text in (stdout, (run.path / "report.md").read_text()):
        assert "### all_reduce (busbw factor 2(n-1)/n)" in text and "% link" in text
    for name in benchfiles.PLOTS:
        assert (run.path / name).read_bytes()[:4] == b"\x89PNG"


def test_bench_wrong_option_is_refused_before_anything_starts(tmp_path):
    lab = tmp_path / "lab.yaml"
    lab.write_text(json.dumps({"nodes": 1, "nproc_per_node": 2, "timeout": 60,
                               "workloads": [{"name": "bench", "options": {"factor": 1}}]}))
    done = labctl("up", "-f", str(lab), "--out", str(tmp_path / "run"), "-q", timeout=120)
    assert done.returncode == 2
    assert "factor: expected an integer >= 2" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_barrier_workload(tmp_path):
    done = labctl("up", "--workload", "barrier", "--nodes", "2", "--nproc-per-node", "2",
                  "--out", str(tmp_path / "run"), "-q", timeout=120)
    assert done.returncode == 0, done.stderr
    results = RunDir.open(tmp_path / "run").results()
    assert sorted(r["rank"] for r in results if r["name"] == "barrier") == [0, 1, 2, 3]


# ---- the correctness pass itself, in a one-rank gloo group (fast) -------------------
@pytest.fixture
def one_rank_ctx():
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    from workloads import _common

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield _common.Context(rank=0, world_size=1, local_rank=0, local_world_size=1, node_rank=0,
                              backend="gloo", device=torch.device("cpu"), workload="bench")
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
                                "all_to_all"])
def test_wrong_elements_is_zero_for_a_correct_op_and_counts_corruption(one_rank_ctx, op):
    """nccl-tests' #wrong: elements differing from the known answer. A call that
    corrupts 3 elements of the result must be counted as exactly 3 wrong."""
    import torch

    from workloads import bench

    case = bench.Case(one_rank_ctx, op, 64, torch.float32)
    assert case.wrong_elements() == 0
    result = case.recv if op in ("all_gather", "reduce_scatter", "all_to_all") else case.send
    real_call = case.call

    def corrupting_call():
        real_call()
        result[:3] = 99

    case.call = corrupting_call
    assert case.wrong_elements() == 3


def test_pattern_sums_stay_exact_in_small_dtypes():
    """Known answers must be exact in the dtype, else #wrong would count rounding."""
    torch = pytest.importorskip("torch")
    from workloads import bench

    cpu = torch.device("cpu")
    for dtype in (torch.int8, torch.uint8, torch.float16, torch.bfloat16, torch.float32):
        for n in (2, 8, 16, 64):
            total = bench._sum_patterns(n, 50, dtype, cpu)
            mod = bench.modulus_for(dtype, n)
            exact = sum(bench.pattern(r, 50, torch.int64, cpu, modulus=mod) for r in range(n))
            assert torch.equal(total.to(torch.int64), exact), (dtype, n)
            # and the reduction the backend performs in that dtype gives the same
            assert torch.equal(sum(bench.pattern(r, 50, dtype, cpu, modulus=mod) for r in range(n)).to(torch.int64),
                               exact), (dtype, n)


@pytest.mark.slow
def test_two_runs_of_one_lab_compare_with_their_spread_and_every_op_is_fitted_or_named(tmp_path):
    """Issue 53 item 7, on real runs: `labctl compare` of two runs of the same lab gave ratios
    from 0.25 to 3.98 with no word about noise, and the cost model dropped the ops it could not
    fit without a word. Every row now carries the spread of the same lab (from its iterations)
    and is marked noise exactly when its ratio is inside it; every op is in the cost model's
    table or named under it with why."""
    options = {"ops": ["all_reduce", "pingpong"], "min_bytes": 1024, "max_bytes": 16384, "factor": 4,
               "warmup_iters": 1, "iters": 10, "link": False}
    a, _ = up_bench(tmp_path / "a", 1, 2, options)
    b, _ = up_bench(tmp_path / "b", 1, 2, options)
    done = labctl("compare", str(a.path), str(b.path), "--format", "json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["rows"]
    assert len(rows) == 6
    for r in rows:
        assert r["same_lab_low"] < 1 < r["same_lab_high"]
        assert r["noise"] == (r["same_lab_low"] <= r["time_ratio"] <= r["same_lab_high"])
    md = labctl("compare", str(a.path), str(b.path)).stdout
    noise = sum(r["noise"] for r in rows)
    assert f"**{noise} of 6 time ratios (" in md and "inside the spread of the same lab: noise" in md
    assert md.count(" noise | ") == noise
    from workloads._report import bench

    section = draw.markdown(bench.cost_model_views(a.results()))
    for op in ("all_reduce", "pingpong"):
        assert f"| {op} |" in section or f"**{op}**: " in section, section
