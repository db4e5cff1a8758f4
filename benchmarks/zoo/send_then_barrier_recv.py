# zoo: culprit=1|0 op=barrier|send line=20|15 kind=deadlock nproc=2 timeout=40
# zoo: about=rank 0 pushes the refreshed weights to the rollout rank with a blocking send and then joins the barrier; rank 1 joins the barrier first and receives after it: the 32 MB send cannot complete until rank 1 receives, and rank 1 waits in the barrier for rank 0
# zoo: source=https://github.com/pytorch/pytorch/pull/11275 (a send may block until the matching recv is posted: a large send whose receiver is doing something else deadlocks)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
weights = torch.nn.Linear(2048, 4096)
buf = torch.empty(4096 * 2048)


def publish_weights(model):
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])[: buf.numel()]
    dist.send(flat, dst=1)
    dist.barrier()


def pull_weights():
    dist.barrier()
    dist.recv(buf, src=0)
    return buf


for it in range(2):
    if rank == 0:
        publish_weights(weights)
    else:
        w = pull_weights()
        print(f"iteration {it}: got weights, norm {w.norm():.2f}")
dist.destroy_process_group()
