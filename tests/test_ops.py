"""The op table (workloads/_protocol/ops.py, issue 48) against the torch this lab pins
(2.13): every ProcessGroup method that issues an op is in the table or deliberately
absent, every c10d dispatcher op maps to an op the table knows or is named below, and
the table's facts (inputs' keywords, roots and peers) are torch's. A torch that adds a
method or an op fails here, naming it, until the table says what it is."""
from __future__ import annotations

import re

import pytest

from workloads._protocol import ops

torch = pytest.importorskip("torch")

# ProcessGroup methods that return a Work but are not wrapped, and why
DELIBERATELY_ABSENT = {
    "_end_coalescing": "closes a coalescing bracket: the ops issued inside are recorded each, and end "
                       "with the work it returns (the recorder wraps it apart, pyops._end_coalescing)",
}
# c10d dispatcher ops the table does not know (recorded under their own c10d name)
UNKNOWN_C10D_OPS: dict[str, str] = {}

_RETURNS_WORK = re.compile(r"->\s*(c10d::Work|torch\._C\._distributed_c10d\.Work)\b")


def _group_methods() -> dict[str, object]:
    """ProcessGroup's own methods, torch's (not the recorder's wrappers, if installed)."""
    group_class = torch._C._distributed_c10d.ProcessGroup
    return {name: getattr(m, "__wrapped__", m) for name, m in group_class.__dict__.items()
            if not name.startswith("__")}


def _c10d_op_names() -> set[str]:
    from workloads._trace import c10d_ops

    return set(c10d_ops())


def _issuing(methods: dict[str, object], c10d: set[str]) -> set[str]:
    """The methods that issue an op: they return a Work, or a c10d op has their name
    (monitored_barrier returns None)."""
    return {name for name, m in methods.items()
            if _RETURNS_WORK.search(getattr(m, "__doc__", None) or "") or f"{name}_" in c10d or name in c10d}


def _unlisted(methods: dict[str, object], c10d: set[str]) -> set[str]:
    return _issuing(methods, c10d) - set(ops.METHODS) - set(DELIBERATELY_ABSENT)


def _unmapped(c10d: set[str]) -> set[str]:
    return {name for name in c10d if ops.traced_name(name) not in ops.OPS} - set(UNKNOWN_C10D_OPS)


def test_every_process_group_method_that_issues_an_op_is_in_the_table_or_deliberately_absent():
    methods, c10d = _group_methods(), _c10d_op_names()
    assert _unlisted(methods, c10d) == set(), "add them to ops.METHODS or to DELIBERATELY_ABSENT (with why)"
    assert set(ops.METHODS) <= set(methods), "the table names methods this torch lacks"
    assert set(DELIBERATELY_ABSENT) <= _issuing(methods, c10d), "a deliberately absent method issues no op now"
    assert set(ops.METHODS) <= _issuing(methods, c10d), "a table's method that issues no op"


def test_every_c10d_op_maps_to_an_op_the_table_knows():
    c10d = _c10d_op_names()
    assert len(c10d) >= 15, c10d
    assert _unmapped(c10d) == set(), "add them to ops.OPS (and ops.METHODS or ops._C10D_ONLY), or to UNKNOWN_C10D_OPS"
    assert set(UNKNOWN_C10D_OPS) <= c10d, "UNKNOWN_C10D_OPS names an op this torch lacks"
    assert {m.op for m in ops.METHODS.values()} <= {ops.traced_name(name) for name in c10d}


def test_the_checks_fail_on_a_method_or_op_the_table_lacks():
    """What a later torch would bring: a method returning a Work, a c10d op, neither known."""
    class Fake:
        """allreduce_v2(self: ProcessGroup, tensors: list[Tensor]) -> c10d::Work"""

    methods = {**_group_methods(), "allreduce_v2": Fake}
    assert _unlisted(methods, _c10d_op_names()) == {"allreduce_v2"}
    assert _unmapped(_c10d_op_names() | {"frobnicate_"}) == {"frobnicate_"}


def _arguments(doc: str) -> set[str]:
    """The argument names in a pybind method's signature lines (every overload's)."""
    lines = [line for line in doc.splitlines() if re.match(r"\s*(\d+\. )?\w+\(self", line)]
    return set(re.findall(r"[(,] ?(\w+):", " ".join(lines))) - {"self"}


def test_each_method_s_input_keyword_and_root_or_peer_are_torch_s():
    """The keyword a method's input is read from when given by name is one of its own (was:
    alltoall's `input`, the coalesced methods' `tensors`, which they have not: a call by
    keyword was recorded with no size)."""
    methods = _group_methods()
    for method in ops.METHODS.values():
        arguments = _arguments(getattr(methods[method.name], "__doc__", None) or "")
        if method.input_index >= 0 and method.name != "recv_anysource":      # its arguments have no names
            keys = {method.input_key} if method.input_key is not None else {"tensors", "tensor"}
            assert keys & arguments, (method.name, keys, arguments)
        if method.where is ops.Where.PEER and method.name != "recv_anysource":
            assert arguments & {"dstRank", "srcRank"}, (method.name, arguments)
        if method.where is ops.Where.ROOT:
            assert "root" in arguments or "opts" in arguments, (method.name, arguments)
    assert {m.name for m in ops.METHODS.values() if m.reduces} == {
        "allreduce", "allreduce_coalesced", "reduce", "reduce_scatter", "_reduce_scatter_base",
        "reduce_scatter_single", "reduce_scatter_tensor_coalesced", "reduce_scatter_single_coalesced"}


def test_the_table_is_one_model():
    assert all(m.op in ops.OPS for m in ops.METHODS.values())
    assert ops.ONE_PEER_P2P <= ops.P2P and ops.SENDS <= ops.P2P and ops.RECVS <= ops.P2P
    assert ops.ONE_OP_APIS - set(ops.OPS) <= {"all_gather_single", "reduce_scatter_single"}
    assert ops.traced_name("allreduce_") == "all_reduce" and ops.traced_name("recv_any_source_") == "recv"
    assert ops.traced_name("frobnicate_") == "frobnicate"      # unknown: its own name
    from workloads._protocol import exercises
    assert exercises.P2P_OPS is ops.ONE_PEER_P2P and exercises.SENDS is ops.SENDS
