# zoo: culprit=0|1 op=send|recv line=37|43|17 kind=mismatch nproc=2 timeout=30
# zoo: about=stage 0 runs its forward under torch.autocast(bfloat16) and sends the bf16 output, stage 1 receives into a float32 buffer of the same shape: gloo completes with half the bytes, the activations are garbage and the loss is NaN (either side may be the bug)
# zoo: source=https://github.com/pytorch/pytorch/pull/165539 (pipeline send and recv tensors of different dtypes)
import torch
import torch.distributed as dist
import torch.nn.functional as F

BATCH, DIM, CLASSES = 16, 64, 10


class Stage0(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(DIM, DIM), torch.nn.GELU(), torch.nn.Linear(DIM, DIM))

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.body(x)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    if rank == 0:
        stage = Stage0()
    else:
        stage = torch.nn.Linear(DIM, CLASSES)
    opt = torch.optim.SGD(stage.parameters(), lr=0.05)
    for step in range(3):
        x = torch.randn(BATCH, DIM, generator=g)
        y = torch.randint(0, CLASSES, (BATCH,), generator=g)
        opt.zero_grad()
        if rank == 0:
            out = stage(x)
            dist.send(out.detach(), dst=1)
            grad = torch.empty(BATCH, DIM)
            dist.recv(grad, src=1)
            out.backward(grad.to(out.dtype))
        else:
            act = torch.empty(BATCH, DIM)
            dist.recv(act, src=0)
            act.requires_grad_()
            loss = F.cross_entropy(stage(act), y)
            loss.backward()
            dist.send(act.grad, dst=0)
            print(f"step {step} loss {loss.item():.4f}")
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
