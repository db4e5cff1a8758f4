"""The algorithm registry (workloads/_protocol/algorithms.py) and the replay of its messages
over a lab's links (workloads/_protocol/replay.py), against schedules computed by hand."""
from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from workloads import _benchmath, _costmodel
from workloads._protocol import algorithms as A
from workloads._protocol import schedules
from workloads._protocol import exercises
from workloads._protocol import replay as R

MiB = 1 << 20


# ---- one registry ---------------------------------------------------------------------
def test_collective_cost_is_declared_once_and_read_from_the_registry():
    assert _benchmath.busbw_factor is A.busbw_factor and _benchmath.OPS is A.OPS
    for family, models in _costmodel.MODELS.items():
        for op, algo in models.items():
            assert algo is A.algorithm(family, op) and algo.op == op
    assert set(_costmodel.MODELS["gloo"]) == set(A.OPS) == set(_costmodel.MODELS["nccl"])
    for name, ex in exercises.EXERCISES.items():
        if name in exercises.PATTERNS:               # a pattern's optimum is its own (tests/test_exercise_patterns.py)
            assert ex.algorithm is None and ex.optimum == ex.pattern_optimum
            continue
        if ex.algorithm is None:                     # average_gradients: DDP's, not graded by bytes
            assert exercises.traffic(name, 4, 0, 10, 4) is None
            continue
        algo = A.ALGORITHMS[ex.algorithm]
        assert algo.family == "p2p" and algo.op == ex.reference and ex.optimum == algo.optimum
        assert exercises.traffic(name, 4, 1, 10, 4) == algo.traffic(4, 1, 10, 4)


def test_every_algorithm_has_its_closed_form_and_its_messages():
    for algo in A.ALGORITHMS.values():
        assert algo.op in A.OPS and algo.source and algo.steps_text and algo.factor_text
        for n in (2, 3, 4):
            schedule = algo.schedule(n, MiB)
            assert schedule.messages and schedule.n == n
            for i, m in enumerate(schedule.messages):
                assert 0 <= m.src < n and 0 <= m.dst < n and m.src != m.dst and m.nbytes > 0
                assert all(a < i for a in m.after), f"{algo.key}: message {i} waits for a later one"
    with pytest.raises(ValueError, match="no gloo algorithm for 'gather'"):
        A.algorithm("gloo", "gather")
    assert A.family_for("gloo") == "gloo" and A.family_for("nccl") == "nccl" and A.family_for(None) == "nccl"


# ---- the messages, counted by hand ----------------------------------------------------
# S = 1 MiB of float32 at B = 1 MiB/s: S / B = 1 s. gloo's ring all-reduce cuts S into 2n
# segments (S <= 2n MiB), two per rank, and runs 2n - 2 iterations per phase.
S, B = MiB, float(MiB)
GLOO = {op: A.algorithm("gloo", op) for op in A.OPS}
# op: (messages at n = 2, 3, 4)
COUNTS = {
    "all_reduce": (8, 24, 48),          # 2 phases x n ranks x (2n - 2)
    "reduce_scatter": (8, 24, 48),      # the same all-reduce
    "all_gather": (4, 12, 24),          # n ranks x 2(n - 1) halves
    "broadcast": (1, 2, 3),             # n - 1: every rank gets it once
    "reduce": (5, 14, 27),              # n ranks x (2n - 2) ring segments + (n - 1) chunks to the root
    "all_to_all": (2, 6, 12),           # n (n - 1) blocks
    "pingpong": (2, 2, 2),
    "ring": (2, 3, 4),
}


@pytest.mark.parametrize("n", [2, 3, 4])
def test_message_counts_are_gloo_s(n):
    for op, counts in COUNTS.items():
        assert len(GLOO[op].schedule(n, S).messages) == counts[n - 2], op


