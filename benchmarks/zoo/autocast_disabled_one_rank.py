# zoo: culprit=1 op=all_gather_into_tensor line=24|31|13|19 kind=abort nproc=3 timeout=30
# zoo: about=the forward runs under torch.autocast(device_type from the node's ACCELERATOR variable, bf16); rank 1's node says "cuda" on a CPU-only host, so autocast is disabled there (a warning) and its activations stay float32; the sequence-parallel all_gather_into_tensor then carries twice the bytes from rank 1 and gloo aborts a peer
# zoo: source=https://github.com/Lightning-AI/pytorch-lightning/issues/21815
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

if rank == 1:
    os.environ["ACCELERATOR"] = "cuda"        # rank 1's node image is the GPU one
torch.manual_seed(0)
block = torch.nn.Linear(16, 16)


def forward_context():
    return torch.autocast(device_type=os.environ.get("ACCELERATOR", "cpu"), dtype=torch.bfloat16)


def gather_sequence(h):
    out = h.new_empty(world * h.shape[0], *h.shape[1:])   # dtype follows the local activation
    dist.all_gather_into_tensor(out, h.contiguous())
    return out


for step in range(3):
    with forward_context():
        h = block(torch.randn(4, 16))          # this rank's slice of the sequence
    full = gather_sequence(h)
    print(rank, step, full.dtype, full.shape)
dist.destroy_process_group()
