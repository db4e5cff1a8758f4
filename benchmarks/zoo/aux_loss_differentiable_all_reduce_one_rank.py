# zoo: culprit=1 op=all_reduce line=19|38 kind=mismatch nproc=3 timeout=30
# zoo: about=the logging helper averages a loss term over ranks with the autograd-aware torch.distributed.nn.functional.all_reduce when the term requires grad, and with dist.all_reduce otherwise; the router's balance loss only requires grad when the batch reaches the MoE layer, which happens on rank 1 alone, so rank 1's backward runs the extra all_reduce of that term's gradient while the others are already in the gradient all_reduce, and gloo aborts rank 1 on the size mismatch (SIGABRT)
# zoo: source=https://github.com/pytorch/pytorch/issues/140563
import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_nn

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
dense = torch.nn.Linear(16, 16)
router = torch.nn.Linear(16, 4)
SEQ_LENS = [96, 640, 128]
MOE_MIN_TOKENS = 512


def global_mean(x):
    if x.requires_grad:
        return dist_nn.all_reduce(x) / world
    x = x.detach().clone()
    dist.all_reduce(x)
    return x / world


for step in range(2):
    n_tok = SEQ_LENS[rank]
    h = dense(torch.randn(n_tok, 16))
    if n_tok >= MOE_MIN_TOKENS:
        probs = router(h).softmax(-1)
        balance = (probs.mean(0) * 4).pow(2).sum().reshape(1)
    else:
        balance = torch.zeros(1)
    loss = h.pow(2).mean() + 0.01 * balance.sum()
    logged_balance = global_mean(balance)
    total = loss + 0.0 * logged_balance.sum()
    dense.zero_grad()
    router.zero_grad()
    total.backward()
    for p in list(dense.parameters()) + list(router.parameters()):
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad)
    if rank == 0:
        print(f"step {step}: balance {logged_balance.item():.4f}", flush=True)

dist.barrier()
dist.destroy_process_group()
