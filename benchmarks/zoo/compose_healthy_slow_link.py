# zoo: culprit=none kind=pass backend=compose nodes=2 nproc=1 links=1=10mbit timeout=120
# zoo: about=three 32 MiB all_reduces over a 10 Mbit/s link, about 27 s a call: slow, not stalled (the expectation sets the window, not the floor)
# zoo: source=https://github.com/meta-pytorch/tnt/pull/858 (slow collectives taken for hangs)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(8 << 20)               # 32 MiB of float32
for step in range(3):
    dist.all_reduce(t)
dist.destroy_process_group()
