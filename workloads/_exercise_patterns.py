"""The exercise runner's cases for the four parallelism patterns (docs/exercises.md,
docs/patterns.md): column-parallel linear, a 1F1B pipeline step, ring attention's ring and
the MoE dispatch. Every rank makes every rank's inputs from the case's seed, so each works
out the whole answer in one process (the reference), hands the learner its own part,
calls the function under the runner's watches (`Runner.call`) and compares what came
back. Each call's record carries the shapes its traffic optimum is made of (`dims`).
"""
from __future__ import annotations

import copy
import math
from typing import Any, Callable

from ._protocol.exercises import Case

SEED_SLOTS = 100                    # the parameters' slots, apart from the inputs'


def run_case(runner: Any, exercise: str, fn: Callable, world: int, case: Case) -> bool:
    return CASES[exercise](runner, fn, world, case)


def _linear(runner: Any, case: Case, world: int, owner: int, width_in: int, width_out: int):
    """A Linear layer whose parameters come from the seed (owner's slots): the same on
    every rank that makes it."""
    torch = runner.torch
    layer = torch.nn.Linear(width_in, width_out)
    with torch.no_grad():
        for i, p in enumerate(layer.parameters()):
            p.copy_(runner.tensor(case, world, owner, SEED_SLOTS + i, p.numel()).view_as(p))
    return layer.to(runner.device)


# ---------------------------------------------------------------- column-parallel linear

def column_parallel(runner: Any, fn: Callable, world: int, case: Case) -> bool:
    """y = x @ W + b with W (d_in x d_out) split by columns (torch.tensor_split): rank r
    holds W[:, its columns] and b[its columns]; every rank must end with the whole y."""
    torch = runner.torch
    r = runner.rank
    tokens, d_in, d_out = case.dim("tokens"), case.dim("d_in"), case.dim("d_out")
    x = runner.tensor(case, world, 0, 0, tokens * d_in).view(tokens, d_in)
    w = runner.tensor(case, world, 0, 1, d_in * d_out).view(d_in, d_out)
    b = runner.tensor(case, world, 0, 2, d_out)
    expected = x @ w + b
    weight = torch.tensor_split(w, world, dim=1)[r].contiguous()
    bias = torch.tensor_split(b, world)[r].clone()
    out = runner.sentinel(expected)
    before = [t.clone() for t in (x, weight, bias)]
    window = runner.call(fn, (x, weight, bias, out), "column_parallel", world, case, runner.config.deadline)
    problems = runner.compare("out", out, expected)
    for name, now, was in zip(("x", "weight", "bias"), (x, weight, bias), before):
        problems += runner.unchanged(name, now, was)
    return runner.emit_call("column_parallel", world, case, window, problems, d_out, x.element_size(),
                            dims={"tokens": tokens, "d_in": d_in, "d_out": d_out})


# ---------------------------------------------------------------- 1F1B pipeline

def pipeline_1f1b(runner: Any, fn: Callable, world: int, case: Case) -> bool:
    """One training step of a chain of `world` stages (Linear + Tanh, stage r on rank r)
    over M microbatches: the loss is the mean over microbatches of mse_loss(output,
    target). Every stage's gradients must be the whole chain's in one process."""
    torch = runner.torch
    r = runner.rank
    m, rows, width = case.dim("microbatches"), case.dim("rows"), case.dim("width")
    stages = [torch.nn.Sequential(_linear(runner, case, world, s, width, width), torch.nn.Tanh())
              for s in range(world)]
    inputs = [runner.tensor(case, world, 0, k, rows * width).view(rows, width) for k in range(m)]
    targets = [runner.tensor(case, world, world - 1, m + k, rows * width).view(rows, width) for k in range(m)]
    mine = copy.deepcopy(stages[r])
    loss = sum(torch.nn.functional.mse_loss(torch.nn.Sequential(*stages)(x), t) for x, t in zip(inputs, targets))
    (loss / m).backward()
    expected = {n: p.grad.clone() for n, p in stages[r].named_parameters()}
    before = {n: p.detach().clone() for n, p in mine.named_parameters()}
    given = [x.clone() for x in inputs] if r == 0 else [runner.sentinel(inputs[0]) for _ in range(m)]
    given_before = [x.clone() for x in given]
    mine_targets = [t.clone() for t in targets] if r == world - 1 else None
    window = runner.call(fn, (mine, list(given), mine_targets), "pipeline_1f1b", world, case,
                         runner.config.deadline)
    problems = []
    for name, p in mine.named_parameters():
        if p.grad is None:
            problems.append(f"stage {r}'s {name}.grad is None: backward of every microbatch must reach "
                            "every stage's parameters")
            continue
        problems += runner.compare(f"stage {r}'s {name}.grad", p.grad, expected[name])
        if not torch.equal(p.detach(), before[name]):
            problems.append(f"you changed stage {r}'s parameter {name}: leave the step to the optimizer")
    if r == 0:
        problems += [p for k in range(m) for p in runner.unchanged(f"microbatches[{k}]", given[k], given_before[k])]
    if mine_targets is not None:
        problems += [p for k in range(m) for p in runner.unchanged(f"targets[{k}]", mine_targets[k], targets[k])]
    return runner.emit_call("pipeline_1f1b", world, case, window, problems, rows * width, 4,
                            dims={"microbatches": m, "rows": rows, "width": width})


