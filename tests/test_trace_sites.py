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


def test_a_collective_the_script_s_code_issues_inside_another_call_is_that_call_s(tmp_path):
    """A `__getstate__` that all_reduces while broadcast_object_list pickles the object:
    the script's frame (line 2 of state.py) runs inside broadcast_object_list, which the
    script's own line further out called: that is the call (sites.enclosing_call); a
    frame called from torch's machinery (a comm hook from the backward) is not nested."""
    torch_dir = os.path.dirname(os.path.abspath(torch.__file__))
    sites.bind(torch)
    said: dict = {}
    scope = {"SAID": said, "sites": sites, "sys": sys}
    c10d = os.path.join(torch_dir, "distributed", "distributed_c10d.py")
    exec(compile("def all_reduce(t):\n    f = sys._getframe()\n    code, _, _ = sites._where(f)\n"
                 "    SAID['outer'] = sites.enclosing_call(code, f)\n"
                 "def broadcast_object_list(obj):\n    dumps(obj)\n", c10d, "exec"), scope)
    exec(compile("def dumps(obj):\n    obj.getstate()\n", "/usr/lib/python3.11/pickle.py", "exec"), scope)
    exec(compile("class State:\n    def getstate(self):\n        all_reduce(1)\n"
                 "def main():\n    broadcast_object_list(State())\n", str(tmp_path / "state.py"), "exec"), scope)
    scope["main"]()
    assert said["outer"] == "broadcast_object_list"
    exec(compile("def backward(t):\n    t.getstate()\n", os.path.join(torch_dir, "_tensor.py"), "exec"), scope)
    exec(compile("def step():\n    backward(State())\n", str(tmp_path / "train.py"), "exec"), scope)
    scope["step"]()
    assert said["outer"] is None
