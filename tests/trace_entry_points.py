"""The public collective and p2p entry points of the installed torch, found in torch itself,
and how to call each on a 2-rank gloo lab (tests/test_trace.py runs them traced and checks
every one left a record; one that torch adds shows up here as neither called nor named).

- `torch.distributed` functions (distributed_c10d.__all__), `_functional_collectives`
  functions (public, defined there), ProcessGroup methods that return a Work: one call
  each in CALLS, or a reason in NOT_OPS / NOT_ON_GLOO;
- the c10d dispatcher ops (where every ProcessGroup method ends, on every backend): the
  test checks the recorder put its kernel on every one torch registers."""
from __future__ import annotations

import inspect
import types

# entry point -> one line of Python, run on both ranks (R: rank, W: world size 2, P: the
# other rank, G: the world group, done(x): wait for a Work/AsyncCollectiveTensor/list)
CALLS: dict[str, str] = {
    # torch.distributed
    "dist.all_gather": "dist.all_gather([torch.zeros(2) for _ in range(W)], torch.ones(2))",
    "dist.all_gather_coalesced": "dist.all_gather_coalesced([[torch.zeros(2)] for _ in range(W)], [torch.ones(2)])",
    "dist.all_gather_into_tensor": "dist.all_gather_into_tensor(torch.zeros(2 * W), torch.ones(2))",
    "dist.all_gather_object": "dist.all_gather_object([None] * W, {'r': R})",
    "dist.all_gather_single": "dist.all_gather_single(torch.zeros(2 * W), torch.ones(2))",
    "dist.all_reduce": "dist.all_reduce(torch.ones(2))",
    "dist.all_reduce_coalesced": "dist.all_reduce_coalesced([torch.ones(2), torch.ones(3)])",
    "dist.all_to_all": "dist.all_to_all([torch.zeros(1) for _ in range(W)], [torch.ones(1) for _ in range(W)])",
    "dist.all_to_all_single": "dist.all_to_all_single(torch.zeros(W), torch.ones(W))",
    "dist.barrier": "dist.barrier()",
    "dist.batch_isend_irecv": "done(dist.batch_isend_irecv([dist.P2POp(dist.isend, torch.ones(2), P), "
                              "dist.P2POp(dist.irecv, torch.zeros(2), P)]))",
    "dist.broadcast": "dist.broadcast(torch.ones(2), src=0)",
    "dist.broadcast_object_list": "dist.broadcast_object_list([{'a': 1}], src=0)",
    "dist.gather": "dist.gather(torch.ones(2), [torch.zeros(2) for _ in range(W)] if R == 0 else None, dst=0)",
    "dist.gather_object": "dist.gather_object({'r': R}, [None] * W if R == 0 else None, dst=0)",
    "dist.isend": "done(dist.isend(torch.ones(2), P) if R == 0 else dist.irecv(torch.zeros(2), P))",
    "dist.irecv": "done(dist.irecv(torch.zeros(2), P) if R == 0 else dist.isend(torch.ones(2), P))",
    "dist.monitored_barrier": "dist.monitored_barrier()",
    "dist.send": "dist.send(torch.ones(2), P) if R == 0 else dist.recv(torch.zeros(2), P)",
    "dist.recv": "dist.recv(torch.zeros(2), P) if R == 0 else dist.send(torch.ones(2), P)",
    "dist.send_object_list": "dist.send_object_list([{'a': 1}], P) if R == 0 else dist.recv_object_list([None], P)",
    "dist.recv_object_list": "dist.recv_object_list([None], P) if R == 0 else dist.send_object_list([{'a': 1}], P)",
    "dist.reduce": "dist.reduce(torch.ones(2), dst=0)",
    "dist.reduce_scatter": "dist.reduce_scatter(torch.zeros(2), [torch.ones(2) for _ in range(W)])",
    "dist.reduce_scatter_single": "dist.reduce_scatter_single(torch.zeros(2), torch.ones(2 * W))",
    "dist.reduce_scatter_tensor": "dist.reduce_scatter_tensor(torch.zeros(2), torch.ones(2 * W))",
    "dist.scatter": "dist.scatter(torch.zeros(2), [torch.ones(2) for _ in range(W)] if R == 0 else None, src=0)",
    "dist.scatter_object_list": "dist.scatter_object_list([None], [{'a': i} for i in range(W)] if R == 0 else None, "
                                "src=0)",
    # torch.distributed._functional_collectives
    "funcol.all_gather_inplace": "funcol.all_gather_inplace([torch.zeros(2) for _ in range(W)], torch.ones(2))",
    "funcol.all_gather_into_tensor_coalesced": "done(funcol.all_gather_into_tensor_coalesced([torch.ones(2)], G))",
    "funcol.all_gather_single": "done(funcol.all_gather_single(torch.ones(2), 0, G))",
    "funcol.all_gather_single_autograd": "done(funcol.all_gather_single_autograd(torch.ones(2), 0, G))",
    "funcol.all_gather_single_coalesced": "done(funcol.all_gather_single_coalesced([torch.ones(2)], G))",
    "funcol.all_gather_tensor": "done(funcol.all_gather_tensor(torch.ones(2), 0, G))",
    "funcol.all_gather_tensor_autograd": "done(funcol.all_gather_tensor_autograd(torch.ones(2), 0, G))",
    "funcol.all_gather_tensor_inplace": "funcol.all_gather_tensor_inplace(torch.zeros(2 * W), torch.ones(2), G)",
    "funcol.all_reduce": "done(funcol.all_reduce(torch.ones(2), 'sum', G))",
    "funcol.all_reduce_coalesced": "done(funcol.all_reduce_coalesced([torch.ones(2)], 'sum', G))",
    "funcol.all_reduce_inplace": "funcol.all_reduce_inplace(torch.ones(2), group=G)",
    "funcol.all_to_all_inplace": "funcol.all_to_all_inplace(torch.zeros(W), torch.ones(W), group=G)",
    "funcol.all_to_all_single": "done(funcol.all_to_all_single(torch.ones(W), None, None, G))",
    "funcol.all_to_all_single_autograd": "done(funcol.all_to_all_single_autograd(torch.ones(W), None, None, G))",
    "funcol.batch_p2p_ops_inplace": "done(funcol.batch_p2p_ops_inplace(['isend', 'irecv'], [P, P], [0, 0], "
                                    "[torch.ones(2), torch.zeros(2)], G))",
    "funcol.broadcast": "done(funcol.broadcast(torch.ones(2), 0, G))",
    "funcol.isend_inplace": "done(funcol.isend_inplace(torch.ones(2), P) if R == 0 else "
                            "funcol.irecv_inplace(torch.zeros(2), P))",
    "funcol.irecv_inplace": "done(funcol.irecv_inplace(torch.zeros(2), P) if R == 0 else "
                            "funcol.isend_inplace(torch.ones(2), P))",
    "funcol.permute_tensor": "done(funcol.permute_tensor(torch.ones(2), [P, R] if R == 0 else [R, P], G))",
    "funcol.reduce_scatter_single": "done(funcol.reduce_scatter_single(torch.ones(2 * W), 'sum', 0, G))",
    "funcol.reduce_scatter_single_autograd": "done(funcol.reduce_scatter_single_autograd(torch.ones(2 * W), 'sum', 0, G))",
    "funcol.reduce_scatter_single_coalesced": "done(funcol.reduce_scatter_single_coalesced([torch.ones(2 * W)], 'sum', "
                                              "[0], G))",
    "funcol.reduce_scatter_tensor": "done(funcol.reduce_scatter_tensor(torch.ones(2 * W), 'sum', 0, G))",
    "funcol.reduce_scatter_tensor_autograd": "done(funcol.reduce_scatter_tensor_autograd(torch.ones(2 * W), 'sum', 0, G))",
    "funcol.reduce_scatter_tensor_coalesced": "done(funcol.reduce_scatter_tensor_coalesced([torch.ones(2 * W)], 'sum', "
                                              "[0], G))",
    "funcol.reduce_scatter_tensor_inplace": "funcol.reduce_scatter_tensor_inplace(torch.zeros(2), torch.ones(2 * W), "
                                            "group=G)",
    # ProcessGroup's methods, called as a script may
    "ProcessGroup.allreduce": "done(G.allreduce([torch.ones(2)]))",
    "ProcessGroup.allreduce_coalesced": "done(G.allreduce_coalesced([torch.ones(2)]))",
    "ProcessGroup.broadcast": "done(G.broadcast([torch.ones(2)]))",
    "ProcessGroup.reduce": "done(G.reduce([torch.ones(2)]))",
    "ProcessGroup.allgather": "done(G.allgather([[torch.zeros(2) for _ in range(W)]], [torch.ones(2)]))",
    "ProcessGroup._allgather_base": "done(G._allgather_base(torch.zeros(2 * W), torch.ones(2)))",
    "ProcessGroup.all_gather_single": "done(G.all_gather_single(torch.zeros(2 * W), torch.ones(2)))",
    "ProcessGroup.allgather_coalesced": "done(G.allgather_coalesced([[torch.zeros(2)] for _ in range(W)], "
                                        "[torch.ones(2)]))",
    "ProcessGroup.allgather_into_tensor_coalesced": "done(G.allgather_into_tensor_coalesced([torch.zeros(2 * W)], "
                                                    "[torch.ones(2)]))",
    "ProcessGroup.reduce_scatter": "done(G.reduce_scatter([torch.zeros(2)], [[torch.ones(2) for _ in range(W)]]))",
    "ProcessGroup._reduce_scatter_base": "done(G._reduce_scatter_base(torch.zeros(2), torch.ones(2 * W)))",
    "ProcessGroup.reduce_scatter_single": "done(G.reduce_scatter_single(torch.zeros(2), torch.ones(2 * W), "
                                          "dist.ReduceScatterOptions()))",
    "ProcessGroup.reduce_scatter_tensor_coalesced": "done(G.reduce_scatter_tensor_coalesced([torch.zeros(2)], "
                                                    "[torch.ones(2 * W)]))",
    "ProcessGroup.alltoall": "done(G.alltoall([torch.zeros(1) for _ in range(W)], [torch.ones(1) for _ in range(W)]))",
    "ProcessGroup.alltoall_base": "done(G.alltoall_base(torch.zeros(W), torch.ones(W), [], []))",
    "ProcessGroup.all_to_all_single": "done(G.all_to_all_single(torch.zeros(W), torch.ones(W), [], []))",
    "ProcessGroup.gather": "done(G.gather([[torch.zeros(2) for _ in range(W)]] if R == 0 else [], [torch.ones(2)]))",
    "ProcessGroup.scatter": "done(G.scatter([torch.zeros(2)], [[torch.ones(2) for _ in range(W)]] if R == 0 else []))",
    "ProcessGroup.all_gather_single_coalesced": "done(G.all_gather_single_coalesced([torch.zeros(2 * W)], "
                                                "[torch.ones(2)]))",
    "ProcessGroup.reduce_scatter_single_coalesced": "done(G.reduce_scatter_single_coalesced([torch.zeros(2)], "
                                                    "[torch.ones(2 * W)]))",
    "ProcessGroup.barrier": "done(G.barrier())",
    "ProcessGroup.monitored_barrier": "G.monitored_barrier()",
    "ProcessGroup.send": "done(G.send([torch.ones(2)], P, 0) if R == 0 else G.recv([torch.zeros(2)], P, 0))",
    "ProcessGroup.recv": "done(G.recv([torch.zeros(2)], P, 0) if R == 0 else G.send([torch.ones(2)], P, 0))",
    "ProcessGroup.recv_anysource": "done(G.recv_anysource([torch.zeros(2)], 0) if R == 0 else "
                                   "G.send([torch.ones(2)], P, 0))",
}

