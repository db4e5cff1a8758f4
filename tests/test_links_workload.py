"""The `links` workload: its schedule, its verdict, its report, and a real local run.

The shaped compose lab (node 2 at 100 mbit named slow; the same lab unshaped not)
is tests/test_e2e_compose_links.py.
"""
from __future__ import annotations

import itertools
import json
import subprocess
import sys

import pytest

from labctl import draw
from workloads import _linkmath
from workloads._report import links as hook


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 16])
def test_every_pair_meets_once_in_rounds_of_disjoint_pairs(n):
    rounds = _linkmath.rounds(list(range(n)))
    assert len(rounds) == _linkmath.round_count(n) == (n - 1 if n % 2 == 0 else n)
    met = [p for r in rounds for p in r]
    assert sorted(met) == list(itertools.combinations(range(n), 2))
    for r in rounds:
        nodes = [x for p in r for x in p]
        assert len(nodes) == len(set(nodes))            # disjoint: they run at once
        assert len(r) == n // 2


def test_one_node_has_no_rounds():
    assert _linkmath.rounds([0]) == [] and _linkmath.round_count(1) == 0


MBIT = 1e6 / 8


def speeds(slow_node: int | None = None, n: int = 3, fast: float = 20_000, slow: float = 95) -> dict:
    out = {}
    for a in range(n):
        for b in range(n):
            if a != b:
                out[(a, b)] = (slow if slow_node in (a, b) else fast) * MBIT
    return out


def test_a_shaped_node_is_named_and_so_are_its_pairs():
    v = _linkmath.verdict(speeds(slow_node=2))
    assert v.slow_nodes == (2,) and v.slow_pairs == ((0, 2), (1, 2))
    assert v.reference_Bps == pytest.approx(20_000 * MBIT)


def test_an_even_lab_names_nothing():
    v = _linkmath.verdict(speeds())
    assert v.slow_nodes == () and v.slow_pairs == ()


def test_a_slow_pair_alone_names_no_node():
    s = speeds(n=4)
    s[(0, 1)] = s[(1, 0)] = 50 * MBIT
    v = _linkmath.verdict(s)
    assert v.slow_pairs == ((0, 1),) and v.slow_nodes == ()


def test_one_direction_hiccup_does_not_make_a_pair_slow():
    s = speeds()
    s[(0, 1)] = 1_000 * MBIT                 # a loaded moment one way; the other way is fine
    assert _linkmath.verdict(s).slow_pairs == ()


def test_two_nodes_have_nothing_to_compare_with():
    v = _linkmath.verdict({(0, 1): 1.0, (1, 0): 1.0})
    assert v.reference_Bps is None and v.slow_pairs == ()
    assert "nothing to compare" in hook.verdict_text(v, None)


def records(slow_node=2, links='{"nodes":{"2":"100mbit"}}') -> list[dict]:
    out = [{"workload": "links", "name": "links_env", "rank": 0, "ok": True, "links": links,
            "nodes": {str(i): {"rank": i, "host": f"lab-{i}"} for i in range(3)},
            "rounds": [[[0, 2]], [[0, 1]], [[1, 2]]], "round_seconds": [2.5, 1.0, 2.5],
            "slow_fraction": 0.5}]
    for (a, b), Bps in speeds(slow_node).items():
        out.append({"workload": "links", "name": "pair", "rank": a, "ok": True, "src_node": a,
                    "dst_node": b, "src_rank": a, "dst_rank": b, "p2p_Bps": Bps, "tcp_Bps": Bps,
                    "one_way_us": 80.0, "bytes": 4 << 20, "iters": 3})
    return out


def test_the_report_draws_the_matrix_and_names_the_shaped_node():
    md = draw.markdown(hook.views(records())) + "\n"
    assert "| 2 | lab-2 | 100 Mbit/s |" in md and "| 0 | lab-0 | unshaped |" in md
    assert "### Bandwidth matrix, Mbit/s" in md and "| node 0 | — | 20,000 █ | 95 ▁ |" in md
    assert "**Slow pairs: 0-2, 1-2.**" in md
    assert "**Node 2 is slow**: every pair it is in is slow (its link is configured at 100 Mbit/s)" in md
    assert "16 nodes (15 rounds of 8 pairs) take about 37.5 s" in md
    data = hook.as_json(records())
    assert data["slow_nodes"] == [2] and data["slow_pairs"] == [[0, 2], [1, 2]]
    shaped = [d for d in data["directions"] if 2 in (d["src_node"], d["dst_node"])]
    assert all(d["configured_Bps"] == 100e6 / 8 for d in shaped)
    assert data["configured"]["nodes"] == {"0": "unshaped", "1": "unshaped", "2": "100 Mbit/s"}
    assert draw.csv(hook.table(records())).splitlines()[0].startswith("src_node,dst_node,p2p_Bps")


def test_an_unshaped_lab_names_nothing():
    md = draw.markdown(hook.views(records(slow_node=None, links=None))) + "\n"
    assert "**No slow pair.**" in md and "Topology" not in md


def test_options_are_checked_when_the_lab_is_loaded():
    from labctl import backends
    from labctl.spec import SpecError

    with pytest.raises(SpecError, match="slow_fraction: expected a number between 0 and 1"):
        backends.from_dict({"workloads": [{"name": "links", "options": {"slow_fraction": 2}}]})
    with pytest.raises(SpecError, match="size_bytes: expected an integer >= 1"):
        backends.from_dict({"workloads": [{"name": "links", "options": {"size_bytes": 0}}]})


def test_a_local_lab_measures_every_pair_both_ways(tmp_path):
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "labctl.cli", "up", "--nodes", "3", "--nproc-per-node",
                           "2", "--workload", "links", "--out", str(out), "-q"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    pairs = [r for r in results if r.get("name") == "pair"]
    assert sorted((r["src_node"], r["dst_node"]) for r in pairs) == \
        [(a, b) for a in range(3) for b in range(3) if a != b]
    assert all(r["p2p_Bps"] > 0 and r["tcp_Bps"] > 0 and r["one_way_us"] > 0 for r in pairs)
    assert all(r["rank"] % 2 == 0 for r in pairs)           # the leaders: local rank 0
    (env,) = [r for r in results if r.get("name") == "links_env"]
    assert len(env["rounds"]) == 3 and len(env["round_seconds"]) == 3 and env["links"] is None
    assert not [r for r in results if r.get("name") == "shaping_locked"]   # nothing shaped here
    assert "### Bandwidth matrix, Mbit/s" in done.stdout
    report = json.loads(subprocess.run([sys.executable, "-m", "labctl.cli", "report", str(out),
                                        "--format", "json"], capture_output=True, text=True,
                                       timeout=60).stdout)
    assert len(report["links"]["directions"]) == 6 and report["links"]["rounds"] == env["rounds"]
    # the run's page has the links section too (it was in report.md only): the matrix of
    # what was measured, each direction as recorded
    from labctl import html

    (section,) = [w for w in html.page_data(out)["workloads"] if w["workload"] == "links"]
    views = {v["id"]: v for v in section["views"]}
    matrix = views["links-matrix"]
    assert matrix["labels"] == ["node 0", "node 1", "node 2"]
    assert {(a, b): matrix["cells"][a][b] for a in range(3) for b in range(3) if a != b} == \
        {(r["src_node"], r["dst_node"]): r["p2p_Bps"] for r in pairs}
    assert len(views["links-directions"]["rows"]) == 6 and views["links-verdict"]["text"].startswith("Reference: ")
