"""The op table: every op the lab traces, and every ProcessGroup method and c10d op that
issues one, spelled once (issue 48). Standard library only.

Read by the recorder (which methods it wraps, what it records of them), the trace merge
and the matcher on the host (which ops are p2p, which reduce, which carry a root), and the
exercises (which calls are collectives, which are point-to-point). An op that a later torch
adds and this table lacks is still recorded (the recorder's kernel on torch's dispatcher
sees every c10d op), under its c10d name.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass


class Kind(enum.Enum):
    COLLECTIVE = "c"                # numbered per process group: every member must make the same call
    P2P = "p"                       # numbered per process group apart from the collectives
    CALL = "l"                      # no op of a group, numbered by none: the group's life cycle, a store read


class Where(enum.Enum):
    """The int argument an op takes beside its tensors, as a group rank."""
    ROOT = "root"                   # broadcast, reduce, gather, scatter
    PEER = "peer"                   # send, recv


@dataclass(frozen=True)
class Op:
    """One op as the trace names it."""
    name: str
    kind: Kind
    where: Where | None = None
    reduces: bool = False           # its reduce op (SUM, MAX ...) must agree across ranks
    sends: bool = False             # a p2p op that sends (send, isend)
    blocking: bool = True           # the call returns when the op has completed (send, recv)

    @property
    def p2p(self) -> bool:
        return self.kind is Kind.P2P


def _c(name: str, where: Where | None = None, reduces: bool = False) -> Op:
    return Op(name, Kind.COLLECTIVE, where, reduces)


def _p(name: str, sends: bool, blocking: bool, where: Where | None = Where.PEER) -> Op:
    return Op(name, Kind.P2P, where, sends=sends, blocking=blocking)


# the Store methods the recorder records when the script's own line calls them, traced as
# "store.get" ...: reads block until another rank writes, an add, a delete or a set decide
# what the others' reads find, a compare_set of one key by several ranks is an election
STORE_CALLS = ("get", "wait", "add", "delete_key", "set", "compare_set")

OPS: dict[str, Op] = {op.name: op for op in (
    _c("all_reduce", reduces=True),
    _c("all_reduce_coalesced", reduces=True),
    _c("broadcast", Where.ROOT),
    _c("reduce", Where.ROOT, reduces=True),
    _c("all_gather"),
    _c("all_gather_into_tensor"),
    _c("all_gather_coalesced"),
    _c("all_gather_into_tensor_coalesced"),
    _c("reduce_scatter", reduces=True),
    _c("reduce_scatter_tensor", reduces=True),
    _c("reduce_scatter_tensor_coalesced", reduces=True),
    _c("all_to_all"),
    _c("all_to_all_single"),
    _c("gather", Where.ROOT),
    _c("scatter", Where.ROOT),
    _c("barrier"),
    _c("monitored_barrier"),
    _p("send", sends=True, blocking=True),
    _p("recv", sends=False, blocking=True),
    _p("isend", sends=True, blocking=False),
    _p("irecv", sends=False, blocking=False),
    _p("batch_p2p_ops", sends=False, blocking=False, where=None),
    Op("new_group", Kind.CALL),
    Op("destroy_process_group", Kind.CALL),
    *(Op(f"store.{name}", Kind.CALL) for name in STORE_CALLS),
    Op("not_a_member", Kind.CALL),  # a collective on a group the rank is not in (its key: which)
    Op("sender_dropped", Kind.CALL),  # a recv from any source whose sender (its result) the line drops
    Op("read_before_wait", Kind.CALL),  # an irecv's buffer read before its work was waited on
    Op("aliased_outputs", Kind.CALL),  # a collective's output list holding one tensor in two slots
    Op("into_a_copy", Kind.CALL),  # a collective writing into a copy its line made of a tensor and dropped
    Op("not_contiguous", Kind.CALL),  # a collective given a tensor that is not contiguous (a strided view)
    Op("pickled", Kind.CALL),  # an object collective's object, pickled: its key names the classes it holds
)}

# the calls the recorder records besides the ops (workloads/_trace/calls.py): a group's life
# cycle, which every member must go through alike, and the store calls a script makes
# itself: reads block until another rank writes (a rank held there holds up the others), a
# counter's add and a delete decide what the others' reads find
DEFAULT_PG = "default_pg"           # the name the trace gives the default group (a new generation: "default_pg@2")
DESTROY = "destroy_process_group"
LIFECYCLE_CALLS = ("new_group", DESTROY)
LOCAL_SYNC = "local"                 # the key of a new_group made with use_local_synchronization=True
STORE_OPS = frozenset(f"store.{name}" for name in STORE_CALLS)
STORE_READS = frozenset({"store.get", "store.wait"})  # ... those that block until another rank writes
CALLS = frozenset(name for name, op in OPS.items() if op.kind is Kind.CALL)

P2P = frozenset(name for name, op in OPS.items() if op.p2p)
SENDS = frozenset(name for name, op in OPS.items() if op.sends)
RECVS = frozenset(name for name, op in OPS.items() if op.p2p and op.where is Where.PEER and not op.sends)
BLOCKING_P2P = frozenset(name for name, op in OPS.items() if op.p2p and op.blocking)
ONE_PEER_P2P = frozenset({"send", "recv", "isend", "irecv"})   # what a learner's exercise may call


@dataclass(frozen=True)
class Method:
    """A ProcessGroup method (and the c10d op of the same name) that issues one op."""
    name: str
    op: str                         # the op it issues, as the trace names it
    input_index: int                # its input's position (what the op's size is read from); -1: none
    input_key: str | None = None    # ... and its keyword, where it is not `tensors`/`tensor`
    reduces: bool = False
    output_list: bool = False       # its first argument is a list of output tensors, one per rank
    writes_input: bool = False      # it writes its result into its input (on a broadcast's root: reads it)

    @property
    def where(self) -> Where | None:
        return OPS[self.op].where if self.name != "recv_anysource" else None


_OUTPUT_LISTS = ("allgather", "gather", "alltoall")     # methods whose first argument is one output per rank
_WRITE_INPUT = ("allreduce", "allreduce_coalesced", "broadcast", "recv", "recv_anysource")


def _m(name: str, op: str, index: int, key: str | None = None) -> Method:
    return Method(name, op, index, key, OPS[op].reduces, name in _OUTPUT_LISTS, name in _WRITE_INPUT)


# A method that is not here (one a later torch adds) is not wrapped: its op still reaches
# the recorder's kernel on the dispatcher and is recorded there, at that path's cost.
METHODS: dict[str, Method] = {m.name: m for m in (
    _m("allreduce", "all_reduce", 0),
    _m("allreduce_coalesced", "all_reduce_coalesced", 0),
    _m("broadcast", "broadcast", 0),
    _m("reduce", "reduce", 0),
    _m("allgather", "all_gather", 1, "input_tensors"),
    _m("_allgather_base", "all_gather_into_tensor", 1, "input"),
    _m("all_gather_single", "all_gather_into_tensor", 1, "input"),
    _m("allgather_coalesced", "all_gather_coalesced", 1, "input_list"),
    _m("allgather_into_tensor_coalesced", "all_gather_into_tensor_coalesced", 1, "inputs"),
    _m("all_gather_single_coalesced", "all_gather_into_tensor_coalesced", 1, "inputs"),
    _m("reduce_scatter", "reduce_scatter", 1, "input_tensors"),
    _m("_reduce_scatter_base", "reduce_scatter_tensor", 1, "inputTensor"),
    _m("reduce_scatter_single", "reduce_scatter_tensor", 1, "inputTensor"),
    _m("reduce_scatter_tensor_coalesced", "reduce_scatter_tensor_coalesced", 1, "inputs"),
    _m("reduce_scatter_single_coalesced", "reduce_scatter_tensor_coalesced", 1, "inputs"),
    _m("alltoall", "all_to_all", 1, "input_tensors"),
    _m("alltoall_base", "all_to_all_single", 1, "input"),
    _m("all_to_all_single", "all_to_all_single", 1, "input"),
    _m("gather", "gather", 1, "input_tensors"),
    _m("scatter", "scatter", 0, "output_tensors"),   # what each rank receives: the root alone has inputs
    _m("barrier", "barrier", -1),
    _m("monitored_barrier", "monitored_barrier", -1),
    _m("send", "send", 0),
    _m("recv", "recv", 0),
    _m("recv_anysource", "recv", 0),
)}

# c10d dispatcher ops whose name (without its trailing "_") is no method above
_C10D_ONLY = {"recv_any_source": "recv"}


def traced_name(c10d_op: str) -> str:
    """The trace's name of a c10d dispatcher op ("allreduce_" -> "all_reduce"); an op this
    table does not know keeps its own name."""
    base = c10d_op.rstrip("_")
    method = METHODS.get(base)
    return method.op if method is not None else _C10D_ONLY.get(base, base)


# torch.distributed functions that issue exactly one op: the op is named after the one the
# script called (else after the innermost public function on the way: all_gather for
# all_gather_object's, isend for batch_isend_irecv's)
ONE_OP_APIS = frozenset({
    "all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "all_gather_single",
    "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single", "all_to_all", "all_to_all_single",
    "gather", "scatter", "barrier", "monitored_barrier", "send", "recv", "isend", "irecv",
    "all_reduce_coalesced", "all_gather_coalesced"})

# torch.distributed's object collectives: each issues a few tensor collectives of its own
OBJECT_APIS = frozenset({"all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list"})

# every name a script may call that moves data through a collective: the ops, the
# ProcessGroup methods that issue them, and the object collectives (barriers move none)
COLLECTIVE_CALLS = frozenset(
    {name for name, op in OPS.items() if op.kind is Kind.COLLECTIVE and "barrier" not in name}
    | {m.name for m in METHODS.values() if OPS[m.op].kind is Kind.COLLECTIVE and "barrier" not in m.op}
    | OBJECT_APIS)


def is_p2p(name: str) -> bool:
    return name in P2P


def reduces(name: str) -> bool:
    op = OPS.get(name)
    return op is not None and op.reduces
