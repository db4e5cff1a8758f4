# zoo: culprit=0|1 op=send|recv line=19|22|12 kind=deadlock nproc=2 timeout=40
# zoo: about=the pipeline names each message by a string and derives the p2p tag with Python's hash(); string hashes are salted per process (PYTHONHASHSEED), so the sender's and the receiver's tags differ and the receive never matches
# zoo: source=https://github.com/sktime/pytorch-forecasting/issues/2293 (hash() of a str depends on PYTHONHASHSEED, so each DDP rank gets a different value for the same key)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()


def tag_for(name, microbatch):
    return (hash(name) + microbatch) % 10000


stage = torch.nn.Linear(64, 64)
for mb in range(3):
    if rank == 0:
        act = stage(torch.randn(8, 64)).detach()
        dist.send(act, dst=1, tag=tag_for("activations", mb))
    else:
        act = torch.empty(8, 64)
        dist.recv(act, src=0, tag=tag_for("activations", mb))
        print(f"microbatch {mb}: {stage(act).sum().item():.3f}")
dist.destroy_process_group()