# Entry points that issue no op of their own (so nothing to record), and why.
NOT_OPS: dict[str, str] = {
    **{f"dist.{name}": "asks torch.distributed a question; no communication" for name in (
        "get_backend", "get_backend_config", "get_default_backend_for_device",
        "get_global_rank", "get_group_rank", "get_node_local_rank", "get_pg_count", "get_process_group_ranks",
        "get_rank", "get_world_size", "is_backend_available", "is_gloo_available", "is_initialized",
        "is_mpi_available", "is_nccl_available", "is_torchelastic_launched", "is_ucc_available",
        "is_xccl_available", "supports_complex")},
    "dist.init_process_group": "joins through the store (no process group op); the recorder writes who the "
                               "rank is and its clock offset then",
    "dist.destroy_process_group": "tears a group down; no op",
    "dist.new_group": "makes a group through the store (no op on an existing group)",
    "dist.new_subgroups": "makes groups through the store",
    "dist.new_subgroups_by_enumeration": "makes groups through the store",
    "dist.split_group": "makes a group from a backend that can split (nccl); no op",
    "dist.shrink_group": "remakes a group without some ranks (nccl); no op",
    "dist.record_comm": "a context manager naming the ops inside it (they are recorded as any)",
    "funcol.wait_tensor": "waits for an op issued before (it ends that op's record)",
    "funcol.allow_inflight_collective_as_graph_input_ctx": "a context manager for torch.compile; no op",
    "ProcessGroup._end_coalescing": "issues the ops queued since _start_coalescing (recorded when queued)",
}

