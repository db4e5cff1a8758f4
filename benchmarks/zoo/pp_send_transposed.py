# zoo: culprit=1 op=send line=29|18 kind=exception nproc=3 timeout=30
# zoo: about=a three-stage pipeline: stage 1's block returns its activations through a transpose (sequence-first for the next stage) and sends that view as is; gloo refuses a non-contiguous tensor on rank 1, stage 2 waits in recv
# zoo: source=https://github.com/pytorch/pytorch/pull/114982
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

BATCH, SEQ, HID = 2, 6, 8
torch.manual_seed(rank)
block = torch.nn.Linear(HID, HID)


def stage_forward(h):
    out = torch.relu(block(h))
    if rank == 1:
        out = out.transpose(0, 1)             # [seq, batch, hid] for the last stage
    return out


with torch.no_grad():
    for mb in range(3):
        if rank == 0:
            dist.send(stage_forward(torch.randn(BATCH, SEQ, HID)), dst=1)
        elif rank == 1:
            h = torch.empty(BATCH, SEQ, HID)
            dist.recv(h, src=0)
            dist.send(stage_forward(h), dst=2)  # the bug: a transposed view, not .contiguous()
        else:
            h = torch.empty(SEQ, BATCH, HID)
            dist.recv(h, src=1)
            print("mb", mb, "out", stage_forward(h).sum().item())
dist.destroy_process_group()
