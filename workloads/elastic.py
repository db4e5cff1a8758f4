"""Workload `elastic`: a training loop that survives torchrun restarts by checkpointing.

torchrun's answer to a failed worker is to stop every worker of the job and
start them again (`--max-restarts`), after a new rendezvous that may have
fewer nodes (`--nnodes MIN:MAX`). Nothing survives in memory: a job that
wants to go on must save its state somewhere every node sees and load it when
it starts. This workload does exactly that, and records what each attempt saw:

- every attempt starts by joining the process group; global rank 0 loads the
  newest checkpoint (if any) and broadcasts the step and the parameters, so
  every rank resumes from the same state even when the ranks moved between
  nodes or the world shrank;
- each step is synchronous data parallelism on a fixed global batch of
  `global_batch` rows, split over whatever world size this attempt has: the
  averaged gradient is the global-batch gradient whatever the world size, so
  the final parameters must equal an uninterrupted single-process run;
- global rank 0 saves a checkpoint every `checkpoint_every` steps (write, then
  rename: a crash never leaves half a file).

Records (one per rank): `attempt` at the start of an attempt (restart count =
TORCHELASTIC_RESTART_COUNT, world size, the step it resumed from),
`checkpoint` at every checkpoint, `crash-injected` just before an injected
crash, `attempt_done` at the end; checks: every planned step done, the
parameters identical on every rank, and equal to the uninterrupted run.

The checkpoint lives in `$LAB_SHARED_DIR/<run id>/elastic/` (local: the run
folder's `shared/`; compose and k8s: the lab's shared volume), else in the
node's working directory.

Injected failures, once per lab run (a marker file next to the checkpoint says
it happened; torchrun's restart count cannot, see the report hook), when the
training reaches step `crash_at_step`: `crash_rank: R` makes global rank R exit
with code 1 (its agent stays and restarts the workers); `crash_node: N` makes
labctl's node N die entirely: its local rank 0 SIGKILLs the node's torchrun
agent, the agent's other workers and itself, as if the machine went away.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from . import _common, _proc
from .ddp import ATOL, RTOL, flat_params, make_data, make_model
from ._protocol import Env

TEE_S = 1.0      # torchrun's tee tails worker output files several times a second


def checkpoint_path() -> tuple[Path, bool]:
    """Where this run's checkpoint lives, and whether every node sees that directory."""
    shared = os.environ.get(Env.SHARED_DIR)
    run_id = os.environ.get(Env.RUN_ID, "run")
    if shared:
        return Path(shared) / run_id / "elastic" / "checkpoint.pt", True
    return Path.cwd() / f"elastic-checkpoint-{run_id}.pt", False


def slot() -> dict:
    """Which worker process this is, whatever rank it got: labctl's node index
    (NODE_RANK; torchrun's GROUP_RANK may change at every rendezvous), the local
    rank and the pid (a new process per attempt)."""
    return {"node": int(os.environ.get("NODE_RANK", "0") or 0),
            "local_rank": int(os.environ.get("LOCAL_RANK", "0") or 0), "pid": os.getpid()}


def process_started() -> float | None:
    """When this process began (epoch seconds, 10 ms steps): splits a restart into
    torchrun's part (until the new worker exists) and the worker's own (import, join)."""
    st = _proc.stat()
    return st.started() if st else None


