# zoo: culprit=1 op=reduce_scatter_tensor|all_gather_into_tensor line=29|22|30 kind=hang nproc=2 timeout=40
# zoo: about=gradient accumulation with FSDP2: the loop turns gradient sync off for the micro-batches before the last, counting micro-batches from the rank's own batch list; rank 1's loader yields one micro-batch more, so on the last micro-batch of the step rank 0 reduce-scatters while rank 1 still has sync off and goes on to its extra micro-batch's forward: the two ranks' FSDP collectives no longer pair up and the step hangs
# zoo: source=https://github.com/huggingface/picotron/pull/5 (one rank's gradient-sync flag goes wrong under accumulation) https://github.com/pytorch/torchtitan/issues/292 (set_requires_gradient_sync(is_last_microbatch))
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
mesh = init_device_mesh("cpu", (world,))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
for layer in model:
    if isinstance(layer, torch.nn.Linear):
        fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def micro_batches(step):
    n = 3 if rank == 1 else 2                        # rank 1's packed sequences split into one more
    return [torch.randn(4, 16) for _ in range(n)]


for step in range(3):
    batches = micro_batches(step)
    for i, x in enumerate(batches):
        model.set_requires_gradient_sync(i == len(batches) - 1)
        model(x).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
    print(f"rank {rank} step {step}", flush=True)
dist.destroy_process_group()
