# zoo: culprit=3 op=all_reduce line=24|20|40 kind=hang nproc=4 timeout=30
# zoo: about=checkpoint shards are written under a BoundedSemaphore(2) that caps concurrent writes, released only on the success path; rank 3 holds the expert parameters, whose names contain a slash, so the first write of each checkpoint fails until the retry loop creates the subdirectory, and every failure leaks a permit: at the second checkpoint rank 3 blocks in acquire() for ever while the others wait in the gradient all_reduce
# zoo: source=https://github.com/dice-group/gerbil/issues/350
import os
import tempfile
import threading
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
PARAMS = [["embed", "attn.qkv"], ["attn.proj", "mlp.fc1"], ["mlp.fc2", "norm"],
          ["experts/0.w1", "experts/1.w1"]][rank]
WRITE_SLOTS = threading.BoundedSemaphore(2)
ckpt_root = tempfile.mkdtemp(prefix=f"ckpt_rank{rank}_")
state = {name: torch.randn(16) for name in PARAMS}


def write_shard(path, tensor):
    WRITE_SLOTS.acquire()
    try:
        torch.save(tensor, path)
    except (OSError, RuntimeError):
        return False
    WRITE_SLOTS.release()
    return True


def save_checkpoint(step):
    root = os.path.join(ckpt_root, f"step{step}")
    os.makedirs(root, exist_ok=True)
    for name, tensor in state.items():
        path = os.path.join(root, name + ".pt")
        while not write_shard(path, tensor):
            os.makedirs(os.path.dirname(path), exist_ok=True)


for step in range(1, 7):
    grad = torch.full((128,), float(rank))
    dist.all_reduce(grad)
    if step % 2 == 0:
        save_checkpoint(step)

dist.barrier()
print(f"rank {rank}: done", flush=True)
dist.destroy_process_group()
