"""Workload `pp`: pipeline parallelism with torch.distributed.pipelining.

The model is a chain of stages (Linear + Tanh, the last a plain Linear), stage s on rank
s % n: one stage per rank for GPipe and 1F1B, two (stages r and r + n) for the
interleaved 1F1B. Each step splits the batch into `microbatches`; a stage sends each
microbatch's activation to the next stage's rank (send/recv: torch's batch_isend_irecv)
and, in backward, the gradient of its input back to the previous stage's rank:

- gpipe (`ScheduleGPipe`): every microbatch forward, then every one backward;
- 1f1b (`Schedule1F1B`): after a warm-up, one forward and one backward in turn, so a stage
  keeps at most n microbatches' activations instead of all of them;
- interleaved (`ScheduleInterleaved1F1B`): two stages per rank, the bubble smaller, twice
  the messages.

Bytes per rank per step: (stages that send forward + stages that send backward on this
rank) x microbatches x A, A one microbatch's activation (rows x d x 4): the first and
last ranks send half what the middle ones do. Rank 0 trains the same chain in ONE process
on the same microbatches (gradients summed in the same order, / microbatches as the
schedule's scale_grads does); each rank's stages and the loss must be bitwise equal to
its: the same operations in the same order (TOLERANCE 0). The first step's bytes are not checked: the stages
learn each other's shapes then (a few hundred bytes of objects). `schedule`: all, or a comma list of gpipe, 1f1b,
interleaved.

The measured schedule: each stage's work is `Work`, `compute_ms` of sleep in forward and twice that in
backward, standing for the stage's compute (0: none). A sleep, not matmuls or a busy-wait: 4 ranks on 2
shared cores time-share the CPU, so busy work would stretch with whatever else runs and the bubble
measured would be the machine's, not the schedule's; a sleep takes its time whatever the load, and the
sends, receives and Python around it stay small beside it. Each rank prints `<schedule>-schedule`, a data
record with every forward's and backward's [begin, end] on its wall clock per step and microbatch; the
plugin measures the bubble from them (workloads/_report/pp.py) and draws them as a Gantt chart.
"""
from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from torch import nn

from . import _common, _patterns

SCHEDULES = ("gpipe", "1f1b", "interleaved")
TOLERANCE = 0.0                      # bitwise: the same ops in the same order


def run(ctx: _common.Context, schedule: str = "all", microbatches: int = 4, batch: int = 8, d: int = 16,
        steps: int = 3, lr: float = 0.05, seed: int = 0, compute_ms: float = 10.0) -> None:
    n, me = ctx.world_size, ctx.rank
    names = _patterns.variants(schedule, SCHEDULES)
    if n < 2:
        for name in names:
            ctx.skip(f"{name}-matches-single-process", "a pipeline needs at least 2 ranks")
        return
    x, y = _patterns.data(steps * batch, d, d, seed)
    batches = [(x[s * batch:(s + 1) * batch], y[s * batch:(s + 1) * batch]) for s in range(steps)]
    rows = batch // microbatches
    for name in names:
        per_rank = 2 if name == "interleaved" else 1
        total = n * per_rank
        shapes = [p.detach() for p in nn.Sequential(*chain(total, d, seed)).parameters()]
        ref = reference(total, d, seed, batches, microbatches, lr) if me == 0 else None
        ref_params = _patterns.from_rank0(ref[0] if ref else None, shapes)
        ref_losses = [float(v) for v in _patterns.from_rank0([torch.tensor(ref[1])] if ref else None,
                                                             [torch.zeros(steps)])[0]]
        traffic = _patterns.Traffic()
        clock = Clock(compute_ms / 1000.0)
        mine, losses = train(name, total, d, seed, batches, microbatches, rows, lr, traffic, n, me, clock)
        ctx.show(f"{name}-schedule", op="pipeline", intervals=clock.intervals, microbatches=microbatches,
                 stages_per_rank=per_rank, ranks=n, compute_ms=compute_ms, steps=len(batches))
        params = [p.detach() for s in mine for p in s.parameters()]
        want = [ref_params[2 * s + k] for s in range(me, total, n) for k in (0, 1)]
        _patterns.matches(ctx, name, _patterns.global_losses(losses), ref_losses, params, want, TOLERANCE,
                          stages=list(range(me, total, n)))
        act = rows * d * 4
        formula = _patterns.pp_bytes(me, n, per_rank, microbatches, act)
        _patterns.bytes_check(ctx, name, traffic, formula,
                              f"(stages sending forward + stages sending backward) x M x A, M = {microbatches}, "
                              f"A = {act} B", microbatches=microbatches, stages_per_rank=per_rank,
                              activation_bytes=act, ranks=n, warmup=1)


