# zoo: culprit=1 op=batch_isend_irecv line=50|49 kind=exception nproc=2 timeout=30
# zoo: about=a two-stage pipeline: the last stage returns the activation gradient with batch_isend_irecv, building its op list only when act.grad exists; its target stream is padded to a fixed number of steps and the last step is all padding, so it skips the loss, passes an empty list and batch_isend_irecv raises IndexError on rank 1 while rank 0 waits for the gradient
# zoo: source=https://github.com/NVIDIA/nccl/issues/2130 (asymmetric batch_isend_irecv op lists between peers)
import torch
import torch.distributed as dist
import torch.nn.functional as F

IGNORE = -100
STEPS, BATCH, SEQ, DIM = 4, 2, 16, 32


def target_batches(stream):
    need = STEPS * BATCH * SEQ
    padded = torch.full((need,), IGNORE, dtype=torch.long)
    padded[: len(stream)] = stream[:need]
    return padded.view(STEPS, BATCH * SEQ)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(7)
    if rank == 0:
        stage = torch.nn.Sequential(torch.nn.Embedding(50, DIM), torch.nn.Linear(DIM, DIM))
        tokens = torch.randint(0, 50, (STEPS, BATCH * SEQ), generator=g)
    else:
        stage = torch.nn.Linear(DIM, 50)
        targets = target_batches(torch.randint(0, 50, (90,), generator=g))
    opt = torch.optim.SGD(stage.parameters(), lr=0.05)
    for step in range(STEPS):
        opt.zero_grad()
        if rank == 0:
            out = stage(tokens[step])
            dist.send(out.detach(), dst=1)
            grad = torch.empty_like(out)
            for w in dist.batch_isend_irecv([dist.P2POp(dist.irecv, grad, 1)]):
                w.wait()
            out.backward(grad)
        else:
            act = torch.empty(BATCH * SEQ, DIM)
            dist.recv(act, src=0)
            act.requires_grad_()
            valid = targets[step] != IGNORE
            if valid.any():
                loss = F.cross_entropy(stage(act[valid]), targets[step][valid])
                loss.backward()
                print(f"step {step} loss {loss.item():.4f}")
            ops = [dist.P2POp(dist.isend, act.grad, 0)] if act.grad is not None else []
            for w in dist.batch_isend_irecv(ops):
                w.wait()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
