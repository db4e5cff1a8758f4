"""workloads/_protocol/frames.py: one rule for which frame is the user's, for the recorder
and the log readers alike."""
from __future__ import annotations

import os

from labctl import tracebacks
from workloads._protocol.frames import STDLIB, TORCH_WRAPPERS, user_frame


def test_the_script_and_workloads_are_the_user_s_and_libraries_and_the_harness_are_not():
    assert user_frame("/home/me/job.py") and user_frame("<string>") and user_frame("/lab/script/train.py")
    assert user_frame("/opt/venv/lib/python3.11/site-packages/workloads/bench.py")   # an installed workload
    for library in ("/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py",
                    "/usr/lib/python3/dist-packages/accelerate/utils/operations.py",
                    "<frozen runpy>", STDLIB + "threading.py", os.path.join(STDLIB, "runpy.py"),
                    "numpy/random/_mt19937.pyx"):
        assert not user_frame(library), library
    for harness in ("/work/main/workloads/_script.py", "/work/main/workloads/_trace/sites.py",
                    "/opt/labctl/workloads/_record.py"):
        assert not user_frame(harness), harness


def test_the_log_readers_use_the_recorder_s_rule():
    for path in ("/home/me/job.py", "/work/main/workloads/_trace/calls.py", STDLIB + "threading.py"):
        assert tracebacks.own_frame(path) == user_frame(path)
    assert tracebacks.DIST_WRAPPERS is TORCH_WRAPPERS and "decorate_context" in TORCH_WRAPPERS
