# zoo: culprit=1 op=all_reduce line=30|33|21 kind=killed nproc=2 timeout=30
# zoo: about=the cluster sends SIGUSR1 to every task as a preemption notice; the requeue handler is installed only on rank 0 ("the main process requeues"), so on rank 1 the signal's default action terminates the process mid-training and rank 0 loses its peer
# zoo: source=https://github.com/NVIDIA/nccl/issues/704 (Slurm's SIGUSR1 used as a preemption notification) https://github.com/facebookincubator/submitit/pull/1780 (rank != 0 tasks on a requeued Slurm job)
import os
import signal
import threading
import time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
preempted = threading.Event()


def on_preempt(signum, frame):
    preempted.set()


if rank == 0:
    signal.signal(signal.SIGUSR1, on_preempt)
# stands in for `scancel --signal=USR1`: the notice reaches every task of the job ~3 s in
threading.Timer(3.0, os.kill, (os.getpid(), signal.SIGUSR1)).start()

model = torch.nn.Linear(64, 64)
for step in range(40):
    loss = model(torch.randn(32, 64)).pow(2).mean()
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    model.zero_grad()
    stop = torch.tensor([float(preempted.is_set())])
    dist.all_reduce(stop)
    if stop.item() > 0:
        if rank == 0:
            torch.save(model.state_dict(), "/tmp/zoo_preempt_ckpt.pt")
        break
    time.sleep(0.2)
print(f"rank {rank} stopped at step {step}")
dist.destroy_process_group()
