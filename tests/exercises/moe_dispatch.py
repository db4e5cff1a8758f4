"""Reference: MoE dispatch and combine. Sort the tokens by expert, exchange the counts,
all_to_all_single the tokens with uneven splits, run the expert on what came, and the
mirror call brings each answer home, put back in order. Tests only."""
import torch
import torch.distributed as dist


def moe_dispatch(tokens, expert_of, expert, out):
    n = dist.get_world_size()
    order = torch.argsort(expert_of, stable=True)
    counts = torch.bincount(expert_of, minlength=n)
    coming = torch.empty_like(counts)
    dist.all_to_all_single(coming, counts)
    send_sizes, recv_sizes = counts.tolist(), coming.tolist()
    inbox = tokens.new_empty(sum(recv_sizes), tokens.shape[1])
    dist.all_to_all_single(inbox, tokens[order].contiguous(), recv_sizes, send_sizes)
    answers = expert(inbox).contiguous()
    back = torch.empty(tokens.shape[0], answers.shape[1], dtype=answers.dtype)
    dist.all_to_all_single(back, answers, send_sizes, recv_sizes)
    out[order] = back
