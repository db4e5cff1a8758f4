"""workloads/_trace/copies.py: a collective that writes into a copy its line made of a
named tensor, and dropped (`dist.all_reduce(counts.float())` where `.float()` copied)."""
from __future__ import annotations

import torch

from workloads._trace.copies import into_a_copy

SCRIPT = '''
import sys
import torch


class dist:
    @staticmethod
    def all_reduce(t):
        frame = sys._getframe(1)
        SAID.append(into_a_copy(frame, frame.f_code, frame.f_lasti, t, "all_reduce", torch.Tensor))


class Stats:
    def __init__(self):
        self.counts = torch.ones(3, dtype=torch.int64)


counts, floats, stats = torch.ones(3, dtype=torch.int64), torch.ones(3), Stats()
dist.all_reduce(counts.float())         # a copy of counts: said
dist.all_reduce(floats.float())         # floats itself: not said
dist.all_reduce(floats.view(3))         # a view: the result lands in floats
dist.all_reduce(torch.ones(3))          # no tensor the frame names: not said
dist.all_reduce(stats.counts.float())   # an attribute chain's tensor, copied: said
dist.all_reduce(counts.float().abs())   # a call on the way: not evaluated, not said


def average(x):
    dist.all_reduce(x.double())         # in a function's frame: said
    return x


average(floats)
'''


def test_a_collective_into_a_copy_its_line_made_is_said_and_nothing_else(tmp_path):
    path = tmp_path / "job.py"
    path.write_text(SCRIPT)
    said: list[bool] = []
    exec(compile(SCRIPT, str(path), "exec"), {"SAID": said, "into_a_copy": into_a_copy, "__name__": "job"})
    assert said == [True, False, False, False, True, False, True]


def test_what_it_cannot_read_is_not_said(tmp_path):
    frame = type("Frame", (), {"f_code": None, "f_back": None})()
    assert into_a_copy(frame, compile("x", "<none>", "eval"), 0, torch.ones(1), "all_reduce", torch.Tensor) is False
    assert into_a_copy(None, None, 0, torch.ones(1), "all_reduce", torch.Tensor) is False
