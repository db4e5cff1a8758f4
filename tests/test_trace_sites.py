"""workloads/_trace/sites.py: which frame is the script's, and which call its line made."""
from __future__ import annotations

import os
import sys

import torch

from workloads._trace import sites


def _chain(tmp_path, torch_dir: str) -> dict:
    """A script's line that calls torch's machinery (`torch/_tensor.py`'s backward), which
    calls a public torch.distributed function (a comm hook), which calls `all_reduce`:
    real frames, each compiled under the file name it stands for."""
    said: dict = {}
    frames = {
        os.path.join(torch_dir, "distributed", "distributed_c10d.py"):
            "def all_reduce(t):\n    SAID['where'] = _where(sys._getframe())\n",
        os.path.join(torch_dir, "distributed", "algorithms", "ddp_comm_hooks", "default_hooks.py"):
            "def fp16_compress_hook(t):\n    all_reduce(t)\n",
        os.path.join(torch_dir, "_tensor.py"): "def backward(t):\n    fp16_compress_hook(t)\n",
        str(tmp_path / "train.py"): "def step(t):\n    backward(t)\n",
    }
    scope = {"SAID": said, "_where": sites._where, "sys": sys}
    for path, source in frames.items():
        exec(compile(source, path, "exec"), scope)
    scope["step"](torch.ones(1))
    return said


def test_a_public_function_torch_s_machinery_called_is_not_the_script_s_call(tmp_path):
    """DDP's fp16_compress_hook, called by the backward, issues the all_reduce: the script's
    line called backward, so the call is the collective's own (no api), where a public
    function the script's line calls itself (all_gather_object) stays the call."""
    torch_dir = os.path.dirname(os.path.abspath(torch.__file__))
    sites.bind(torch)
    code, _, api = _chain(tmp_path, torch_dir)["where"]
    assert code.co_filename == str(tmp_path / "train.py") and api is None, (code.co_filename, api)

    said: dict = {}
    scope = {"SAID": said, "_where": sites._where, "sys": sys}
    exec(compile("def all_gather(t):\n    SAID['where'] = _where(sys._getframe())\n"
                 "def all_gather_object(t):\n    all_gather(t)\n",
                 os.path.join(torch_dir, "distributed", "distributed_c10d.py"), "exec"), scope)
    exec(compile("def main(t):\n    all_gather_object(t)\n", str(tmp_path / "job.py"), "exec"), scope)
    scope["main"](1)
    assert said["where"][2] == "all_gather_object"
