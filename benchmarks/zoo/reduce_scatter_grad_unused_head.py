# zoo: culprit=2 op=reduce_scatter_tensor line=40|38 kind=exception nproc=3 timeout=30
# zoo: about=ZeRO-2 style step: each rank flattens its gradients and reduce_scatters them into its shard, skipping parameters whose grad is None; the auxiliary head is used only for batches that carry a rare label, so on rank 2 (no such label at step 1) the flat buffer is short and torch raises there, the others wait in the reduce_scatter
# zoo: source=https://github.com/deepspeedai/DeepSpeed/pull/291 (Empty grad fix: ranks skipping None gradients flatten buffers of different sizes and the reduction is imbalanced)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(16, 16)
        self.head = torch.nn.Linear(16, 4)
        self.aux_head = torch.nn.Linear(16, 2)

    def forward(self, x, rare):
        h = torch.relu(self.body(x))
        out = self.head(h).sum()
        if rare.any():
            out = out + self.aux_head(h[rare]).sum()
        return out


model = Model()
params = list(model.parameters())
total = sum(p.numel() for p in params)
padded = (total + world - 1) // world * world
shard = torch.zeros(padded // world)

for step in range(3):
    g = torch.Generator().manual_seed(step * 10 + rank)
    x = torch.randn(8, 16, generator=g)
    rare = torch.rand(8, generator=g) < (0.0 if (rank == 2 and step == 1) else 0.5)
    model(x, rare).backward()
    flat = torch.cat([p.grad.reshape(-1) for p in params if p.grad is not None])
    flat = torch.nn.functional.pad(flat, (0, padded - total))
    dist.reduce_scatter_tensor(shard, flat)
    for p in params:
        p.grad = None
    print(f"rank {rank} step {step} shard norm {shard.norm():.3f}")
dist.destroy_process_group()
