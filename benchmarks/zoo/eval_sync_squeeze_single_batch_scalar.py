# zoo: culprit=2 op=all_reduce line=17|27|20 kind=mismatch nproc=3 timeout=30
# zoo: about=the eval sync helper all_gathers per-batch loss vectors and all_reduces scalars, deciding on the tensor's ndim; the per-batch losses are stacked and squeezed, and rank 2's eval shard fits in a single batch, so squeeze() leaves it a 0-dim scalar: rank 2 calls all_reduce while ranks 0 and 1 call all_gather, and all three wait for ever
# zoo: source=https://github.com/huggingface/accelerate/pull/152
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
EVAL_SAMPLES = [48, 48, 16][rank]
BATCH = 16
torch.manual_seed(rank)
model = torch.nn.Linear(8, 1)


def sync(value):
    if value.ndim == 0:
        dist.all_reduce(value)
        return value / world
    parts = [torch.zeros_like(value) for _ in range(world)]
    dist.all_gather(parts, value)
    return torch.cat(parts)


with torch.no_grad():
    x = torch.randn(EVAL_SAMPLES, 8)
    batch_losses = [model(xb).pow(2).mean() for xb in x.split(BATCH)]
    losses = torch.stack(batch_losses).squeeze()
    all_losses = sync(losses)
if rank == 0:
    print(f"eval loss over {all_losses.numel()} batches: {all_losses.mean().item():.4f}", flush=True)
dist.barrier()
dist.destroy_process_group()
