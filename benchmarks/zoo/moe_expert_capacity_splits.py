# zoo: culprit=2 op=all_to_all_single line=16|32|33 kind=abort nproc=4 timeout=60
# zoo: about=an expert-parallel MoE layer (one expert a rank): the counts are exchanged, then rank 2's expert clips what it takes from each rank at its capacity while the senders still send every token routed to it, so the dispatch's split sizes disagree
# zoo: source=https://github.com/deepspeedai/DeepSpeed/issues/5794 https://github.com/radixark/miles/issues/1002
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


class Dispatch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, out_splits, in_splits):
        ctx.splits = out_splits, in_splits
        out = x.new_empty((sum(out_splits), x.shape[1]))
        dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits)
        return out


torch.manual_seed(1)
router = torch.randn(16, world)
torch.manual_seed(100 + rank)
tokens = torch.randn(24, 16)
chosen = (tokens @ router).argmax(-1)
order = torch.argsort(chosen, stable=True)
send = torch.bincount(chosen, minlength=world)
recv = torch.empty_like(send)
dist.all_to_all_single(recv, send)        # how many tokens each rank will send me
recv_splits = recv.tolist()
if rank == 2:
    capacity = 4                          # the bug: the expert drops other ranks' tokens over capacity
    recv_splits = [c if src == rank else min(c, capacity) for src, c in enumerate(recv_splits)]
arrived = Dispatch.apply(tokens[order], recv_splits, send.tolist())
expert = torch.nn.Linear(16, 16)
print(rank, arrived.shape, expert(arrived).sum().item())
dist.barrier()
dist.destroy_process_group()