# ---------------------------------------------------------------- ring attention

def ring_attention(runner: Any, fn: Callable, world: int, case: Case) -> bool:
    """One head of attention over a sequence cut into `world` equal blocks, rank r holding
    block r of Q, K and V: out must be rank r's rows of softmax(Q K^T / sqrt(d)) V over the
    whole sequence (not causal)."""
    torch = runner.torch
    r = runner.rank
    t, d = case.dim("tokens"), case.dim("head_dim")
    q, k, v = ([runner.tensor(case, world, j, slot, t * d).view(t, d) for j in range(world)] for slot in range(3))
    scores = torch.cat(q).double() @ torch.cat(k).double().T / math.sqrt(d)
    whole = (torch.softmax(scores, dim=-1) @ torch.cat(v).double()).float()
    expected = whole[r * t:(r + 1) * t]
    mine = [q[r].clone(), k[r].clone(), v[r].clone()]
    out = runner.sentinel(expected)
    window = runner.call(fn, (*mine, out), "ring_attention", world, case, runner.config.deadline)
    problems = runner.compare("out", out, expected)
    for name, now, was in zip("qkv", mine, (q[r], k[r], v[r])):
        problems += runner.unchanged(name, now, was)
    return runner.emit_call("ring_attention", world, case, window, problems, t * d, 4,
                            dims={"tokens": t, "head_dim": d})


# ---------------------------------------------------------------- MoE dispatch

def _routing(runner: Any, case: Case, world: int, rank: int, tokens: int):
    """Rank `rank`'s expert for each of its tokens (int64), from the case's seed."""
    torch = runner.torch
    if case.kind == "one expert":
        return torch.zeros(tokens, dtype=torch.int64)
    if case.kind == "own expert":
        return torch.full((tokens,), rank, dtype=torch.int64)
    return runner.tensor(case, world, rank, 1, tokens).abs().mul(1000).long() % world


def moe_dispatch(runner: Any, fn: Callable, world: int, case: Case) -> bool:
    """One MoE layer's forward: rank j holds expert j (a Linear of width d) and T tokens,
    each routed to one expert; out[i] must be expert_of[i]'s answer for token i."""
    torch = runner.torch
    r = runner.rank
    t, d = case.dim("tokens"), case.dim("width")
    experts = [_linear(runner, case, world, j, d, d).requires_grad_(False) for j in range(world)]
    tokens = [runner.tensor(case, world, j, 0, t * d).view(t, d) for j in range(world)]
    routes = [_routing(runner, case, world, j, t).to(runner.device) for j in range(world)]
    expected = torch.empty_like(tokens[r])
    for e in range(world):
        chosen = routes[r] == e
        expected[chosen] = experts[e](tokens[r][chosen])
    received = int(sum(int((route == r).sum()) for route in routes))
    mine = (tokens[r].clone(), routes[r].clone())
    out = runner.sentinel(expected)
    window = runner.call(fn, (*mine, copy.deepcopy(experts[r]), out), "moe_dispatch", world, case,
                         runner.config.deadline)
    problems = runner.compare("out", out, expected)
    problems += runner.unchanged("tokens", mine[0], tokens[r]) + runner.unchanged("expert_of", mine[1], routes[r])
    return runner.emit_call("moe_dispatch", world, case, window, problems, t, 4,
                            dims={"tokens": t, "width": d, "received": received, "all_tokens": t * world,
                                  "own": int((routes[r] == r).sum())})


CASES: dict[str, Callable[[Any, Callable, int, Case], bool]] = {
    "column_parallel": column_parallel, "pipeline_1f1b": pipeline_1f1b,
    "ring_attention": ring_attention, "moe_dispatch": moe_dispatch}
