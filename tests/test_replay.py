"""The algorithm registry (workloads/_protocol/algorithms.py) and the replay of its messages
over a lab's links (workloads/_protocol/replay.py), against schedules computed by hand."""
from __future__ import annotations

import pytest

from workloads import _benchmath, _costmodel
from workloads._protocol import algorithms as A
from workloads._protocol import exercises

MiB = 1 << 20


# ---- one registry ---------------------------------------------------------------------
def test_collective_cost_is_declared_once_and_read_from_the_registry():
    assert _benchmath.busbw_factor is A.busbw_factor and _benchmath.OPS is A.OPS
    for family, models in _costmodel.MODELS.items():
        for op, algo in models.items():
            assert algo is A.algorithm(family, op) and algo.op == op
    assert set(_costmodel.MODELS["gloo"]) == set(A.OPS) == set(_costmodel.MODELS["nccl"])
    for name, ex in exercises.EXERCISES.items():
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
