# zoo: culprit=1 op=all_reduce line=28|37|27 kind=abort nproc=3 timeout=30
# zoo: about=gradual unfreezing: the backbone joins training once the validation loss stops improving, and each rank judges that on its own validation shard; the gradients are all_reduced as one flat buffer of the trainable parameters, so when rank 1's small shard plateaus first its buffer grows by the backbone's gradients while the others still send only the head's, and gloo's size check aborts a rank
# zoo: source=https://github.com/Lightning-AI/pytorch-lightning/issues/20340
import torch
import torch.distributed as dist
import torch.nn as nn

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
backbone, head = nn.Linear(32, 64), nn.Linear(64, 4)
model = nn.Sequential(backbone, nn.ReLU(), head)
backbone.requires_grad_(False)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
VAL_SIZE, LABEL_NOISE = [(256, 0.0), (8, 3.0), (256, 0.0)][rank]    # rank 1: a small, noisily labelled split
g = torch.Generator().manual_seed(rank)
val_x = torch.randn(VAL_SIZE, 32, generator=g)
val_y = val_x[:, :4] + LABEL_NOISE * torch.randn(VAL_SIZE, 4, generator=g)
best = float("inf")

for epoch in range(4):
    for step in range(5):
        x = torch.randn(32, 32, generator=torch.Generator().manual_seed(100 * epoch + 10 * step + rank))
        loss = nn.functional.mse_loss(model(x), x[:, :4])
        opt.zero_grad()
        loss.backward()
        flat = torch.cat([p.grad.flatten() for p in model.parameters() if p.requires_grad])
        dist.all_reduce(flat)
        offset = 0
        for p in (p for p in model.parameters() if p.requires_grad):
            p.grad.copy_(flat[offset:offset + p.numel()].view_as(p) / world)
            offset += p.numel()
        opt.step()
    with torch.no_grad():
        val = nn.functional.mse_loss(model(val_x), val_y).item()
    if val > best * 0.99 and not backbone.weight.requires_grad:
        backbone.requires_grad_(True)               # plateau: unfreeze the backbone
    best = min(best, val)
dist.destroy_process_group()
