# zoo: culprit=0 op=all_reduce line=16|29|25 kind=exception nproc=3 timeout=30
# zoo: about=rank 0 streams its step metrics into a pager process left over from debugging (head -n 5); once head has its five lines it exits, and rank 0's next write raises BrokenPipeError, while the others wait in the next all_reduce
# zoo: source=https://errcodes.dev/python/brokenpipeerror (writing into a pipe whose reader, such as head, has exited raises BrokenPipeError)
import subprocess
import time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
log = subprocess.Popen(["head", "-n", "5"], stdin=subprocess.PIPE, text=True) if rank == 0 else None


def log_metrics(step, loss):
    if log is not None:
        log.stdin.write(f"step={step} loss={loss:.5f}\n")
        log.stdin.flush()


model = torch.nn.Linear(64, 64)
for step in range(20):
    loss = model(torch.randn(32, 64)).pow(2).mean()
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    model.zero_grad()
    t = torch.tensor([loss.item()])
    dist.all_reduce(t)
    log_metrics(step, t.item() / world)
    time.sleep(0.1)
print(f"rank {rank} done")
dist.destroy_process_group()
