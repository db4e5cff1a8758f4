"""workloads/_trace/objects.py: the classes an object collective's pickle names, read from
its opcodes (nothing unpickled), and the object's tensor left as torch made it."""
from __future__ import annotations

import pickle
import types

import torch

from workloads._trace import objects


class ShardFormatError(Exception):
    def __init__(self, path, line_no):
        super().__init__(f"{path}:{line_no}")


def test_the_classes_a_pickle_names_are_read_without_unpickling_it():
    data = pickle.dumps({"ok": False, "error": ShardFormatError("a.jsonl", 7), "n": [1, 2]})
    assert f"{__name__}.ShardFormatError" in objects.classes(data)
    assert objects.classes(pickle.dumps({"n": 1})) == []
    assert objects.classes(b"not a pickle") == []


def test_the_wrapped_call_returns_torch_s_tensor_still_resizable(monkeypatch):
    """all_gather_object resizes the tensor _object_to_tensor returned: reading its bytes
    must not pin its storage (numpy() on it would)."""
    from workloads._trace import sites
    sites.bind(torch)
    said = []
    monkeypatch.setattr(objects, "mark", lambda name, key, code, lasti: said.append((name, key)))

    def original(obj, device, group):
        t = torch.ByteTensor(torch.ByteStorage._from_buffer(pickle.dumps(obj)))
        return t, torch.LongTensor([t.numel()])

    c10d = types.SimpleNamespace(_object_to_tensor=original)
    objects.install(c10d)
    tensor, size = c10d._object_to_tensor({"error": ShardFormatError("a", 1)}, torch.device("cpu"), None)
    tensor.resize_(int(size) * 4)                        # what all_gather_object does next
    assert said and said[0][0] == "pickled" and "ShardFormatError" in said[0][1], said