def restart_count() -> int:
    """torchrun sets TORCHELASTIC_RESTART_COUNT for every attempt (0, 1, ...)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)


def save(path: Path, step: int, params: torch.Tensor, loss: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    torch.save({"step": step, "params": params.detach().cpu(), "loss": loss}, tmp)
    os.replace(tmp, path)


def resume(ctx: _common.Context, path: Path, model) -> int:
    """Rank 0 reads the checkpoint and broadcasts it: every rank starts from the same step."""
    params = flat_params(model).to(ctx.device)
    step = torch.zeros(1, dtype=torch.int64, device=ctx.device)
    if ctx.rank == 0 and path.is_file():
        saved = torch.load(path, map_location="cpu")
        step[0] = int(saved["step"])
        params = saved["params"].to(ctx.device)
    dist.broadcast(step, src=0)
    dist.broadcast(params, src=0)
    torch.nn.utils.vector_to_parameters(params, model.parameters())
    return int(step.item())


def crash_due(ctx: _common.Context, path: Path, crash_rank: int, crash_node: int) -> str | None:
    """"worker" or "node" when this process is the one to crash and nobody crashed yet.
    The marker is created atomically, so exactly one process crashes per lab run."""
    where = slot()
    if ctx.rank == crash_rank:
        how = "worker"
    elif where["node"] == crash_node and where["local_rank"] == 0:
        how = "node"
    else:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.close(os.open(path.with_name("crashed"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return None
    return how


def crash_now(ctx: _common.Context, how: str, step: int) -> None:
    """The injected failure: this worker alone, or its whole node (agent and workers)."""
    node = how == "node" and bool(os.environ.get("TORCHELASTIC_RUN_ID"))   # the parent is torchrun
    if node and os.getppid() == 1:
        # a container's PID 1 ignores SIGKILL from inside: only the workers die, the agent restarts them
        how = "node's workers; its agent is PID 1 and stays"
    # the agent forwards our output (--tee): a node crash waits for it to pass the record on,
    # and the record says when the kill happens
    at = time.time() + (TEE_S if node else 0.0)
    ctx.record("crash-injected", True, how=how, step=step, restart_count=restart_count(),
               world_size=ctx.world_size, time=at, **slot())
    if node:
        time.sleep(max(0.0, at - time.time()))
        agent = os.getppid()
        siblings = [st.pid for st in _proc.stats() if st.ppid == agent and st.pid != os.getpid()]
        for pid in [agent, *siblings]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(1)


def run(ctx: _common.Context, steps: int = 30, checkpoint_every: int = 5, step_sleep: float = 0.0,
        global_batch: int = 24, lr: float = 0.05, features: int = 8, hidden: int = 16,
        seed: int = 0, crash_rank: int = -1, crash_node: int = -1, crash_at_step: int = 0) -> None:
    attempt, n = restart_count(), ctx.world_size
    if global_batch % n:
        ctx.record("global-batch-splits-evenly", False, global_batch=global_batch, world_size=n,
                   detail=f"global_batch {global_batch} is not a multiple of world size {n}")
        return
    b = global_batch // n
    x, y = make_data(steps * global_batch, features, seed)
    x, y = x.to(ctx.device), y.to(ctx.device)
    path, shared = checkpoint_path()
    model = make_model(features, hidden, seed, ctx.device)
    first = resume(ctx, path, model)
    where = slot()
    ctx.record("attempt", True, restart_count=attempt, world_size=n, first_step=first,
               resumed=first > 0, group_rank=ctx.node_rank, checkpoint=str(path), shared=shared,
               time=time.time(), process_started=process_started(), **where)

    opt = torch.optim.SGD(model.parameters(), lr=lr)        # no momentum: no optimizer state
    loss = float("nan")
    for step in range(first, steps):
        if step == crash_at_step and (how := crash_due(ctx, path, crash_rank, crash_node)):
            crash_now(ctx, how, step)
        rows = slice(step * global_batch + ctx.rank * b, step * global_batch + (ctx.rank + 1) * b)
        opt.zero_grad()
        local = F.mse_loss(model(x[rows]), y[rows])
        local.backward()
        for p in model.parameters():                          # the global-batch gradient
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            p.grad /= n
        opt.step()
        total = local.detach().clone()
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        loss = float(total) / n
        done = step + 1
        if done % checkpoint_every == 0 or done == steps:
            if ctx.rank == 0:
                save(path, done, flat_params(model), loss)
            ctx.record("checkpoint", True, step=done, loss=loss, restart_count=attempt,
                       world_size=n, time=time.time(), **where)
        if step_sleep > 0:
            time.sleep(step_sleep)

    ctx.record("attempt_done", True, restart_count=attempt, world_size=n, first_step=first,
               steps_done=steps - first, loss=loss, time=time.time(), **where)
    params = flat_params(model)
    hi, lo = params.clone(), params.clone()
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    ctx.check("params-identical-on-all-ranks", hi, lo, max_spread=float((hi - lo).abs().max()))
    final = torch.zeros(1, dtype=torch.int64, device=ctx.device)
    if ctx.rank == 0 and path.is_file():
        final[0] = int(torch.load(path, map_location="cpu")["step"])
    dist.broadcast(final, src=0)
    ctx.check("all-steps-completed", int(final.item()), steps, checkpointed_step=int(final.item()),
              steps=steps)

    # The same steps in one process on the whole global batch, never interrupted.
    reference = make_model(features, hidden, seed, ctx.device)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=lr)
    for step in range(steps):
        rows = slice(step * global_batch, (step + 1) * global_batch)
        ref_opt.zero_grad()
        F.mse_loss(reference(x[rows]), y[rows]).backward()
        ref_opt.step()
    ref = flat_params(reference)
    ctx.check("matches-uninterrupted-run", params, ref, rtol=RTOL, atol=ATOL,
              max_abs_diff=float((params - ref).abs().max()))


if __name__ == "__main__":
    from .__main__ import main_single

    main_single("elastic")
