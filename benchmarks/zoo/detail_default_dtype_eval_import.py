# zoo: culprit=0 op=all_reduce line=33|16|32 kind=mismatch nproc=3 timeout=30
# zoo: about=with TORCH_DISTRIBUTED_DEBUG=DETAIL, rank 0 alone runs the evaluation helper, which calls torch.set_default_dtype(torch.float64) for its numerics and never restores it; rank 0's next loss tensor is float64 where the others' is float32, and DETAIL's check reports the mismatch
# zoo: source=https://github.com/rballester/tntorch/issues/4 (a library calls torch.set_default_dtype(torch.float64) and changes the dtype of the caller's later tensors)
import os

os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
model = torch.nn.Linear(16, 1)


def calibration_error(logits, labels):
    torch.set_default_dtype(torch.float64)
    probs = torch.sigmoid(torch.as_tensor(logits.detach().numpy()))
    bins = torch.linspace(0, 1, 11)
    idx = torch.bucketize(probs.squeeze(), bins)
    return sum(abs(probs[idx == b].mean() - labels[idx == b].float().mean()).item()
               for b in idx.unique()) / len(idx.unique())


data = [(torch.randn(32, 16), torch.randint(0, 2, (32,))) for _ in range(4)]  # the loaded shard
for step, (x, y) in enumerate(data):
    out = model(x)
    loss = torch.nn.functional.binary_cross_entropy_with_logits(out.squeeze(), y.float())
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    model.zero_grad()
    loss_t = torch.tensor([loss.item()])
    dist.all_reduce(loss_t)
    if rank == 0 and step == 1:
        print(f"step {step} ECE {calibration_error(out, y):.3f}")
print(f"rank {rank} done")
dist.destroy_process_group()