def chain(total: int, d: int, seed: int) -> list[nn.Module]:
    torch.manual_seed(seed)
    return [nn.Sequential(nn.Linear(d, d), nn.Tanh()) if s < total - 1 else nn.Sequential(nn.Linear(d, d))
            for s in range(total)]


def reference(total, d, seed, batches, microbatches, lr):
    """ONE process: the whole chain, microbatch by microbatch, gradients / microbatches."""
    model = nn.Sequential(*chain(total, d, seed))
    opt = _patterns.SGD(model.parameters(), lr)
    losses = []
    for x, y in batches:
        opt.zero_grad()
        parts = []
        for mx, my in zip(x.chunk(microbatches), y.chunk(microbatches)):
            loss = F.mse_loss(model(mx), my)
            loss.backward()
            parts.append(loss.detach())
        for p in model.parameters():
            p.grad.div_(microbatches)
        opt.step()
        losses.append(float(torch.stack(parts).mean()))
    return [p.detach().clone() for p in model.parameters()], losses


class Clock:
    """Each stage's forwards and backwards, timed: [step, stage, microbatch, "F" or "B",
    begin µs, end µs] on this rank's wall clock (the trace's clock before its offset)."""

    def __init__(self, seconds: float):
        self.seconds, self.step = seconds, -1
        self.intervals: list[list] = []
        self.forwards: dict[int, int] = {}

    def next_step(self) -> None:
        self.step, self.forwards = self.step + 1, {}

    def work(self, stage: int, microbatch: int, kind: str, seconds: float) -> None:
        begin = time.time_ns() // 1000
        if seconds > 0:
            time.sleep(seconds)
        self.intervals.append([self.step, stage, microbatch, kind, begin, time.time_ns() // 1000])


class Work(torch.autograd.Function):
    """The stage's compute: the identity, `clock.seconds` of sleep forward and twice that
    backward (a backward costs about two forwards), each timed. A stage's forwards come in
    microbatch order in every schedule, so the count is the microbatch; its backward is told
    which one by the forward's ctx."""

    @staticmethod
    def forward(ctx, x, clock, stage):
        if x.device.type == "meta":           # the schedule learning shapes: no work to time
            return x.view_as(x)
        microbatch = clock.forwards.get(stage, 0)
        clock.forwards[stage] = microbatch + 1
        clock.work(stage, microbatch, "F", clock.seconds)
        ctx.clock, ctx.stage, ctx.microbatch = clock, stage, microbatch
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        ctx.clock.work(ctx.stage, ctx.microbatch, "B", 2 * ctx.clock.seconds)
        return grad, None, None


class Timed(nn.Module):
    """A stage's module, then its `Work` (the same values: bitwise as before)."""

    def __init__(self, inner: nn.Module, clock: Clock, stage: int):
        super().__init__()
        self.inner, self.clock, self.stage = inner, clock, stage

    def forward(self, x):
        return Work.apply(self.inner(x), self.clock, self.stage)


def train(name, total, d, seed, batches, microbatches, rows, lr, traffic, n, me, clock):
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

    modules = chain(total, d, seed)
    mine = [modules[s] for s in range(me, total, n)]
    stages = [PipelineStage(Timed(modules[s], clock, s), s, total, torch.device("cpu")) for s in range(me, total, n)]
    loss_fn = F.mse_loss
    if name == "interleaved":
        schedule = ScheduleInterleaved1F1B(stages, microbatches, loss_fn=loss_fn)
    else:
        schedule = (ScheduleGPipe if name == "gpipe" else Schedule1F1B)(stages[0], microbatches, loss_fn=loss_fn)
    opt = _patterns.SGD([p for m in mine for p in m.parameters()], lr)
    first, last = me == 0, (total - 1) % n == me
    losses = []
    with traffic:
        for x, y in batches:
            traffic.step()
            clock.next_step()
            opt.zero_grad()
            parts: list = []
            schedule.step(*((x,) if first else ()), **({"target": y, "losses": parts} if last else {}))
            opt.step()
            losses.append(float(torch.stack(parts).mean()) if last else 0.0)
    return mine, losses


if __name__ == "__main__":
    from .__main__ import main_single

    main_single("pp")
