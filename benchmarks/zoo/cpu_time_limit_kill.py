# zoo: culprit=1 op=all_reduce line=18|19|13 kind=killed nproc=3 timeout=30
# zoo: about=rank 1's node enforces a CPU-time limit (ulimit -t); its compute passes it and the kernel kills it with SIGXCPU, the others wait in all_reduce
# zoo: source=https://github.com/MLDataAnalytics/pNet/issues/6
import resource
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

if rank == 1:
    used = int(resource.getrusage(resource.RUSAGE_SELF).ru_utime)
    resource.setrlimit(resource.RLIMIT_CPU, (used + 3, resource.RLIM_INFINITY))
w = torch.randn(256, 256)
for step in range(200):
    x = torch.randn(512, 256)
    for _ in range(20):
        x = torch.tanh(x @ w)
    dist.all_reduce(x[:1].contiguous())
dist.destroy_process_group()
