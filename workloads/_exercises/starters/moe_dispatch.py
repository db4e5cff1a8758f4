"""Exercise moe_dispatch: a mixture-of-experts layer's dispatch and combine (docs/patterns.md,
ep): each token goes to its expert's rank, the expert answers, and each answer comes
back to its token's place.

Check it on the lab:   labctl exercise check moe_dispatch THIS_FILE

The contract
    moe_dispatch(tokens, expert_of, expert, out) is called by every rank at once. Rank j
    holds expert j. `tokens` (T, d, float32) are this rank's tokens, `expert_of` (T,
    int64) the expert each one goes to (a router decided: some experts get many, some
    none), `expert` this rank's expert (a torch.nn.Module: (any, d) -> (any, d)). `out`
    (T, d) holds garbage. When your function returns, out[i] holds expert
    expert_of[i]'s answer for tokens[i] (as every expert run in one process gives it);
    tokens and expert_of are unchanged.
    Move the tokens with dist.all_to_all_single and uneven splits (input_split_sizes,
    output_split_sizes).

What the check looks at (docs/exercises.md)
    values    equal to every expert run in one process (float32 within 1e-5 + 1e-5 x
              |value|), for world sizes 4, 3 and 2
    traffic   bytes handed to the collectives: the counts (n int64), each token once out
              and each answer once back; splits padded to a capacity are more
    waits     every async op waited on before you return
    deadline  every call returns within 5 s

Hints
    - Sort the tokens by expert (torch.argsort(expert_of, stable=True)): the splits are
      then contiguous, their sizes torch.bincount(expert_of, minlength=n).
    - A rank does not know how many tokens it will receive from each rank: exchange the
      counts first (an all_to_all_single of n int64s).
    - The combine is the mirror call: the split sizes swapped. Then put each answer back
      in its token's place (out[order] = ...).
"""
import torch
import torch.distributed as dist


def moe_dispatch(tokens: torch.Tensor, expert_of: torch.Tensor, expert: torch.nn.Module, out: torch.Tensor) -> None:
    world = dist.get_world_size()
    order = torch.argsort(expert_of, stable=True)
    raise NotImplementedError("exchange the counts, dispatch the tokens, run the expert, combine the answers")
