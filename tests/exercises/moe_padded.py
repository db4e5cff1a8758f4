"""Classic mistake: every split padded to a capacity (here every token a rank holds, as
if all could go to one expert), so all_to_all_single moves equal blocks: right values, n
times the tokens' bytes. Tests only: the traffic check must fail it and say to use uneven
splits."""
import torch
import torch.distributed as dist


def moe_dispatch(tokens, expert_of, expert, out):
    n = dist.get_world_size()
    capacity, width = tokens.shape
    padded = tokens.new_zeros(n, capacity, width)
    slots = []
    for e in range(n):
        chosen = (expert_of == e).nonzero().flatten()
        padded[e, :len(chosen)] = tokens[chosen]
        slots.append(chosen)
    counts = torch.tensor([len(s) for s in slots])
    coming = torch.empty_like(counts)
    dist.all_to_all_single(coming, counts)
    inbox = torch.empty_like(padded)
    dist.all_to_all_single(inbox, padded)
    answers = torch.zeros_like(inbox)
    for j in range(n):
        answers[j, :coming[j]] = expert(inbox[j, :coming[j]])
    back = torch.empty_like(answers)
    dist.all_to_all_single(back, answers)
    for e in range(n):
        out[slots[e]] = back[e, :len(slots[e])]
