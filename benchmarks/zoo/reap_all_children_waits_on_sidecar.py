# zoo: culprit=1 op=all_reduce line=26|38|33 kind=hang nproc=3 timeout=30
# zoo: about=each rank decodes its shard files in short-lived subprocesses and then reaps them with a loop of os.wait() until ChildProcessError; rank 1 is the metrics rank and also runs a long-lived uploader subprocess, so os.wait() on rank 1 blocks on a child that never exits, while ranks 0 and 2 wait for it in the gradient all_reduce
# zoo: source=https://github.com/perfsonar/project/issues/662
import os
import subprocess
import sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
METRICS_RANK = 1
SHARD_FILES = [f"part-{rank}-{i}.arrow" for i in range(3)]

uploader = None
if rank == METRICS_RANK:
    uploader = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                                stdin=subprocess.PIPE)


def decode_shard(files):
    for name in files:
        subprocess.Popen([sys.executable, "-c", "pass", name])
    while True:
        try:
            os.wait()
        except ChildProcessError:
            return


model = torch.nn.Linear(8, 1)
for epoch in range(2):
    decode_shard(SHARD_FILES)
    for step in range(3):
        model.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)

if uploader is not None:
    uploader.stdin.close()
    uploader.wait()
dist.barrier()
dist.destroy_process_group()