def test_bytes_per_link_by_hand():
    # all-reduce: rank r sends to r - 1; n = 2 and 4: S / 2n segments, 2(n-1)/n S each way
    assert GLOO["all_reduce"].schedule(2, S).pair_bytes() == {(0, 1): S, (1, 0): S}
    assert GLOO["all_reduce"].schedule(4, S).pair_bytes() == {(r, (r - 1) % 4): 3 * S // 2 for r in range(4)}
    # n = 3: six segments of 174764 B, the last 174756; rank r's reduce-scatter sends all but
    # segments 2r, 2r+1, its all-gather all but 2r+4, 2r+5 (mod 6): rank 1 sends the short one twice
    full, short = 174764, S - 5 * 174764
    assert GLOO["all_reduce"].schedule(3, S).pair_bytes() == {
        (0, 2): 7 * full + short, (1, 0): 6 * full + 2 * short, (2, 1): 7 * full + short}
    # all-gather: S / n per block in two halves, to r + 1: (n - 1) S / n each way
    assert GLOO["all_gather"].schedule(4, S).pair_bytes() == {(r, (r + 1) % 4): 3 * S // 4 for r in range(4)}
    # binomial broadcast: 0 -> 1, 0 -> 2, 1 -> 3, the whole buffer each
    assert GLOO["broadcast"].schedule(4, S).pair_bytes() == {(0, 1): S, (0, 2): S, (1, 3): S}
    assert GLOO["broadcast"].schedule(4, S, root=2).pair_bytes() == {(2, 3): S, (2, 0): S, (3, 1): S}
    # reduce at n = 2: two ring segments of S / 4 each way, then rank 1's chunk (S / 2) to the root
    assert GLOO["reduce"].schedule(2, S).pair_bytes() == {(0, 1): S // 2, (1, 0): S}
    assert GLOO["all_to_all"].schedule(3, 3 * 1000).pair_bytes() == {
        (a, b): 1000 for a in range(3) for b in range(3) if a != b}
    assert GLOO["all_to_all"].schedule(4, S).sent() == [3 * S // 4] * 4


# op: (seconds at n = 2, 3, 4) with every link at B, then with the last node at B / 2
UNIFORM = {"all_reduce": (1, 4 / 3, 3 / 2), "reduce_scatter": (1, 4 / 3, 3 / 2), "all_gather": (1 / 2, 2 / 3, 3 / 4),
           "broadcast": (1, 2, 3), "reduce": (1, 4 / 3, 3 / 2), "all_to_all": (1 / 2, 2 / 3, 3 / 4),
           "pingpong": (1, 1, 1), "ring": (1, 1, 1)}
SLOW_LAST = {
    "all_reduce": (2, 8 / 3, 3),        # every ring crosses the slow node: twice the uniform time
    "reduce_scatter": (2, 8 / 3, 3),
    "all_gather": (1, 4 / 3, 3 / 2),
    # n = 3: 0 -> 1 and 0 -> 2 at once share the root's cable; 0 -> 2 is capped at B/2 by the
    # slow node, which is its fair share: B/2 each, both end at 2 s;
    # n = 4: 0 -> 1, 0 -> 2 at B/2 each (2 s), then 1 -> 3 into the slow node (2 s)
    "broadcast": (2, 2, 4),
    # n = 3: the ring at B/2 (2/3 S: 4/3 s), then 1 and 2 send S/3 each into the root at once,
    # B/2 each (2's own cable is B/2): 2/3 s
    # n = 4: the ring at B/2 (3/4 S at B/2: 1.5 s), then 1, 2, 3 send S/4 each into the root at
    # once, B/3 each (3's cable, at B/2, is not full): 0.75 s
    "reduce": (2, 2, 9 / 4),
    "all_to_all": (1, 4 / 3, 3 / 2),    # the slow node sends (n - 1) S / n at B / 2
    "pingpong": (2, 2, 2),              # rank 0 <-> the last rank: the slow node's own pair
    "ring": (2, 2, 2),
}


@pytest.mark.parametrize("n", [2, 3, 4])
def test_critical_path_time_on_uniform_links_and_with_one_slow_node(n):
    uniform = R.Network.uniform(n, B)
    slow = uniform.with_node(n - 1, B / 2)
    for op in A.OPS:
        schedule = GLOO[op].schedule(n, S)
        assert R.replay(schedule, uniform).seconds == pytest.approx(UNIFORM[op][n - 2], rel=1e-4), op
        assert R.replay(schedule, slow).seconds == pytest.approx(SLOW_LAST[op][n - 2], rel=1e-4), op
        # the replay on uniform links is the registry's closed form
        assert R.replay(schedule, uniform).seconds == pytest.approx(GLOO[op].factor(n) * S / B, rel=1e-4), op


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_alpha_counts_the_messages_one_after_another(n):
    """With links that cost nothing, a call costs α times the messages that must follow
    one another: the registry's steps(n), and the replay's critical path."""
    free = R.Network.uniform(n, 1e18, alpha_s=1.0)
    for op in A.OPS:
        result = R.replay(GLOO[op].schedule(n, S), free)
        assert result.seconds == pytest.approx(GLOO[op].steps(n)), op
        assert len(result.critical) / result.schedule.per_call == pytest.approx(GLOO[op].steps(n)), op
    # the binomial broadcast's longest chain at n = 4: 0 -> 1 -> 3
    result = R.replay(GLOO["broadcast"].schedule(4, S), R.Network.uniform(4, B))
    assert [(result.schedule.messages[i].src, result.schedule.messages[i].dst) for i in result.critical] == \
        [(0, 1), (1, 3)]


def test_flows_share_a_cable_max_min():
    """0 -> 1 and 0 -> 2 share the root's cable; 0 -> 2 is also capped by node 2's slower
    cable. Max-min, unweighted (the lab's queues do not drop: docs/network.md)."""
    fan = schedules.Schedule("test", 3, S, (schedules.Message(0, 1, S), schedules.Message(0, 2, S)))
    slow = R.Network.uniform(3, B).with_node(2, B / 2)
    assert R.replay(fan, slow).end == [pytest.approx(2.0), pytest.approx(2.0)]
    # below its fair share, the slow flow leaves the rest of the cable to the other
    slower = R.Network.uniform(3, B).with_node(2, B / 4)
    assert R.replay(fan, slower).end == [pytest.approx(4 / 3), pytest.approx(4.0)]
    # a slow node that is not full (its cap above its fair share) changes nothing
    mild = R.Network.uniform(3, B).with_node(2, 0.75 * B)
    assert R.replay(fan, mild).end == [pytest.approx(2.0), pytest.approx(2.0)]


def test_a_connection_sends_one_message_after_another_and_links_are_shared():
    two = schedules.Schedule("test", 3, S, (schedules.Message(0, 1, S), schedules.Message(0, 1, S)))
    result = R.replay(two, R.Network.uniform(3, B))
    assert result.end == [pytest.approx(1.0), pytest.approx(2.0)]        # one TCP connection: in turn
    fan = schedules.Schedule("test", 3, S, (schedules.Message(0, 1, S), schedules.Message(0, 2, S)))
    assert R.replay(fan, R.Network.uniform(3, B)).end == [pytest.approx(2.0)] * 2   # one cable: shared
    into = schedules.Schedule("test", 3, S, (schedules.Message(1, 0, S), schedules.Message(2, 0, S)))
    assert R.replay(into, R.Network.uniform(3, B)).end == [pytest.approx(2.0)] * 2  # the receiver's too
    # a pair rule caps only its pair; a latency delays the arrival, not the link
    net = R.Network.uniform(3, B).with_pair(0, 1, B / 4)
    assert R.replay(fan, net).end == [pytest.approx(4.0), pytest.approx(4 / 3)]
    late = replace(R.Network.uniform(2, B), latency={(0, 1): 0.5, (1, 0): 0.5})
    ping = GLOO["pingpong"].schedule(2, S)
    assert R.replay(ping, late).makespan == pytest.approx(3.0)
    alpha, beta, _ = R.alpha_beta(ping, replace(late, alpha=0.25))
    assert (alpha, beta) == (pytest.approx(0.75), pytest.approx(1.0))     # one way: α + latency, S / B
    # ranks of one node talk over its loopback, not its cable (one loopback: its flows share it)
    local = R.Network.uniform(1, B, ranks_per_node=2, local_Bps=4 * B)
    assert R.replay(GLOO["ring"].schedule(2, S), local).seconds == pytest.approx(0.5)
    assert R.replay(GLOO["ring"].schedule(4, S), R.Network.uniform(2, B, ranks_per_node=2)).link_bytes == {
        (0, 0): S, (0, 1): S, (1, 1): S, (1, 0): S}


def test_the_fit_gives_back_alpha_and_the_efficiency_it_was_made_with():
    net = R.Network.uniform(2, 12.5e6)
    truth = replace(net.scaled(0.96), alpha=300e-6)
    points = [(GLOO[op].schedule(2, size), R.replay(GLOO[op].schedule(2, size), truth).seconds)
              for op in ("pingpong", "all_reduce") for size in (1 << 14, 1 << 16, 1 << 20, 1 << 22)]
    found = R.fit(points, net, "test")
    assert found.alpha_s == pytest.approx(300e-6, rel=1e-3) and found.efficiency == pytest.approx(0.96, rel=1e-4)
    assert found.rms_error < 1e-6 and found.points == 8
    assert R.fit(points[:1], net) is None


def test_nccl_on_paper_ring_is_nccl_tests_busbw_and_the_pipelines_approach_it():
    for n in (2, 3, 4, 8):
        net = R.Network.uniform(n, B)
        for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
            algo = A.algorithm("nccl", op)
            assert R.replay(algo.schedule(n, S), net).seconds == pytest.approx(A.busbw_factor(op, n), rel=1e-5), (op, n)
        # a chain in 512 KiB slices: S / B plus one slice per extra hop
        for op in ("broadcast", "reduce"):
            big = A.algorithm("nccl", op).schedule(n, 32 * MiB)
            assert R.replay(big, net).seconds / 32 == pytest.approx(1 + (n - 2) / 64, rel=1e-6), (op, n)
    # the double binary tree: every rank sends and receives about 2 S in all
    tree = A.ALGORITHMS["nccl.double_binary_tree"].schedule(8, 8 * MiB)
    assert sum(tree.sent()) == sum(tree.received()) == 2 * 7 * 8 * MiB
    assert R.replay(tree, R.Network.uniform(8, B)).seconds / 8 < 3


# ---- gloo's all_to_all as the ranks enter it ---------------------------------------------
# c = S / n, the block; every cable at B both ways. "Serial": every pair's later rank sends
# first, its earlier rank once that block has arrived (gloo's ready-to-receive notice queues
# behind the later rank's data on their connection).
@pytest.mark.parametrize("n, serial_c_over_B", [
    # n = 2: 1 -> 0 alone (c / B), then 0 -> 1 (c / B)
    (2, 2),
    # n = 3, entered 0, 1, 2: 2 -> 0, 2 -> 1 share 2's cable, 1 -> 0 and 2 -> 0 share 0's:
    # all at B / 2 (2 c / B); then 0 -> 1, 0 -> 2, 1 -> 2 at B / 2 (0's cable out, 2's in): 4
    (3, 4),
    # n = 4, entered 0..3: 3's three blocks and 0's three incoming at B / 3, 2 -> 1 at 2B / 3
    # (1.5 c / B), then 1 -> 2 at 2B / 3 while the rest finish (3 c / B); then 0 -> 1, 0 -> 2,
    # 0 -> 3, 1 -> 3, 2 -> 3 at B / 3 (0's cable out, 3's in): 6
    (4, 6),
])
def test_gloo_all_to_all_pairs_one_after_the_other_by_hand(n, serial_c_over_B):
    net = R.Network.uniform(n, B)
    c = (S // n) / B
    serial = schedules.gloo_alltoall_entered(n, S, list(range(n)), [])
    together = schedules.gloo_alltoall_entered(n, S, list(range(n)), [(a, b) for a in range(n) for b in range(a + 1, n)])
    assert R.replay(serial, net).seconds == pytest.approx(serial_c_over_B * c, rel=1e-6)
    assert R.replay(together, net).seconds == pytest.approx((n - 1) * c, rel=1e-6)
    # every way sends the same blocks as the registry's schedule (bytes per pair, messages)
    assert serial.pair_bytes() == together.pair_bytes() == GLOO["all_to_all"].schedule(n, S).pair_bytes()
    assert len(serial.messages) == n * (n - 1)
    # the earlier rank's block waits for the later's: 0 -> 1 after 1 -> 0
    first = {(m.src, m.dst): i for i, m in enumerate(serial.messages)}
    assert serial.messages[first[(0, 1)]].after == (first[(1, 0)],)
    assert serial.messages[first[(1, 0)]].after == ()


def test_gloo_all_to_all_one_pair_together_by_hand():
    """n = 3, entered 0, 1, 2, ranks 0 and 1 together: 0 <-> 1 both ways, 2 -> 0 and 2 -> 1
    at once, every flow at B / 2 (2 c / B); then 0 -> 2 and 1 -> 2 share 2's cable in: 4 c / B."""
    schedule = schedules.gloo_alltoall_entered(3, S, [0, 1, 2], [(0, 1)])
    assert R.replay(schedule, R.Network.uniform(3, B)).seconds == pytest.approx(4 * (S // 3) / B, rel=1e-6)


def test_the_expected_all_to_all_weighs_every_way_by_its_odds_up_to_4_ranks(monkeypatch):
    """n <= 4: every entry order (equally likely) and every set of pairs together (each with
    odds PAIR_TOGETHER), ways with the same messages merged: the mean is the plain average
    over all n! 2^(n(n-1)/2) cases, and the same at every size once scaled."""
    net = R.Network.uniform(3, B).with_node(2, B / 2)
    ways = schedules.gloo_alltoall_variants(3, S)
    assert sum(w.weight for w in ways) == pytest.approx(6.0)      # 3! orders, each's odds add to 1
    assert len(ways) < 48 and len({w.messages for w in ways}) == len(ways)
    p, pairs = schedules.PAIR_TOGETHER, [(0, 1), (0, 2), (1, 2)]
    plain = 0.0
    for order in itertools.permutations(range(3)):
        for k in range(8):
            together = [q for i, q in enumerate(pairs) if k >> i & 1]
            odds = p ** len(together) * (1 - p) ** (3 - len(together)) / 6
            plain += odds * R.replay(schedules.gloo_alltoall_entered(3, S, order, together), net).seconds
    assert R.expected(ways, net).seconds == pytest.approx(plain, rel=1e-9)
    small = R.expected(schedules.gloo_alltoall_variants(3, S // 4), net).seconds
    assert small * 4 == pytest.approx(plain, rel=1e-3)           # no draw to move it with the size
    # the odds at their ends: all together is the all-at-once schedule; none together at
    # n = 2 is one direction after the other, 2 c / B
    monkeypatch.setattr(schedules, "PAIR_TOGETHER", 1.0)
    assert R.expected(schedules.gloo_alltoall_variants(4, S), R.Network.uniform(4, B)).seconds == pytest.approx(
        R.replay(schedules.all_at_once(4, S), R.Network.uniform(4, B)).seconds, rel=1e-9)
    monkeypatch.setattr(schedules, "PAIR_TOGETHER", 0.0)
    assert R.expected(schedules.gloo_alltoall_variants(2, S), R.Network.uniform(2, B)).seconds == pytest.approx(
        2 * (S // 2) / B, rel=1e-9)


def test_the_expected_all_to_all_lies_between_its_fastest_and_slowest_way_and_is_repeatable():
    algo = GLOO["all_to_all"]
    net = R.Network.uniform(4, B)
    ways = algo.schedules(4, S)
    assert sum(w.weight for w in ways) == pytest.approx(24.0) and algo.schedules(4, S) == ways
    drawn = algo.schedules(5, S)
    assert len(drawn) == 64 and algo.schedules(5, S) == drawn     # above 4 ranks: seeded draws
    got = R.expected(ways, net)
    assert got.fastest >= R.replay(algo.schedule(4, S), net).seconds * (1 - 1e-9)
    assert got.fastest <= got.seconds <= got.slowest <= 2 * got.fastest * (1 + 1e-9)
    assert got.fastest < got.slowest                               # the ways differ
    # an algorithm with one way: its replay
    ring = R.expected(GLOO["all_reduce"].schedules(4, S), net)
    assert ring.ways == 1 and ring.seconds == ring.fastest == R.replay(GLOO["all_reduce"].schedule(4, S), net).seconds
    with pytest.raises(ValueError):
        R.expected([], net)