# Entry points gloo cannot run here; the recorder covers them the same way (a ProcessGroup
# method wrapper; the c10d op's kernel), and why they are not exercised.
NOT_ON_GLOO: dict[str, str] = {}


def entry_points() -> set[str]:
    """Every public collective/p2p entry point of the installed torch, as CALLS names it."""
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    c10d = dist.distributed_c10d
    found = {f"dist.{name}" for name in c10d.__all__ if type(vars(c10d).get(name)) is types.FunctionType}
    found |= {f"funcol.{name}" for name, fn in vars(funcol).items()
              if not name.startswith("_") and inspect.isfunction(fn) and fn.__module__ == funcol.__name__
              and not name.endswith(("_backward", "_setup_context"))}      # autograd.Function internals
    found |= {f"ProcessGroup.{name}" for name, fn in vars(dist.ProcessGroup).items()
              if "c10d::Work" in (getattr(fn, "__doc__", "") or "") or name == "monitored_barrier"}
    return found


SCRIPT_HEAD = """
import json, os, sys, torch, torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from workloads import _trace
dist.init_process_group("gloo")
R, W = dist.get_rank(), dist.get_world_size()
P, G = 1 - R, dist.group.WORLD

def done(x):
    for item in (x if isinstance(x, list) else [x]):
        if hasattr(item, "wait"):
            item.wait()
        elif isinstance(item, torch.Tensor):
            funcol.wait_tensor(item)

"""
SCRIPT_TAIL = """
kernels = {name: torch._C._dispatch_has_kernel_for_dispatch_key("c10d::" + name, "Autograd")
           for name in _trace.c10d_ops()}
if R == 0:
    with open(sys.argv[1], "w") as f:
        json.dump({"lines": LINES, "kernels": kernels}, f)
dist.destroy_process_group()
"""


def script() -> str:
    """The script: one line per entry point (a barrier between, so no call blurs into the
    next), and LINES: entry point -> its line number."""
    head = SCRIPT_HEAD.splitlines()
    lines, where = list(head), {}
    for name, call in CALLS.items():
        lines.append(call)
        where[name] = len(lines)
        lines.append("dist.barrier()")
    lines.append(f"LINES = {where!r}")
    return "\n".join(lines) + "\n" + SCRIPT_TAIL
