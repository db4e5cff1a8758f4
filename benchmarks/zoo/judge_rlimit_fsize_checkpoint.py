# zoo: culprit=0 op=barrier line=44|15 kind=exception nproc=3 timeout=30
# zoo: about=rank 0 is the reward judge: its scoring helper applies the sandbox's resource limits (RLIMIT_FSIZE 1 MiB) to the trainer process itself instead of to the child that runs the program; the final checkpoint is larger than 1 MiB, so torch.save on rank 0 fails (file too large: 'unexpected pos') while the others wait in the barrier
# zoo: source=https://github.com/NVIDIA-NeMo/RL/pull/2208 (code-execution limits applied in a supervised child, not the actor)
import os
import resource
import subprocess
import sys
import tempfile
import torch
import torch.distributed as dist


def reliability_guard(max_bytes=1 << 20):
    # keep generated programs from filling the disk or the memory
    resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))
    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))


def score_program(src, workdir):
    reliability_guard()
    path = os.path.join(workdir, "prog.py")
    with open(path, "w") as f:
        f.write(src)
    res = subprocess.run([sys.executable, path], capture_output=True, timeout=10)
    return float(res.returncode == 0 and res.stdout.strip() == b"6")


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256))
    workdir = tempfile.mkdtemp(prefix="judge-")
    for step in range(2):
        reward = torch.zeros(1)
        if rank == 0:  # rank 0 is the judge
            reward[0] = score_program("print(sum([1, 2, 3]))", workdir)
        dist.broadcast(reward, src=0)
        loss = model(torch.randn(8, 256)).pow(2).mean() * (1 - reward[0])
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
    if rank == 0:
        torch.save(model.state_dict(), os.path.join(workdir, "final.pt"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
