# zoo: culprit=2 op=all_reduce line=24|33|38 kind=exception nproc=3 timeout=30
# zoo: about=on resume every rank restores its own RNG state file with torch.load, whose default is weights_only=True since torch 2.6; rank 2 reads the audio shard whose augmentations use numpy, so its file also holds numpy's RNG state, and the restricted unpickler rejects the numpy globals: rank 2 raises UnpicklingError while the others wait in the first gradient all_reduce
# zoo: source=https://github.com/huggingface/transformers/issues/40500
import os
import tempfile

import numpy as np
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
AUGMENT_BACKEND = ["torch", "torch", "numpy"][rank]     # rank 2 reads the audio shard


def save_rng_state(path):                 # what the interrupted run wrote with its last checkpoint
    state = {"torch": torch.get_rng_state()}
    if AUGMENT_BACKEND == "numpy":
        state["numpy"] = np.random.get_state()
    torch.save(state, path)


def restore_rng_state(path):
    state = torch.load(path)
    torch.set_rng_state(state["torch"])
    if "numpy" in state:
        np.random.set_state(state["numpy"])


with tempfile.TemporaryDirectory() as ckpt_dir:
    path = os.path.join(ckpt_dir, f"rng_state_{rank}.pth")
    save_rng_state(path)
    restore_rng_state(path)

w = torch.zeros(32)
for step in range(3):
    grad = torch.randn(32)
    dist.all_reduce(grad)
    w -= 0.1 * grad / world
dist.destroy_process_group()
