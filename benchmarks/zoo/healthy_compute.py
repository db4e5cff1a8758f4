# zoo: culprit=none kind=pass nproc=2 timeout=120
# zoo: about=every rank computes for 60 s with no op in flight, then all_reduces: slow, not stalled
# zoo: source=https://github.com/sgl-project/sglang/issues/3784 (a long load taken for a hang by the watchdog)
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(16)
dist.all_reduce(t)
a = torch.randn(256, 256)
end = time.monotonic() + 60
while time.monotonic() < end:         # the compute phase
    a = torch.tanh(a @ a)
dist.all_reduce(t)
dist.destroy_process_group()
